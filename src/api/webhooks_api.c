/* api/webhooks_api: GET /v1/webhooks/deliveries (the delivery log) and the
 * callback_url field that tasks and batches share. */
#include <stdlib.h>
#include <string.h>

#include "api/coord.h"
#include "api/errors.h"

int api_callback_url(coord *c, http_req *req, json_t *v, const char **url)
{
    *url = NULL;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_string(v)) {
        api_bad_request(req, "invalid_type", "callback_url", "'callback_url' must be a string (an http or https URL)");
        return -1;
    }
    char why[300];
    if (webhook_url_allowed(c->hooks, json_string_value(v), why, sizeof why)) {
        api_bad_request(req, "invalid_value", "callback_url", "'callback_url' is not usable: %s", why);
        return -1;
    }
    *url = json_string_value(v);
    return 0;
}

void api_webhook_deliveries(coord *c, http_req *req)
{
    const char *task = http_req_query(req, "task_id"), *batch = http_req_query(req, "batch_id");
    const char *run = http_req_query(req, "run_id");
    if (run && *run) task = run; /* run ids, like task ids, name one object */
    const char *lim = http_req_query(req, "limit");
    if (task && batch) {
        api_bad_request(req, "invalid_value", "batch_id", "give one of task_id, batch_id and run_id");
        return;
    }
    int limit = 100;
    if (lim) {
        char *end;
        long v = strtol(lim, &end, 10);
        if (end == lim || *end || v < 1 || v > 1000) {
            api_bad_request(req, "invalid_value", "limit", "'limit' must be an integer from 1 to 1000");
            return;
        }
        limit = (int)v;
    }
    const char *object = task && *task ? task : batch && *batch ? batch : NULL;
    json_t *rows = wh_list(webhooks_db(c->hooks), object, limit);
    if (!rows) {
        api_server_error(req, 500, "store_error", "the delivery log could not be read");
        return;
    }
    json_t *j = json_pack("{s:s, s:o}", "object", "list", "data", rows);
    http_respond_json(req, 200, j);
    json_decref(j);
}
