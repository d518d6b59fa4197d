/* api/pool_call: see pool_call.h. */
#include "api/pool_call.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/client.h"
#include "util/clock.h"

#define MAX_TRIES 8

int api_pool_call(coord *c, api_kind kind, const json_t *body, int trusted_only, int64_t wait_ms,
                  int64_t timeout_ms, json_t **answer, char *why, size_t whylen)
{
    *answer = NULL;
    snprintf(why, whylen, "no node answered");
    const char *model = json_string_value(json_object_get(body, "model"));
    char *raw = model ? json_dumps(body, JSON_COMPACT) : NULL;
    if (!raw) {
        snprintf(why, whylen, model ? "out of memory" : "no model");
        return -1;
    }
    size_t len = strlen(raw);
    reg_request rq = {.model = model, .prompt_tokens = api_estimate_prompt_tokens((json_t *)body),
                      .max_tokens = kind == KIND_EMBEDDING ? 1 : api_requested_max_tokens((json_t *)body),
                      .payload_bytes = (double)len, .priority = 5, .trusted_only = trusted_only};
    char ids[MAX_TRIES][40];
    const char *tried[MAX_TRIES];
    int ntried = 0, tries = c->cfg.max_attempts < MAX_TRIES ? c->cfg.max_attempts : MAX_TRIES;
    int64_t deadline = mono_ms() + wait_ms;
    while (ntried < tries && !*answer) {
        node_lease lease;
        reg_wait w = registry_acquire_wait(c->reg, &rq, tried, ntried, deadline, c->cfg.queue_max, &lease);
        if (w != REG_OK) {
            if (!ntried) snprintf(why, whylen, "no node serving '%s' took the call (wait %d)", model, (int)w);
            break;
        }
        char url[512];
        snprintf(url, sizeof url, "%s%s", lease.address, api_kind_path(kind));
        http_call_opts o = {.method = "POST", .url = url, .body = raw, .body_len = len, .bearer = lease.token,
                            .timeout_ms = timeout_ms};
        http_result res;
        http_call(&o, &res);
        int ok = registry_status_served(res.status) && !api_node_refused(res.status, res.body);
        registry_observe(c->reg, &lease, ok, NULL, mono_ms());
        registry_release(c->reg, &lease, mono_ms(), ok);
        if (res.status == 200) *answer = json_loadb(res.body, res.body_len, 0, NULL);
        if (!*answer) snprintf(why, whylen, "%s: %s", lease.node_id, res.status ? "an unusable answer" : res.error);
        if (res.status && res.status != 200 && res.status < 500 && ok) {
            /* The request itself was refused: another node would say the same. */
            snprintf(why, whylen, "%s answered %ld", lease.node_id, res.status);
            http_result_free(&res);
            break;
        }
        http_result_free(&res);
        snprintf(ids[ntried], sizeof ids[ntried], "%s", lease.node_id);
        tried[ntried] = ids[ntried];
        ntried++;
    }
    free(raw);
    return *answer ? 0 : -1;
}
