/* plan: loading a model for the planner, settings from JSON, and the JSON
 * answer shared by `gpupool plan --json` and POST /v1/plan. */
#include "util/err.h"
#include "plan/plan.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/arch.h"
#include "plan/ggml_types.h"
#include "plan/gguf.h"


plan_model *plan_model_open(const char *path, char *err, size_t errlen)
{
    gguf_file *f = gguf_read_file(path, err, errlen);
    if (!f) return NULL;
    plan_model *m = malloc(sizeof *m);
    if (!m) {
        err_out(err, errlen, "out of memory");
    } else if (plan_model_from_gguf(f, m, err, errlen) < 0) {
        free(m);
        m = NULL;
    } else if (!m->name[0]) {
        const char *base = strrchr(path, '/');
        snprintf(m->name, sizeof m->name, "%s", base ? base + 1 : path);
    }
    gguf_free(f);
    return m;
}

plan_model *plan_model_preset(const char *preset, const char *quant, char *err, size_t errlen)
{
    plan_model *m = malloc(sizeof *m);
    if (!m) {
        err_out(err, errlen, "out of memory");
        return NULL;
    }
    if (plan_model_from_preset(preset, quant, m, err, errlen) < 0) {
        free(m);
        return NULL;
    }
    return m;
}

void plan_model_free(plan_model *m)
{
    free(m);
}

int plan_parse_size(const char *s, char bare_unit, uint64_t *out)
{
    if (!s) return -1;
    while (isspace((unsigned char)*s)) s++;
    if (!isdigit((unsigned char)*s) && *s != '.') return -1;
    char *end;
    double v = strtod(s, &end);
    if (end == s || !isfinite(v) || v < 0) return -1;
    char u = *end ? (char)toupper((unsigned char)*end) : bare_unit;
    if (*end) {
        end++;
        /* Accept "G", "GB", "GiB" alike: memory is sized in binary units. */
        if (*end == 'i' || *end == 'I') end++;
        if (*end == 'b' || *end == 'B') end++;
        if (*end) return -1;
    }
    double mul;
    switch (u) {
    case 0: case 'B': mul = 1; break;
    case 'K': mul = 1024.0; break;
    case 'M': mul = 1024.0 * 1024; break;
    case 'G': mul = 1024.0 * 1024 * 1024; break;
    case 'T': mul = 1024.0 * 1024 * 1024 * 1024; break;
    default: return -1;
    }
    v *= mul;
    if (v >= 18446744073709551615.0) return -1;
    *out = (uint64_t)v;
    return 0;
}

static int cache_type(const char *name, uint32_t *out, char *err, size_t errlen)
{
    int t = ggml_type_from_name(name);
    if (t < 0) return err_out(err, errlen, "unknown cache type '%s' (f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1)", name);
    *out = (uint32_t)t;
    return 0;
}

static int json_u32(const json_t *v, const char *what, uint32_t *out, uint32_t min, char *err, size_t errlen)
{
    if (!json_is_integer(v) || json_integer_value(v) < (json_int_t)min || json_integer_value(v) > (json_int_t)UINT32_MAX)
        return err_out(err, errlen, "%s must be an integer >= %u", what, min);
    *out = (uint32_t)json_integer_value(v);
    return 0;
}

static int json_size(const json_t *v, const char *what, char bare, uint64_t *out, char *err, size_t errlen)
{
    if (json_is_integer(v) && json_integer_value(v) >= 0) {
        *out = (uint64_t)json_integer_value(v);
        return 0;
    }
    if (json_is_string(v) && plan_parse_size(json_string_value(v), bare, out) == 0) return 0;
    return err_out(err, errlen, "%s must be a byte count or a size like \"12G\"", what);
}

int plan_settings_from_json(const json_t *j, plan_settings *s, char *err, size_t errlen)
{
    if (!json_is_object(j)) return err_out(err, errlen, "settings must be a JSON object");
    const json_t *v;
    if ((v = json_object_get(j, "ctx")) && json_u32(v, "ctx", &s->ctx, 1, err, errlen) < 0) return -1;
    if ((v = json_object_get(j, "parallel")) && json_u32(v, "parallel", &s->parallel, 1, err, errlen) < 0) return -1;
    if ((v = json_object_get(j, "ubatch")) && json_u32(v, "ubatch", &s->ubatch, 1, err, errlen) < 0) return -1;
    if ((v = json_object_get(j, "cache_type_k"))) {
        if (!json_is_string(v)) return err_out(err, errlen, "cache_type_k must be a string");
        if (cache_type(json_string_value(v), &s->type_k, err, errlen) < 0) return -1;
    }
    if ((v = json_object_get(j, "cache_type_v"))) {
        if (!json_is_string(v)) return err_out(err, errlen, "cache_type_v must be a string");
        if (cache_type(json_string_value(v), &s->type_v, err, errlen) < 0) return -1;
    }
    if ((v = json_object_get(j, "flash_attn"))) {
        if (!json_is_boolean(v)) return err_out(err, errlen, "flash_attn must be true or false");
        s->flash_attn = json_is_true(v);
    }
    if ((v = json_object_get(j, "ngl"))) {
        if (!json_is_integer(v) || json_integer_value(v) < -1 || json_integer_value(v) > 100000)
            return err_out(err, errlen, "ngl must be an integer >= -1 (-1 = all layers)");
        s->ngl = (int32_t)json_integer_value(v);
    }
    if ((v = json_object_get(j, "gpus"))) {
        if (!json_is_array(v) || json_array_size(v) > PLAN_MAX_GPUS)
            return err_out(err, errlen, "gpus must be an array of at most %d free-memory sizes", PLAN_MAX_GPUS);
        s->n_gpu = 0;
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (json_size(json_array_get(v, i), "gpus[]", 'G', &s->gpu_free[i], err, errlen) < 0) return -1;
            s->n_gpu++;
        }
    }
    if ((v = json_object_get(j, "overhead")) && json_size(v, "overhead", 0, &s->overhead, err, errlen) < 0) return -1;
    if ((v = json_object_get(j, "margin"))) {
        if (json_is_number(v) && json_number_value(v) >= 0 && json_number_value(v) < 100) {
            s->margin_pct = json_number_value(v);
            s->margin_bytes = 0;
        } else if (json_is_string(v)) {
            const char *m = json_string_value(v);
            size_t n = strlen(m);
            char *end;
            double p = n ? strtod(m, &end) : -1;
            bool pct = n && (end == m + n || (m[n - 1] == '%' && end == m + n - 1));  /* "5%" or a bare "5" */
            if (pct) {
                if (!(p >= 0 && p < 100)) return err_out(err, errlen, "margin '%s' is not a percentage below 100", m);
                s->margin_pct = p;
                s->margin_bytes = 0;
            } else if (plan_parse_size(m, 0, &s->margin_bytes) == 0) {
                s->margin_pct = 0;
            } else {
                return err_out(err, errlen, "margin '%s' must be like \"5%%\" or \"512M\"", m);
            }
        } else {
            return err_out(err, errlen, "margin must be a percentage or a size");
        }
    }
    return 0;
}

/* --- the answer ----------------------------------------------------------- */

static json_t *dev_json(const plan_dev *d, const char *name, bool gpu, bool fit_known)
{
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(name));
    if (gpu && fit_known) json_object_set_new(o, "free", json_integer((json_int_t)d->free));
    if (d->layer_count) {
        json_object_set_new(o, "layers", json_pack("[I,I]", (json_int_t)d->layer_first,
                                                   (json_int_t)(d->layer_first + d->layer_count - 1)));
    } else {
        json_object_set_new(o, "layers", json_null());
    }
    json_object_set_new(o, "output_layer", json_boolean(d->output));
    json_object_set_new(o, "weights", json_integer((json_int_t)d->weights));
    json_object_set_new(o, "kv_cache", json_integer((json_int_t)d->kv));
    json_object_set_new(o, "recurrent_state", json_integer((json_int_t)d->state));
    if (gpu) {
        json_object_set_new(o, "compute", json_integer((json_int_t)d->compute));
        json_object_set_new(o, "overhead", json_integer((json_int_t)d->overhead));
        json_object_set_new(o, "margin", json_integer((json_int_t)d->margin));
    }
    json_object_set_new(o, "total", json_integer((json_int_t)d->total));
    if (gpu) json_object_set_new(o, "fits", fit_known ? json_boolean(d->fits) : json_null());
    return o;
}

static const char *type_name(uint32_t t)
{
    const ggml_type_info *ti = ggml_type_get(t);
    return ti ? ti->name : "?";
}

json_t *plan_to_json(const plan_model *m, const plan_settings *s, const plan_result *r)
{
    json_t *root = json_object();
    json_t *model = json_object();
    json_object_set_new(model, "name", json_string(m->name));
    json_object_set_new(model, "arch", json_string(m->arch));
    json_object_set_new(model, "source", json_string(m->source));
    json_object_set_new(model, "quant", json_string(m->quant));
    if (m->file_bytes) json_object_set_new(model, "file_bytes", json_integer((json_int_t)m->file_bytes));
    json_object_set_new(model, "params_total", json_integer((json_int_t)m->params_total));
    json_object_set_new(model, "params_active", json_integer((json_int_t)m->params_active));
    json_object_set_new(model, "n_layer", json_integer(m->n_layer));
    json_object_set_new(model, "n_ctx_train", json_integer((json_int_t)m->n_ctx_train));
    json_object_set_new(model, "n_expert", json_integer(m->n_expert));
    json_object_set_new(model, "n_expert_used", json_integer(m->n_expert_used));
    json_object_set_new(model, "sliding_window", json_integer(m->n_swa));
    json_object_set_new(model, "mla", json_boolean(m->is_mla));
    json_object_set_new(model, "recurrent", json_boolean(plan_model_is_recurrent(m)));
    json_object_set_new(root, "model", model);

    json_t *set = json_object();
    json_object_set_new(set, "ctx", json_integer(s->ctx));
    json_object_set_new(set, "parallel", json_integer(s->parallel));
    json_object_set_new(set, "cache_type_k", json_string(type_name(s->type_k)));
    json_object_set_new(set, "cache_type_v", json_string(type_name(s->type_v)));
    json_object_set_new(set, "flash_attn", json_boolean(s->flash_attn));
    json_object_set_new(set, "ubatch", json_integer(r->ubatch));
    json_object_set_new(set, "ngl", json_integer(r->ngl));
    json_object_set_new(set, "overhead", json_integer((json_int_t)s->overhead));
    json_object_set_new(set, "margin_pct", json_real(s->margin_pct));
    json_object_set_new(set, "margin_bytes", json_integer((json_int_t)s->margin_bytes));
    json_object_set_new(root, "settings", set);

    json_object_set_new(root, "kv_cells", json_integer(r->kv_cells));
    json_object_set_new(root, "kv_cells_swa", json_integer(m->n_swa ? r->kv_cells_swa : r->kv_cells));
    json_object_set_new(root, "kv_bytes_per_token", json_integer((json_int_t)r->kv_bytes_per_token));
    json_t *parts = json_object();
    json_object_set_new(parts, "weights", json_integer((json_int_t)r->weights));
    json_object_set_new(parts, "kv_cache", json_integer((json_int_t)r->kv));
    json_object_set_new(parts, "recurrent_state", json_integer((json_int_t)r->state));
    json_object_set_new(parts, "compute", json_integer((json_int_t)r->compute));
    json_object_set_new(parts, "overhead", json_integer((json_int_t)r->overhead));
    json_object_set_new(parts, "margin", json_integer((json_int_t)r->margin));
    json_object_set_new(parts, "total", json_integer((json_int_t)r->total));
    json_object_set_new(parts, "host", json_integer((json_int_t)r->host.total));
    json_object_set_new(root, "gpu_parts", parts);

    json_t *devs = json_array();
    json_array_append_new(devs, dev_json(&r->host, "host", false, r->fit_known));
    for (uint32_t g = 0; g < r->n_gpu; g++) {
        char name[16];
        snprintf(name, sizeof name, "gpu%u", g);
        json_array_append_new(devs, dev_json(&r->gpu[g], name, true, r->fit_known));
    }
    json_object_set_new(root, "devices", devs);
    json_object_set_new(root, "fits", r->fit_known ? json_boolean(r->fits) : json_null());

    if (r->fit_known) {
        uint32_t mc = plan_max_ctx(m, s), mp = plan_max_parallel(m, s);
        json_object_set_new(root, "max_ctx", mc ? json_integer(mc) : json_null());
        json_object_set_new(root, "max_parallel", mp ? json_integer(mp) : json_null());
        if (!r->fits) {
            int ngl = plan_max_ngl(m, s);
            json_t *po = json_object();
            json_object_set_new(po, "ngl", ngl >= 0 ? json_integer(ngl) : json_null());
            if (ngl >= 0) {
                const char *cls;
                double slow = plan_slowdown(m, s, ngl, &cls);
                json_object_set_new(po, "slowdown", json_real(round(slow * 10) / 10));
                json_object_set_new(po, "slowdown_class", json_string(cls));
            }
            json_object_set_new(root, "partial_offload", po);
        } else {
            json_object_set_new(root, "partial_offload", json_null());
        }
    }
    if (s->n_gpu > 1) {
        /* llama.cpp's own default: -ts in proportion to free memory. */
        char ts[PLAN_MAX_GPUS * 24] = "";
        size_t off = 0;
        for (uint32_t g = 0; g < s->n_gpu && off < sizeof ts; g++)
            off += (size_t)snprintf(ts + off, sizeof ts - off, "%s%.1f", g ? "," : "",
                                    (double)s->gpu_free[g] / (1024.0 * 1024 * 1024));
        json_object_set_new(root, "tensor_split", json_string(ts));
    }
    char args[256];
    snprintf(args, sizeof args, "-c %llu -np %u -ngl %u -ctk %s -ctv %s -fa %s -ub %u --kv-unified",
             (unsigned long long)s->ctx * s->parallel, s->parallel, r->ngl, type_name(s->type_k),
             type_name(s->type_v), s->flash_attn ? "on" : "off", r->ubatch);
    json_object_set_new(root, "llama_server_args", json_string(args));
    return root;
}
