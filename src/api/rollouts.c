/* api/rollouts: POST /v1/rollouts, GET /v1/rollouts[/{name}], POST
 * /v1/rollouts/{name}/advance|pause|resume|abort, and the rollout's part in
 * every proxied request: a request naming a rollout is rewritten to the
 * version it is given before anything reads its model, answers say which
 * version served (X-Gpupool-Version), and outcomes feed that version's
 * window (api/rollout_table). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/coord.h"
#include "api/errors.h"
#include "api/rollout_table.h"
#include "api/validate.h"
#include "util/clock.h"

/* The pick travels with the request to its answer as a request header
 * only the coordinator sets: "VERSION NAME". */
#define PICK_HEADER "X-Gpupool-Rollout-Pick"

static void version_header(http_req *req, const rollout_pick *pk)
{
    char v[RO_MODEL_MAX + RO_NAME_MAX + 48];
    snprintf(v, sizeof v, "%s; role=%s; rollout=%s", pk->model, pk->version == RO_CANARY ? "canary" : "stable",
             pk->name);
    http_set_header(req, "X-Gpupool-Version", v);
}

/* What keeps a conversation on one version: X-Gpupool-Session, else the
 * OpenAI "user" field. */
static const char *sticky_key(http_req *req, json_t *body)
{
    const char *k = req ? http_req_header(req, "X-Gpupool-Session") : NULL;
    if (k && *k) return k;
    return json_string_value(json_object_get(body, "user"));
}

void api_rollout_route(coord *c, http_req *req)
{
    /* A client cannot claim a pick: its header is shadowed unless one is made. */
    int claimed = http_req_header(req, PICK_HEADER) != NULL;
    size_t len;
    const char *raw = http_req_body(req, &len);
    json_t *body = NULL;
    rollout_pick pk;
    int routed = 0;
    if (rollout_table_mentioned(c->rollouts, raw, len) && (body = json_loadb(raw, len, 0, NULL)) &&
        rollout_table_route(c->rollouts, json_string_value(json_object_get(body, "model")), sticky_key(req, body),
                            &pk)) {
        json_object_set_new(body, "model", json_string(pk.model));
        char *text = json_dumps(body, JSON_COMPACT);
        if (text && !http_req_replace_body(req, text, strlen(text))) {
            char v[RO_NAME_MAX + 4];
            snprintf(v, sizeof v, "%d %s", pk.version, pk.name);
            http_req_add_header(req, PICK_HEADER, v);
            version_header(req, &pk);
            routed = 1;
        }
        free(text);
    }
    json_decref(body);
    if (claimed && !routed) http_req_add_header(req, PICK_HEADER, "");
}

void api_rollout_observe(coord *c, http_req *req, int status, int64_t dur_us)
{
    const char *pick = http_req_header(req, PICK_HEADER);
    /* A client that left says nothing about the version. */
    if (!pick || !*pick || status == 499) return;
    int version = pick[0] == '1' ? RO_CANARY : RO_STABLE;
    const char *name = strchr(pick, ' ');
    if (!name) return;
    /* The version failed when the pool failed it (5xx) or does not serve it
     * (404 for a name the client was right to use). */
    int error = status >= 500 || status == 404;
    rollout_table_outcome(c->rollouts, name + 1, version, error, (double)dur_us / 1000.0);
}

int api_rollout_task_model(coord *c, http_req *req, const char *model, json_t *input, char *out, size_t outlen)
{
    rollout_pick pk;
    if (!rollout_table_route(c->rollouts, model, sticky_key(req, input), &pk)) return 0;
    snprintf(out, outlen, "%s", pk.model);
    if (req) version_header(req, &pk);
    return 1;
}

void api_rollouts_create(coord *c, http_req *req)
{
    json_t *body = api_read_json_object(req);
    if (!body) return;
    ro_spec spec;
    char param[64], msg[256];
    if (ro_spec_parse(body, &spec, param, sizeof param, msg, sizeof msg)) {
        api_bad_request(req, "invalid_value", param[0] ? param : NULL, "%s", msg);
        json_decref(body);
        return;
    }
    json_decref(body);
    const char *missing = !registry_model_known(c->reg, spec.stable) ? spec.stable
                          : !registry_model_known(c->reg, spec.canary) ? spec.canary : NULL;
    if (missing) {
        api_error(req, 404, "invalid_request_error", "model_not_found", missing == spec.stable ? "stable" : "canary",
                  "the model '%s' is not served by any node in the pool", missing);
        return;
    }
    if (registry_model_known(c->reg, spec.name)) {
        api_bad_request(req, "invalid_value", "name",
                        "'%s' is a model the pool serves; a rollout needs a name of its own", spec.name);
        return;
    }
    json_t *view;
    char why[300];
    rollout_rc rc = rollout_table_create(c->rollouts, &spec, &view, why, sizeof why);
    if (rc == ROLLOUT_OK) http_respond_json(req, 201, view);
    else if (rc == ROLLOUT_REFUSED) api_error(req, 409, "invalid_request_error", "rollout_exists", "name", "%s", why);
    else api_error(req, 409, "invalid_request_error", "too_many_rollouts", NULL, "%s", why);
    json_decref(view);
}

void api_rollouts_list(coord *c, http_req *req)
{
    json_t *j = json_pack("{s:s, s:o}", "object", "list", "data", rollout_table_list(c->rollouts));
    http_respond_json(req, 200, j);
    json_decref(j);
}

void api_rollouts_get(coord *c, http_req *req, const char *name)
{
    json_t *j = rollout_table_get(c->rollouts, name);
    if (j) http_respond_json(req, 200, j);
    else api_error(req, 404, "invalid_request_error", "rollout_not_found", NULL, "no rollout is named '%s'", name);
    json_decref(j);
}

void api_rollouts_act(coord *c, http_req *req, const char *name, const char *verb)
{
    json_t *view;
    char why[300];
    rollout_rc rc = rollout_table_act(c->rollouts, name, verb, &view, why, sizeof why);
    if (rc == ROLLOUT_OK) http_respond_json(req, 200, view);
    else if (rc == ROLLOUT_NOT_FOUND) api_error(req, 404, "invalid_request_error", "rollout_not_found", NULL, "%s", why);
    else api_error(req, 409, "invalid_request_error", "rollout_state", NULL, "%s", why);
    json_decref(view);
}
