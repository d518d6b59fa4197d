/* cmd/plan: `gpupool plan` — will a model fit, where, and with what context
 * and how many slots.  Options in, plan_compute() out, printed as a table or
 * as the same JSON /v1/plan returns.  Exit status: 0 fits (or no GPU given),
 * 1 does not fit, 2 error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cmd/cmd.h"
#include "plan/ggml_types.h"
#include "plan/plan.h"
#include "worker/measured.h"

#define GiB (1024.0 * 1024 * 1024)

static void usage(FILE *f)
{
    fprintf(f,
            "usage: gpupool plan MODEL.gguf [options]\n"
            "       gpupool plan --model PRESET [--quant Q4_K_M] [options]\n"
            "       gpupool plan --table | --list-presets\n"
            "\n"
            "Works out the memory a model needs under llama.cpp, from the GGUF header alone.\n"
            "\n"
            "options:\n"
            "  --ctx N               context per slot, tokens (default 4096)\n"
            "  --parallel N, -np N   slots sharing one unified KV cache (default 1)\n"
            "  --cache-type-k T      K cache type: f16 bf16 f32 q8_0 q4_0 q4_1 iq4_nl q5_0 q5_1 (default f16)\n"
            "  --cache-type-v T      V cache type, same choices; quantized V needs --flash-attn\n"
            "  --flash-attn, -fa     flash attention (no KQ score matrix)\n"
            "  --ubatch N, -ub N     physical batch (default 512)\n"
            "  --ngl N               layers on the GPUs; 'all' (default) = every layer and the output\n"
            "  --gpu 12G,8G,16G      free memory per GPU (bare numbers are GiB); enables the fit check\n"
            "  --margin X            safety margin: '5%%' (or 5) of each GPU's need (default) or a size like '512M'\n"
            "  --overhead SIZE       per-GPU engine overhead (default 384M)\n"
            "  --json                print JSON (the POST /v1/plan answer)\n"
            "  --measured FILE       set beside the estimate what an engine allocated for this file and\n"
            "                        these settings, from a worker's measured.json (or its data directory)\n"
            "  --model PRESET        plan a built-in architecture instead of a file\n"
            "  --quant Q             quant tier for --model (default Q4_K_M)\n"
            "  --table               which sizes fit which cards at 4K context, 1 slot\n"
            "  --list-presets        the built-in architectures and quant tiers\n"
            "\n"
            "exit status: 0 fits (or no --gpu given), 1 does not fit, 2 error\n");
}

static int fail(const char *fmt, const char *a)
{
    fprintf(stderr, "gpupool plan: ");
    fprintf(stderr, fmt, a);
    fputc('\n', stderr);
    return 2;
}

static bool is_opt(const char *arg, const char *a, const char *b)
{
    return !strcmp(arg, a) || (b && !strcmp(arg, b));
}

static int parse_u32(const char *s, uint32_t min, uint32_t *out)
{
    char *end;
    if (!s || !*s) return -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end || s[0] == '-' || v < min || v > UINT32_MAX) return -1;
    *out = (uint32_t)v;
    return 0;
}

static void human(char *out, size_t n, uint64_t b)
{
    if (b >= (uint64_t)GiB) snprintf(out, n, "%.2f GiB", (double)b / GiB);
    else if (b >= 1024 * 1024) snprintf(out, n, "%.1f MiB", (double)b / (1024.0 * 1024));
    else if (b >= 1024) snprintf(out, n, "%.1f KiB", (double)b / 1024.0);
    else snprintf(out, n, "%llu B", (unsigned long long)b);
}

static void params_str(char *out, size_t n, uint64_t p)
{
    if (p >= 1000000000ull) snprintf(out, n, "%.2f B", (double)p / 1e9);
    else snprintf(out, n, "%.0f M", (double)p / 1e6);
}

static void row(const char *label, const plan_result *r, uint64_t host, const uint64_t *gpu, bool show_host)
{
    char b[32];
    printf("  %-16s", label);
    if (show_host) {
        human(b, sizeof b, host);
        printf(" %12s", b);
    } else {
        printf(" %12s", "");
    }
    for (uint32_t g = 0; g < r->n_gpu; g++) {
        human(b, sizeof b, gpu[g]);
        printf(" %12s", b);
    }
    printf("\n");
}

static void print_text(const plan_model *m, const plan_settings *s, const plan_result *r)
{
    char a[32], b[32];
    if (m->file_bytes) human(a, sizeof a, m->file_bytes);
    printf("%s (%s, %s%s%s)\n", m->name, m->arch, m->quant, m->file_bytes ? ", file " : ", preset",
           m->file_bytes ? a : "");
    params_str(a, sizeof a, m->params_total);
    if (m->n_expert) {
        params_str(b, sizeof b, m->params_active);
        printf("  parameters   %s total, %s active (%u of %u experts; all experts count towards memory)\n", a, b,
               m->n_expert_used, m->n_expert);
    } else {
        printf("  parameters   %s\n", a);
    }
    printf("  layers       %u, trained context %llu%s%s%s\n", m->n_layer, (unsigned long long)m->n_ctx_train,
           m->n_swa ? ", sliding window" : "", m->is_mla ? ", MLA" : "", plan_model_is_recurrent(m) ? ", recurrent state" : "");
    printf("  settings     ctx %u x %u slot%s = %u KV cells", s->ctx, s->parallel, s->parallel == 1 ? "" : "s",
           r->kv_cells);
    if (m->n_swa) printf(" (%u on sliding-window layers)", r->kv_cells_swa);
    printf(", K %s / V %s, flash-attn %s, ubatch %u, ngl %u/%u\n", ggml_type_get(s->type_k)->name,
           ggml_type_get(s->type_v)->name, s->flash_attn ? "on" : "off", r->ubatch, r->ngl, m->n_layer + 1);
    if (plan_model_has_kv(m)) {
        human(a, sizeof a, r->kv_bytes_per_token);
        printf("  KV per token %s\n", a);
    }
    printf("\n  %-16s %12s", "", "host");
    for (uint32_t g = 0; g < r->n_gpu; g++) {
        char n[16];
        snprintf(n, sizeof n, "gpu%u", g);
        printf(" %12s", n);
    }
    printf("\n  %-16s", "layers");
    const plan_dev *devs[PLAN_MAX_GPUS + 1];
    devs[0] = &r->host;
    for (uint32_t g = 0; g < r->n_gpu; g++) devs[g + 1] = &r->gpu[g];
    for (uint32_t i = 0; i <= r->n_gpu; i++) {
        const plan_dev *d = devs[i];
        char l[32] = "-";
        if (d->layer_count)
            snprintf(l, sizeof l, "%u-%u%s", d->layer_first, d->layer_first + d->layer_count - 1, d->output ? "+out" : "");
        else if (d->output)
            snprintf(l, sizeof l, "out");
        printf(" %12s", l);
    }
    printf("\n");
    uint64_t v[PLAN_MAX_GPUS];
#define ROW(label, field, host_too)                                           \
    do {                                                                       \
        for (uint32_t g = 0; g < r->n_gpu; g++) v[g] = r->gpu[g].field;        \
        row(label, r, r->host.field, v, host_too);                             \
    } while (0)
    ROW("weights", weights, true);
    ROW("KV cache", kv, true);
    if (plan_model_is_recurrent(m)) ROW("recurrent state", state, true);
    ROW("compute buffer", compute, false);
    ROW("overhead", overhead, false);
    char ml[48];
    if (s->margin_bytes) human(a, sizeof a, s->margin_bytes);
    snprintf(ml, sizeof ml, "margin %s", s->margin_bytes ? a : "");
    if (!s->margin_bytes) snprintf(ml, sizeof ml, "margin %g%%", s->margin_pct);
    ROW(ml, margin, false);
    ROW("total", total, true);
    if (r->fit_known) {
        ROW("free", free, false);
        printf("  %-16s %12s", "fits", "");
        for (uint32_t g = 0; g < r->n_gpu; g++) printf(" %12s", r->gpu[g].fits ? "yes" : "NO");
        printf("\n");
    }
#undef ROW
    printf("\n");
    if (!r->fit_known) {
        human(a, sizeof a, r->gpu[0].total);
        printf("needs %s on one GPU (give --gpu 12G,... to check the fit)\n", a);
    } else {
        printf("%s\n", r->fits ? "fits" : "does NOT fit");
        uint32_t mc = plan_max_ctx(m, s), mp = plan_max_parallel(m, s);
        if (mc)
            printf("  largest context at %u slot%s: %u tokens per slot%s\n", s->parallel, s->parallel == 1 ? "" : "s", mc,
                   mc == m->n_ctx_train ? " (the trained context)" : "");
        else
            printf("  no context fits at %u slot%s with --ngl %u\n", s->parallel, s->parallel == 1 ? "" : "s", r->ngl);
        if (mp) printf("  most slots at %u context: %u\n", s->ctx, mp);
        if (!r->fits) {
            int ngl = plan_max_ngl(m, s);
            if (ngl < 0) {
                printf("  partial offload: not even the output and compute buffers fit\n");
            } else {
                const char *cls;
                double slow = plan_slowdown(m, s, ngl, &cls);
                printf("  partial offload: --ngl %d of %u fits; token generation about %.1fx slower (%s)\n", ngl,
                       m->n_layer + 1, slow, cls);
            }
        }
        if (s->n_gpu > 1) {
            printf("  split: layers in proportion to free memory (llama.cpp's default -ts)");
            for (uint32_t g = 0; g < r->n_gpu; g++)
                if (r->gpu[g].layer_count)
                    printf("%s gpu%u %u-%u", g ? "," : ":", g, r->gpu[g].layer_first,
                           r->gpu[g].layer_first + r->gpu[g].layer_count - 1);
            printf("\n");
        }
    }
    printf("  llama-server -c %llu -np %u -ngl %u -ctk %s -ctv %s -fa %s -ub %u --kv-unified\n",
           (unsigned long long)s->ctx * s->parallel, s->parallel, r->ngl, ggml_type_get(s->type_k)->name,
           ggml_type_get(s->type_v)->name, s->flash_attn ? "on" : "off", r->ubatch);
}

/* The measurement of this file at these settings, from a worker's file
 * (or data directory): 1 found, 0 none, -1 unreadable (reason printed). */
static int find_measured(const char *where, const char *file, const plan_settings *s, measured_entry *out)
{
    char path[1100], err[600];
    struct stat st;
    if (stat(where, &st) == 0 && S_ISDIR(st.st_mode)) snprintf(path, sizeof path, "%.1000s/measured.json", where);
    else snprintf(path, sizeof path, "%.1000s", where);
    measured_key k;
    if (measured_key_for(file, (int)s->ctx, (int)s->parallel, ggml_type_get(s->type_k)->name,
                         ggml_type_get(s->type_v)->name, s->flash_attn, &k, err, sizeof err) ||
        measured_lookup(path, &k, out, err, sizeof err) < 0) {
        fprintf(stderr, "gpupool plan: --measured: %s\n", err);
        return -1;
    }
    return measured_lookup(path, &k, out, err, sizeof err);
}

static void ratio_row(const char *label, uint64_t plan, uint64_t engine)
{
    char a[32], b[32], r[16] = "-";
    human(a, sizeof a, plan);
    human(b, sizeof b, engine);
    if (plan) snprintf(r, sizeof r, "%.2f", (double)engine / (double)plan);
    printf("  %-16s %12s %12s %12s\n", label, a, b, r);
}

/* The estimate beside what an engine allocated on its GPUs. */
static void print_measured(const plan_settings *s, const plan_result *r, const measured_entry *e, const char *where)
{
    char when[40] = "";
    time_t t = (time_t)e->measured_at;
    struct tm tm;
    if (t) strftime(when, sizeof when, ", %Y-%m-%d %H:%M UTC", gmtime_r(&t, &tm));
    printf("\nmeasured by an engine (%s%s):\n", where, when);
    printf("  %-16s %12s %12s %12s\n", "", "planner", "engine", "engine/plan");
    ratio_row("weights (GPU)", r->weights, e->model_bytes);
    ratio_row("KV cache", r->kv + r->state, e->kv_bytes);
    ratio_row("compute buffer", r->compute, e->compute_bytes);
    uint64_t plan_bufs = r->weights + r->kv + r->state + r->compute;
    ratio_row("buffers", plan_bufs, measured_total(e));
    uint64_t need = measured_total(e) + s->overhead;
    need += (uint64_t)((double)need * s->margin_pct / 100.0) + s->margin_bytes;
    char a[32], b[32];
    human(a, sizeof a, need);
    human(b, sizeof b, r->gpu[0].total);
    printf("  a worker offers it with %s (buffers + overhead + margin; the planner's need is %s)\n", a, b);
}

static json_t *measured_to_json(const plan_settings *s, const plan_result *r, const measured_entry *e)
{
    json_t *j = measured_json(e);
    uint64_t need = measured_total(e) + s->overhead;
    need += (uint64_t)((double)need * s->margin_pct / 100.0) + s->margin_bytes;
    uint64_t plan_bufs = r->weights + r->kv + r->state + r->compute;
    json_object_set_new(j, "need_bytes", json_integer((json_int_t)need));
    json_object_set_new(j, "measured_at", json_integer((json_int_t)e->measured_at));
    json_object_set_new(j, "engine_over_plan", json_real(plan_bufs ? (double)measured_total(e) / (double)plan_bufs : 0));
    return j;
}

static int print_table(const plan_settings *base)
{
    static const char *const sizes[] = {"7b", "13b", "32b", "70b"};
    static const char *const labels[] = {"7B", "13B", "32B", "70B"};
    static const char *const quants[] = {"F16", "Q8_0", "Q4_K_M"};
    static const double cards[] = {8, 12, 16, 24, 48};
    printf("Fits at 4096 context, 1 slot, f16 KV, every layer on one GPU (overhead and margin included)\n\n");
    printf("%-5s %-7s %10s", "model", "quant", "needs");
    for (size_t c = 0; c < sizeof cards / sizeof cards[0]; c++) printf("  %4.0f GB", cards[c]);
    printf("\n");
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        for (size_t q = 0; q < sizeof quants / sizeof quants[0]; q++) {
            char err[256], b[32];
            plan_model *m = plan_model_preset(sizes[i], quants[q], err, sizeof err);
            if (!m) return fail("%s", err);
            plan_settings s = *base;
            s.ctx = 4096;
            s.parallel = 1;
            uint64_t need = plan_need_bytes(m, &s, 4096, 1);
            human(b, sizeof b, need);
            printf("%-5s %-7s %10s", labels[i], quants[q], b);
            for (size_t c = 0; c < sizeof cards / sizeof cards[0]; c++)
                printf("  %7s", need <= (uint64_t)(cards[c] * GiB) ? "yes" : "-");
            printf("\n");
            plan_model_free(m);
        }
    }
    printf("\n(7B = Llama-2-7B, 13B = Llama-2-13B, 32B = Qwen2.5-32B, 70B = Llama-3.1-70B shapes)\n");
    return 0;
}

static void list_presets(void)
{
    printf("presets (--model):\n");
    for (size_t i = 0; i < plan_preset_count(); i++) printf("  %-18s %s\n", plan_preset_name(i), plan_preset_desc(i));
    printf("\nquant tiers (--quant), average bits per weight:\n ");
    for (size_t i = 0; i < plan_quant_count(); i++)
        printf(" %s %.2f%s", plan_quant_at(i)->name, plan_quant_at(i)->bpw, (i + 1) % 6 ? "," : ",\n ");
    printf("\n");
}

static int parse_gpus(const char *list, plan_settings *s)
{
    char tmp[512];
    if (strlen(list) >= sizeof tmp) return -1;
    snprintf(tmp, sizeof tmp, "%s", list);
    s->n_gpu = 0;
    char *save = NULL;
    for (char *t = strtok_r(tmp, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (s->n_gpu == PLAN_MAX_GPUS || plan_parse_size(t, 'G', &s->gpu_free[s->n_gpu]) < 0) return -1;
        s->n_gpu++;
    }
    return s->n_gpu ? 0 : -1;
}

int cmd_plan(int argc, char **argv)
{
    plan_settings s;
    plan_settings_init(&s);
    const char *file = NULL, *preset = NULL, *quant = NULL, *measured = NULL;
    bool json = false, table = false;
    for (int i = 1; i < argc; i++) {
        char *arg = argv[i], *val = NULL, *eq = NULL;
        if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
            usage(stdout);
            return 0;
        }
        if (arg[0] != '-') {
            if (file) return fail("more than one model file given ('%s')", arg);
            file = arg;
            continue;
        }
        if (!strncmp(arg, "--", 2) && (eq = strchr(arg, '='))) {
            *eq = 0;
            val = eq + 1;
        }
#define IS(a, b) is_opt(arg, a, b)
#define NEXT() (val ? val : (i + 1 < argc ? argv[++i] : NULL))
        bool flag = IS("--flash-attn", "-fa") || IS("--json", NULL) || IS("--table", NULL) || IS("--list-presets", NULL);
        if (flag) {
            if (val) return fail("%s takes no value", arg);
            if (IS("--flash-attn", "-fa")) s.flash_attn = true;
            else if (IS("--json", NULL)) json = true;
            else if (IS("--table", NULL)) table = true;
            else {
                list_presets();
                return 0;
            }
            continue;
        }
        const char *v = NEXT();
        if (!v) return fail("%s needs a value", arg);
        if (IS("--ctx", "-c")) {
            if (parse_u32(v, 1, &s.ctx) < 0) return fail("--ctx wants a positive number of tokens, not '%s'", v);
        } else if (IS("--parallel", "-np")) {
            if (parse_u32(v, 1, &s.parallel) < 0 || s.parallel > 4096)
                return fail("--parallel wants 1..4096 slots, not '%s'", v);
        } else if (IS("--cache-type-k", "-ctk") || IS("--cache-type-v", "-ctv")) {
            int t = ggml_type_from_name(v);
            if (t < 0) return fail("unknown cache type '%s' (f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1)", v);
            if (IS("--cache-type-k", "-ctk")) s.type_k = (uint32_t)t;
            else s.type_v = (uint32_t)t;
        } else if (IS("--ubatch", "-ub")) {
            if (parse_u32(v, 1, &s.ubatch) < 0) return fail("--ubatch wants a positive number, not '%s'", v);
        } else if (IS("--ngl", "-ngl")) {
            uint32_t n;
            if (!strcmp(v, "all") || !strcmp(v, "-1")) s.ngl = PLAN_NGL_ALL;
            else if (parse_u32(v, 0, &n) == 0 && n <= 100000) s.ngl = (int32_t)n;
            else return fail("--ngl wants a layer count or 'all', not '%s'", v);
        } else if (IS("--gpu", NULL)) {
            if (parse_gpus(v, &s) < 0) return fail("--gpu wants free memory per GPU like 12G,8G,16G (at most 16), not '%s'", v);
        } else if (IS("--margin", NULL)) {
            json_t *j = json_pack("{s:s}", "margin", v);
            char err[256];
            int rc = plan_settings_from_json(j, &s, err, sizeof err);
            json_decref(j);
            if (rc < 0) return fail("%s", err);
        } else if (IS("--overhead", NULL)) {
            if (plan_parse_size(v, 0, &s.overhead) < 0) return fail("--overhead wants a size like 384M, not '%s'", v);
        } else if (IS("--model", "-m")) {
            preset = v;
        } else if (IS("--quant", NULL)) {
            quant = v;
        } else if (IS("--measured", NULL)) {
            measured = v;
        } else {
            return fail("unknown option '%s' (see gpupool plan --help)", arg);
        }
#undef IS
#undef NEXT
    }
    if (table) return print_table(&s);
    if (file && preset) return fail("%s", "give a model file or --model, not both");
    if (!file && !preset) return fail("%s", "no model: give MODEL.gguf or --model PRESET (see --help)");
    if (quant && !preset) return fail("%s", "--quant goes with --model; a file's quant is read from the file");
    if (measured && !file) return fail("%s", "--measured goes with a model file: measurements are per file");

    char err[512];
    plan_model *m = file ? plan_model_open(file, err, sizeof err) : plan_model_preset(preset, quant, err, sizeof err);
    if (!m) {
        if (file) fprintf(stderr, "gpupool plan: %s: %s\n", file, err);
        else fprintf(stderr, "gpupool plan: %s\n", err);
        return 2;
    }
    plan_result r;
    if (plan_compute(m, &s, &r, err, sizeof err) < 0) {
        plan_model_free(m);
        return fail("%s", err);
    }
    measured_entry me;
    int have = measured ? find_measured(measured, file, &s, &me) : 0;
    if (have < 0) {
        plan_model_free(m);
        return 2;
    }
    if (json) {
        json_t *j = plan_to_json(m, &s, &r);
        if (measured) json_object_set_new(j, "measured", have ? measured_to_json(&s, &r, &me) : json_null());
        char *txt = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(6));
        if (txt) puts(txt);
        free(txt);
        json_decref(j);
    } else {
        print_text(m, &s, &r);
        if (have) print_measured(&s, &r, &me, measured);
        else if (measured) printf("\nno engine has measured this file at these settings in %s\n", measured);
    }
    int rc = r.fits ? 0 : 1;
    plan_model_free(m);
    return rc;
}
