/* api/audit_api: GET /v1/audit (the audit log, filtered by request, task
 * and age) and GET /v1/audit/{request_id} (one call's record). */
#include <stdlib.h>
#include <string.h>

#include "api/audit_rec.h"
#include "api/coord.h"
#include "api/errors.h"
#include "util/clock.h"

static int audit_on(coord *c, http_req *req)
{
    if (c->audit) return 1;
    api_error(req, 404, "invalid_request_error", "audit_off", NULL,
              "the audit log is off (the coordinator runs with --audit off)");
    return 0;
}

static void answer(http_req *req, json_t *rows)
{
    json_t *j = json_pack("{s:s, s:o}", "object", "list", "data", rows);
    http_respond_json(req, 200, j);
    json_decref(j);
}

void api_audit_list(coord *c, http_req *req)
{
    if (!audit_on(c, req)) return;
    audit_query q = {.request_id = http_req_query(req, "request_id"), .task_id = http_req_query(req, "task_id"),
                     .limit = 100};
    const char *since = http_req_query(req, "since"), *lim = http_req_query(req, "limit");
    if (since && audit_parse_since(since, wall_ms(), &q.since_ms)) {
        api_bad_request(req, "invalid_value", "since",
                        "'since' must be unix milliseconds or an age like 90s, 15m, 2h or 7d");
        return;
    }
    if (lim) {
        char *end;
        long v = strtol(lim, &end, 10);
        if (end == lim || *end || v < 1 || v > 1000) {
            api_bad_request(req, "invalid_value", "limit", "'limit' must be an integer from 1 to 1000");
            return;
        }
        q.limit = (int)v;
    }
    if (q.request_id && !*q.request_id) q.request_id = NULL;
    if (q.task_id && !*q.task_id) q.task_id = NULL;
    json_t *rows = audit_db_query(auditor_db(c->audit), &q);
    if (!rows) {
        api_server_error(req, 500, "store_error", "the audit log could not be read");
        return;
    }
    answer(req, rows);
}

void api_audit_get(coord *c, http_req *req, const char *request_id)
{
    if (!audit_on(c, req)) return;
    audit_query q = {.request_id = request_id, .limit = 1};
    json_t *rows = audit_db_query(auditor_db(c->audit), &q);
    if (!rows) {
        api_server_error(req, 500, "store_error", "the audit log could not be read");
        return;
    }
    json_t *one = json_array_get(rows, 0);
    if (!one) {
        api_error(req, 404, "invalid_request_error", "request_not_found", NULL,
                  "no audit record has the request id '%s' (it may not be written yet, or was pruned)", request_id);
    } else {
        http_respond_json(req, 200, one);
    }
    json_decref(rows);
}
