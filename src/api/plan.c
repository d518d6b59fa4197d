/* api/plan: POST /v1/plan, the planner over HTTP.  It answers exactly what
 * `gpupool plan --json` prints, for a built-in preset or for a GGUF file in
 * the coordinator's --models-dir (never an arbitrary path). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/coord.h"
#include "api/errors.h"
#include "plan/plan.h"

/* The file named, if it lies inside the models directory; else NULL. */
static char *model_file(coord *c, const char *name)
{
    if (!c->cfg.models_dir) return NULL;
    char joined[PATH_MAX], real_dir[PATH_MAX], real_file[PATH_MAX];
    snprintf(joined, sizeof joined, "%s/%s", c->cfg.models_dir, name);
    if (!realpath(c->cfg.models_dir, real_dir) || !realpath(joined, real_file)) return NULL;
    size_t n = strlen(real_dir);
    if (strncmp(real_file, real_dir, n) || real_file[n] != '/') return NULL;
    return strdup(real_file);
}

void api_plan(coord *c, http_req *req)
{
    json_t *body = api_read_json_object(req);
    if (!body) return;
    const char *preset = json_string_value(json_object_get(body, "model"));
    const char *file = json_string_value(json_object_get(body, "file"));
    json_t *quant = json_object_get(body, "quant");
    char err[256] = "";
    plan_model *m = NULL;
    if (quant && !json_is_string(quant)) {
        api_bad_request(req, "invalid_type", "quant", "'quant' must be a string such as \"Q4_K_M\"");
        goto out;
    }
    if (file) {
        char *path = model_file(c, file);
        if (!path) {
            api_error(req, 404, "invalid_request_error", "model_not_found", "file",
                      c->cfg.models_dir ? "no GGUF file '%s' in the models directory"
                                        : "'%s': the coordinator has no --models-dir to read GGUF files from",
                      file);
            goto out;
        }
        m = plan_model_open(path, err, sizeof err);
        free(path);
        if (!m) { api_bad_request(req, "invalid_gguf", "file", "%s", err); goto out; }
    } else if (preset) {
        m = plan_model_preset(preset, json_string_value(quant), err, sizeof err);
        if (!m) { api_bad_request(req, "invalid_value", "model", "%s", err); goto out; }
    } else {
        api_bad_request(req, "missing_field", "model",
                        "give 'model' (a preset such as \"llama-3.1-8b\") or 'file' (a GGUF file in --models-dir)");
        goto out;
    }
    plan_settings s;
    plan_settings_init(&s);
    if (plan_settings_from_json(body, &s, err, sizeof err)) {
        api_bad_request(req, "invalid_value", NULL, "%s", err);
        goto out;
    }
    plan_result r;
    if (plan_compute(m, &s, &r, err, sizeof err)) {
        api_bad_request(req, "invalid_value", NULL, "%s", err);
        goto out;
    }
    json_t *j = plan_to_json(m, &s, &r);
    char *text = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(6));
    http_respond(req, 200, "application/json", text, strlen(text));
    free(text);
    json_decref(j);
out:
    plan_model_free(m);
    json_decref(body);
}
