/* worker/engine: see engine.h. */
#include "worker/engine.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "http/client.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/opts.h"
#include "worker/managed.h"

const char *engine_kind_name(engine_kind k)
{
    static const char *n[] = {"openai", "ollama", "sim", "managed"};
    return n[k];
}

static int set_url(engine *e, const char *url, char *err, size_t errlen)
{
    if (strncmp(url, "http://", 7) && strncmp(url, "https://", 8)) {
        snprintf(err, errlen, "engine URL '%s' must start with http:// or https://", url);
        return -1;
    }
    if (strlen(url) >= sizeof e->url) { snprintf(err, errlen, "engine URL is too long"); return -1; }
    snprintf(e->url, sizeof e->url, "%s", url);
    size_t n = strlen(e->url);
    while (n && e->url[n - 1] == '/') e->url[--n] = 0;
    /* People paste the OpenAI base URL; the paths we add start with /v1. */
    if (n >= 3 && !strcmp(e->url + n - 3, "/v1")) e->url[n - 3] = 0;
    return 0;
}

int engine_parse_spec(const char *spec, engine *e, char *err, size_t errlen)
{
    memset(e, 0, sizeof *e);
    e->default_slots = 4;
    if (!strcmp(spec, "sim")) { e->kind = ENGINE_SIM; return 0; }
    if (!strncmp(spec, "openai=", 7)) { e->kind = ENGINE_OPENAI; return set_url(e, spec + 7, err, errlen); }
    if (!strncmp(spec, "ollama=", 7)) { e->kind = ENGINE_OLLAMA; return set_url(e, spec + 7, err, errlen); }
    snprintf(err, errlen, "unknown engine '%s' (want openai=URL, ollama=URL or sim)", spec);
    return -1;
}

int engine_start_sim(engine *e, const char *extra_args, char *err, size_t errlen)
{
    char portfile[] = "/tmp/gpupool-sim-XXXXXX";
    int fd = mkstemp(portfile);
    if (fd < 0) { snprintf(err, errlen, "cannot make a temporary file: %s", strerror(errno)); return -1; }
    close(fd);
    unlink(portfile);
    char *args[64];
    int n = 0;
    char *copy = strdup(extra_args ? extra_args : "");
    args[n++] = "gpupool";
    args[n++] = "sim-engine";
    args[n++] = "--listen";
    args[n++] = "127.0.0.1:0";
    args[n++] = "--port-file";
    args[n++] = portfile;
    char *save = NULL;
    for (char *t = strtok_r(copy, " ", &save); t && n < 62; t = strtok_r(NULL, " ", &save)) args[n++] = t;
    args[n] = NULL;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) { free(copy); snprintf(err, errlen, "fork: %s", strerror(errno)); return -1; }
    if (pid == 0) {
        /* The simulator must not outlive its worker, even after kill -9. */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) _exit(1);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execv("/proc/self/exe", args);
        _exit(127);
    }
    free(copy);
    e->child = pid;
    int64_t deadline = mono_ms() + 15000;
    while (mono_ms() < deadline) {
        char *p = read_small_file(portfile, 32);
        if (p && *p) {
            snprintf(e->url, sizeof e->url, "http://127.0.0.1:%s", p);
            free(p);
            unlink(portfile);
            log_info("started the engine simulator (pid %d) at %s", (int)pid, e->url);
            return 0;
        }
        free(p);
        if (waitpid(pid, NULL, WNOHANG) == pid) { e->child = 0; break; }
        sleep_ms(20);
    }
    unlink(portfile);
    engine_stop(e);
    snprintf(err, errlen, "the engine simulator did not start");
    return -1;
}

void engine_stop(engine *e)
{
    if (e->child <= 0) return;
    kill(e->child, SIGTERM);
    int64_t deadline = mono_ms() + 3000;
    while (waitpid(e->child, NULL, WNOHANG) == 0) {
        if (mono_ms() > deadline) { kill(e->child, SIGKILL); waitpid(e->child, NULL, 0); break; }
        sleep_ms(10);
    }
    e->child = 0;
}

int engine_parse_models(engine_kind k, const char *text, char (*models)[128], int max)
{
    json_t *j = json_loads(text ? text : "", 0, NULL);
    json_t *list = json_object_get(j, k == ENGINE_OLLAMA ? "models" : "data");
    int n = 0;
    size_t i;
    json_t *m;
    json_array_foreach(list, i, m) {
        const char *name = json_string_value(json_object_get(m, k == ENGINE_OLLAMA ? "name" : "id"));
        if (!name && k == ENGINE_OLLAMA) name = json_string_value(json_object_get(m, "model"));
        if (!name || strlen(name) >= 128 || n >= max) continue;
        snprintf(models[n++], 128, "%s", name);
    }
    int ok = json_is_array(list);
    json_decref(j);
    return ok ? n : -1;
}

int engine_parse_slots(const char *text, int *total, int *busy)
{
    json_t *j = json_loads(text ? text : "", 0, NULL);
    if (!json_is_array(j)) { json_decref(j); return -1; }
    *total = (int)json_array_size(j);
    *busy = 0;
    size_t i;
    json_t *s;
    json_array_foreach(j, i, s) {
        json_t *p = json_object_get(s, "is_processing");
        json_t *st = json_object_get(s, "state"); /* older llama-server: 0 idle, 1 busy */
        if (json_is_true(p) || (json_is_integer(st) && json_integer_value(st) != 0)) (*busy)++;
    }
    json_decref(j);
    return 0;
}

/* The value of every sample of metric `name` (any labels), summed; -1 when
 * there is none. */
static double metric_sum(const char *text, const char *name)
{
    size_t nl = strlen(name);
    double sum = -1;
    for (const char *line = text; line && *line;) {
        const char *end = strchr(line, '\n');
        if (!strncmp(line, name, nl) && (line[nl] == ' ' || line[nl] == '{')) {
            const char *v = line + nl;
            if (*v == '{') v = strchr(v, '}');
            if (v && (!end || v < end)) {
                char *stop;
                double x = strtod(v + (*v == '}'), &stop);
                if (stop != v + (*v == '}')) sum = (sum < 0 ? 0 : sum) + x;
            }
        }
        line = end ? end + 1 : NULL;
    }
    return sum;
}

int engine_parse_metrics(const char *text, int *running, int *waiting)
{
    static const char *names[][2] = {{"llamacpp:requests_processing", "llamacpp:requests_deferred"},
                                     {"vllm:num_requests_running", "vllm:num_requests_waiting"}};
    for (size_t i = 0; text && i < 2; i++) {
        double r = metric_sum(text, names[i][0]), w = metric_sum(text, names[i][1]);
        if (r < 0 && w < 0) continue;
        *running = r > 0 ? (int)(r + 0.5) : 0;
        *waiting = w > 0 ? (int)(w + 0.5) : 0;
        return 0;
    }
    return -1;
}

static int get(const char *base, const char *path, long timeout_ms, http_result *res)
{
    char url[384];
    snprintf(url, sizeof url, "%s%s", base, path);
    http_call_opts o = {.url = url, .timeout_ms = timeout_ms, .connect_timeout_ms = timeout_ms};
    return http_call(&o, res) == 0 && res->status == 200 ? 0 : -1;
}

void engine_refresh(const engine *e, engine *out)
{
    *out = *e;
    http_result res;
    int rc = get(e->url, e->kind == ENGINE_OLLAMA ? "/api/tags" : "/v1/models", 2000, &res);
    int n = rc ? -1 : engine_parse_models(e->kind, res.body, out->models, ENGINE_MAX_MODELS);
    if (n < 0) {
        out->healthy = 0;
        snprintf(out->error, sizeof out->error, "%.190s", rc ? (res.status ? "model list failed" : res.error)
                                                         : "model list unreadable");
    } else {
        out->healthy = 1;
        out->nmodels = n;
        out->error[0] = 0;
    }
    http_result_free(&res);
    out->slots = e->default_slots;
    out->slots_busy = e->inflight;
    out->queued = 0;
    /* Ollama reports no load of its own; the pool counts its calls there. */
    if (!out->healthy || e->kind == ENGINE_OLLAMA) return;
    int have_slots = 0;
    if (get(e->url, "/slots", 1000, &res) == 0) {
        int t, b;
        if (engine_parse_slots(res.body, &t, &b) == 0 && t > 0) { out->slots = t; out->slots_busy = b; have_slots = 1; }
    }
    http_result_free(&res);
    if (get(e->url, "/metrics", 1000, &res) == 0) {
        int running, waiting;
        if (engine_parse_metrics(res.body, &running, &waiting) == 0) {
            out->queued = waiting;
            if (!have_slots) out->slots_busy = running;
        }
    }
    http_result_free(&res);
}

int engine_has_model(const engine *e, const char *model)
{
    for (int i = 0; i < e->nmodels; i++)
        if (!strcmp(e->models[i], model)) return 1;
    return 0;
}

json_t *engine_json(const engine *e)
{
    json_t *models = json_array();
    for (int i = 0; i < e->nmodels; i++) json_array_append_new(models, json_string(e->models[i]));
    /* A started model's own fields (state, needs, measurements) come from
     * worker/managed, which knows the time. */
    if (e->managed)
        return json_pack("{s:s, s:s, s:b, s:o, s:i, s:i, s:i, s:b}", "kind", "managed", "url", e->url, "healthy",
                         e->healthy, "models", models, "slots", e->slots, "slots_busy", e->slots_busy, "inflight",
                         e->inflight, "simulated", 0);
    return json_pack("{s:s, s:s, s:b, s:o, s:i, s:i, s:i, s:i, s:b, s:s?}", "kind", engine_kind_name(e->kind), "url",
                     e->url, "healthy", e->healthy, "models", models, "slots", e->slots, "slots_busy",
                     e->slots_busy, "queued", e->queued, "inflight", e->inflight, "simulated", e->kind == ENGINE_SIM,
                     "error", e->error[0] ? e->error : NULL);
}

int engine_autodetect(engine *e)
{
    static const struct { engine_kind kind; const char *url; const char *path; } known[] = {
        {ENGINE_OPENAI, "http://127.0.0.1:8080", "/v1/models"},  /* llama-server */
        {ENGINE_OPENAI, "http://127.0.0.1:8000", "/v1/models"},  /* vLLM */
        {ENGINE_OLLAMA, "http://127.0.0.1:11434", "/api/tags"},  /* Ollama */
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        http_result res;
        int ok = get(known[i].url, known[i].path, 400, &res) == 0 &&
                 engine_parse_models(known[i].kind, res.body, e->models, ENGINE_MAX_MODELS) > 0;
        http_result_free(&res);
        if (!ok) continue;
        memset(e, 0, sizeof *e);
        e->kind = known[i].kind;
        e->default_slots = 4;
        snprintf(e->url, sizeof e->url, "%s", known[i].url);
        return 0;
    }
    return -1;
}
