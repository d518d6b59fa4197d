/* api/sessions: see sessions.h. */
#include "api/sessions.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/errors.h"
#include "api/pool_call.h"
#include "api/validate.h"
#include "util/clock.h"
#include "util/log.h"

#define SESSION_HEADER "X-Gpupool-Session"

static const char *named_id(http_req *req, const json_t *body)
{
    const char *id = json_string_value(json_object_get(body, "session_id"));
    if (!id) id = http_req_header(req, SESSION_HEADER);
    return id;
}

int api_session_named(http_req *req, const json_t *body)
{
    json_t *v = json_object_get(body, "session_id");
    return (v && !json_is_null(v)) || http_req_header(req, SESSION_HEADER) != NULL;
}

int api_session_begin(coord *c, http_req *req, json_t *body, api_session *s)
{
    memset(s, 0, sizeof *s);
    if (!api_session_named(req, body)) return 0;
    const char *id = named_id(req, body);
    if (!session_id_valid(id)) {
        api_bad_request(req, "invalid_value", "session_id",
                        "session_id must be 1 to %d characters of letters, digits, '.', '_', ':' and '-'",
                        SESSION_ID_MAX);
        return -1;
    }
    s->active = 1;
    snprintf(s->id, sizeof s->id, "%s", id);
    coord_owner(c, req, s->owner);
    snprintf(s->model, sizeof s->model, "%s", json_string_value(json_object_get(body, "model")));
    session_split(json_object_get(body, "messages"), &s->system, &s->turn);
    session_rec rec;
    int rc = store_session_get(c->st, s->owner, s->id, wall_ms(), &rec);
    if (rc == STORE_OK) {
        s->stored_system = json_incref(rec.system);
        s->history = json_incref(rec.messages);
        s->first_seq = rec.first_seq;
        s->summary = rec.summary ? strdup(rec.summary) : NULL;
        s->is_private = rec.is_private;
        snprintf(s->private_rule, sizeof s->private_rule, "%s", rec.private_rule);
        session_rec_free(&rec);
    } else {
        /* A store that cannot be read must not lose a private mark: the turn
         * then goes as private. */
        if (rc == STORE_ERR) {
            log_warn("session %s: cannot read it (%s); this turn is private", s->id, store_errmsg(c->st));
            s->is_private = 1;
            snprintf(s->private_rule, sizeof s->private_rule, "session");
        }
        s->history = json_array();
        s->stored_system = json_array();
    }
    json_t *conv = session_conversation(s->system ? s->system : s->stored_system, s->summary, s->history, 0,
                                        s->turn);
    json_object_set_new(body, "messages", conv);
    json_object_set_new(body, "session_id", json_string(s->id));
    http_set_header(req, SESSION_HEADER, s->id);
    return 0;
}

void api_session_classified(coord *c, api_session *s, classification *cls)
{
    if (!s->active) return;
    if (s->is_private && !cls->is_private) {
        cls->is_private = 1;
        snprintf(cls->rule, sizeof cls->rule, "session");
        return;
    }
    if (!cls->is_private || s->is_private) return;
    s->is_private = 1;
    snprintf(s->private_rule, sizeof s->private_rule, "%s", cls->rule);
    session_write w = {.owner = s->owner, .id = s->id, .model = s->model, .is_private = 1,
                       .private_rule = cls->rule, .now_ms = wall_ms(), .ttl_ms = c->cfg.sessions.ttl_ms};
    if (store_session_write(c->st, &w)) log_warn("session %s: cannot mark it private: %s", s->id, store_errmsg(c->st));
}

/* Folds history[0..drop) into the summary with the summary model.  Returns
 * 0, or -1 (the turns are then dropped without one). */
static int summarise(coord *c, api_session *s, size_t drop, int max_tokens)
{
    const session_config *sc = &c->cfg.sessions;
    if (!registry_model_known(c->reg, sc->summary_model) ||
        (s->is_private && !registry_model_trusted(c->reg, sc->summary_model))) {
        log_warn("session %s: no %snode serves the summary model '%s'; the oldest turns are dropped", s->id,
                 s->is_private ? "trusted " : "", sc->summary_model);
        return -1;
    }
    json_t *body = session_summary_body(sc->summary_model, s->summary, s->history, drop, max_tokens);
    json_t *answer = NULL;
    char why[300];
    int64_t timeout = c->cfg.upstream_timeout_ms;
    int rc = api_pool_call(c, KIND_CHAT, body, s->is_private, c->cfg.queue_timeout_ms, timeout, &answer, why,
                           sizeof why);
    json_decref(body);
    json_t *msg = rc ? NULL : session_assistant_message(answer);
    const char *text = json_string_value(json_object_get(msg, "content"));
    if (text && *text) {
        free(s->summary);
        s->summary = strdup(text);
        s->summary_changed = 1;
    } else {
        log_warn("session %s: the summary model '%s' gave no summary (%s); the oldest turns are dropped", s->id,
                 sc->summary_model, rc ? why : "no text");
        rc = -1;
    }
    json_decref(msg);
    json_decref(answer);
    return rc;
}

void api_session_fit(coord *c, http_req *req, json_t *body, api_session *s)
{
    if (!s->active) return;
    const session_config *sc = &c->cfg.sessions;
    double budget = sc->max_tokens > 0 ? sc->max_tokens : SESSION_DEFAULT_MAX_TOKENS;
    double reserve = api_requested_max_tokens(body);
    if (reserve > budget / 2) reserve = budget / 2;
    int summary_tokens = sc->summary_max_tokens > 0 ? sc->summary_max_tokens : SESSION_DEFAULT_SUMMARY_TOKENS;
    if (summary_tokens > budget / 4) summary_tokens = (int)(budget / 4) > 1 ? (int)(budget / 4) : 1;
    json_t *sys = s->system ? s->system : s->stored_system;
    double summary_now = 0;
    if (s->summary) {
        json_t *t = json_string(s->summary);
        summary_now = api_estimate_json_tokens(t);
        json_decref(t);
    }
    double fixed = session_tokens(sys) + session_tokens(s->turn) + reserve +
                   (sc->summary_model ? (summary_now > summary_tokens ? summary_now : summary_tokens) : summary_now);
    size_t drop = session_fit_drop(s->history, fixed, budget);
    if (!drop) return;
    if (sc->summary_model) summarise(c, s, drop, summary_tokens);
    s->drop = drop;
    char n[32];
    snprintf(n, sizeof n, "%zu", drop);
    http_set_header(req, "X-Gpupool-Session-Dropped", n);
    json_object_set_new(body, "messages", session_conversation(sys, s->summary, s->history, drop, s->turn));
}

char *api_session_forward_body(const json_t *body, size_t *len)
{
    json_t *copy = json_copy((json_t *)body);
    json_object_del(copy, "session_id");
    char *text = copy ? json_dumps(copy, JSON_COMPACT) : NULL;
    json_decref(copy);
    *len = text ? strlen(text) : 0;
    return text;
}

void api_session_commit(coord *c, api_session *s, const json_t *completion, const char *text, size_t len)
{
    if (!s || !s->active || (!completion && !text)) return;
    json_t *answer = completion ? session_assistant_message(completion)
                                : json_pack("{s:s, s:s%}", "role", "assistant", "content", text ? text : "", len);
    if (!answer) return;
    json_t *append = json_copy(s->turn);
    json_array_append_new(append, answer);
    session_write w = {.owner = s->owner, .id = s->id, .model = s->model, .system = s->system, .append = append,
                       .drop_before_seq = s->drop ? s->first_seq + (int64_t)s->drop : 0,
                       .summary = s->summary_changed ? s->summary : NULL, .is_private = s->is_private,
                       .private_rule = s->private_rule, .now_ms = wall_ms(), .ttl_ms = c->cfg.sessions.ttl_ms};
    if (store_session_write(c->st, &w))
        log_warn("session %s: cannot store the turn: %s", s->id, store_errmsg(c->st));
    json_decref(append);
}

static json_t *ref(json_t *j) { return j ? json_incref(j) : NULL; }

void api_session_copy(api_session *dst, const api_session *src)
{
    *dst = *src;
    /* The JSON is never changed once loaded, so references do. */
    ref(dst->system);
    ref(dst->stored_system);
    ref(dst->turn);
    ref(dst->history);
    dst->summary = src->summary ? strdup(src->summary) : NULL;
}

void api_session_free(api_session *s)
{
    if (!s) return;
    json_decref(s->system);
    json_decref(s->stored_system);
    json_decref(s->turn);
    json_decref(s->history);
    free(s->summary);
    memset(s, 0, sizeof *s);
}

/* ---- GET and DELETE /v1/sessions/{id} ---- */

void api_sessions_get(coord *c, http_req *req, const char *id)
{
    char owner[40];
    coord_owner(c, req, owner);
    session_rec rec;
    int rc = session_id_valid(id) ? store_session_get(c->st, owner, id, wall_ms(), &rec) : STORE_NOT_FOUND;
    if (rc == STORE_NOT_FOUND) {
        api_error(req, 404, "invalid_request_error", "session_not_found", NULL, "no session '%s'", id);
        return;
    }
    if (rc) {
        api_server_error(req, 500, "store_error", "cannot read the session: %s", store_errmsg(c->st));
        return;
    }
    json_t *j = session_json(&rec);
    session_rec_free(&rec);
    http_respond_json(req, 200, j);
    json_decref(j);
}

void api_sessions_delete(coord *c, http_req *req, const char *id)
{
    char owner[40];
    coord_owner(c, req, owner);
    int rc = session_id_valid(id) ? store_session_delete(c->st, owner, id) : STORE_NOT_FOUND;
    if (rc == STORE_NOT_FOUND) {
        api_error(req, 404, "invalid_request_error", "session_not_found", NULL, "no session '%s'", id);
        return;
    }
    if (rc) {
        api_server_error(req, 500, "store_error", "cannot delete the session: %s", store_errmsg(c->st));
        return;
    }
    json_t *j = json_pack("{s:s, s:s, s:b}", "id", id, "object", "session.deleted", "deleted", 1);
    http_respond_json(req, 200, j);
    json_decref(j);
}
