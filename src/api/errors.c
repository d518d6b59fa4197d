/* api/errors: see errors.h. */
#include "api/errors.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const api_error_code CODES[] = {
    {"empty_body", 400}, {"invalid_json", 400}, {"missing_field", 400}, {"invalid_type", 400},
    {"invalid_value", 400}, {"invalid_gguf", 400}, {"invalid_api_key", 401}, {"admin_required", 403},
    {"cors_origin_not_allowed", 403}, {"model_not_found", 404}, {"task_not_found", 404}, {"batch_not_found", 404}, {"session_not_found", 404},
    {"node_not_found", 404}, {"not_found", 404}, {"audit_off", 404}, {"request_not_found", 404}, {"method_not_allowed", 405},
    {"idempotency_key_reused", 409}, {"task_finished", 409}, {"batch_finished", 409}, {"node_live", 409}, {"body_too_large", 413},
    {"queue_full", 429}, {"budget_exceeded", 429}, {"store_error", 500}, {"no_node_answered", 502}, {"no_capacity", 503},
    {"rollout_not_found", 404}, {"rollout_exists", 409}, {"rollout_state", 409}, {"too_many_rollouts", 409},
    {"insufficient_vram", 503}, {"store_unavailable", 503}, {"no_trusted_capacity", 503},
    {"app_not_found", 404}, {"pipeline_not_found", 404}, {"run_not_found", 404}, {"run_finished", 409},
    {"output_invalid", 422},
    {"stage_failed", 502}, {"model_mismatch", 503}, {"upstream_interrupted", 0},
};

const api_error_code *api_error_codes(size_t *n)
{
    *n = sizeof CODES / sizeof CODES[0];
    return CODES;
}

int api_error_code_known(const char *code)
{
    for (size_t i = 0; i < sizeof CODES / sizeof CODES[0]; i++)
        if (!strcmp(CODES[i].code, code)) return 1;
    return 0;
}

void api_error(http_req *r, int status, const char *type, const char *code, const char *param,
               const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *e = json_pack("{s:{s:s, s:s, s:s, s:o}}", "error", "message", msg, "type", type, "code", code,
                          "param", param ? json_string(param) : json_null());
    if (!e) { /* the message was not valid UTF-8: never echo raw bytes */
        e = json_pack("{s:{s:s, s:s, s:s, s:n}}", "error", "message", "invalid request", "type", type,
                      "code", code, "param");
    }
    http_respond_json(r, status, e);
    json_decref(e);
}

json_t *api_read_json_object(http_req *r)
{
    size_t len;
    const char *body = http_req_body(r, &len);
    if (len == 0) {
        api_bad_request(r, "empty_body", NULL, "the request body is empty; a JSON object was expected");
        return NULL;
    }
    json_error_t jerr;
    json_t *j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!j) {
        const char *what = strstr(jerr.text, "UTF-8") ? "the request body is not valid UTF-8"
                                                       : "the request body is not valid JSON";
        api_bad_request(r, "invalid_json", NULL, "%s: %s (line %d, column %d)", what, jerr.text, jerr.line,
                        jerr.column);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        api_bad_request(r, "invalid_json", NULL, "the request body must be a JSON object");
        return NULL;
    }
    return j;
}

const char *api_error_text(const char *body, size_t len, const char *fallback, char *out, size_t outlen)
{
    json_t *j = body && len ? json_loadb(body, len, 0, NULL) : NULL;
    const char *m = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
    snprintf(out, outlen, "%s", m && *m ? m : fallback);
    json_decref(j);
    return out;
}
