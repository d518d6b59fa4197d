/* api/sessions: conversation sessions in the chat path.  A chat body with
 * "session_id" (or the header X-Gpupool-Session) sends only its new
 * messages; the gateway keeps the history in the store, rebuilds the whole
 * conversation before the request is classified, cached and placed, fits it
 * into the session budget (the oldest turns go, or are summarised by the
 * configured model through the pool), and appends the new turn with the
 * assistant's answer once the answer succeeded.  A session belongs to the
 * API key that made it; once one of its turns is private, every later turn
 * is too.  Also GET and DELETE /v1/sessions/{id} (declared in coord.h).
 * See docs/api.md "Sessions". */
#ifndef GPUPOOL_API_SESSIONS_H
#define GPUPOOL_API_SESSIONS_H

#include <jansson.h>
#include <stdint.h>

#include "api/coord.h"
#include "api/session_fit.h"
#include "policy/classify.h"

/* One session turn in flight.  Owned by whoever holds it; move it by copy
 * and then zeroing the source. */
typedef struct api_session {
    int active;                /* 0: the request names no session */
    char id[SESSION_ID_MAX + 1];
    char owner[40];
    char model[256];
    json_t *system;            /* the request's system messages, to store; NULL = keep */
    json_t *stored_system;     /* the stored ones */
    json_t *turn;              /* the request's other messages: the new turn */
    json_t *history;           /* stored messages, oldest first */
    int64_t first_seq;         /* history[0]'s number */
    char *summary;             /* the stored summary; replaced when turns are summarised */
    int summary_changed;
    size_t drop;               /* history messages this turn drops */
    int is_private;            /* stored as private, or this turn is */
    char private_rule[64];
} api_session;

/* Whether the request names a session. */
int api_session_named(http_req *req, const json_t *body);

/* Loads the named session of the request's key (a new one when it has
 * none) and puts the whole conversation in body's messages, session_id
 * set.  Returns 0 (s->active 0 when no session is named), or -1 after
 * answering the client (a bad session id). */
int api_session_begin(coord *c, http_req *req, json_t *body, api_session *s);

/* After body was classified: a session stored as private makes the turn
 * private ("session"), and a private turn makes the session private at once
 * (before anything is sent, so a failed turn still counts). */
void api_session_classified(coord *c, api_session *s, classification *cls);

/* Fits the conversation into the budget, summarising the dropped turns when
 * a summary model is set (on trusted capacity only when private), and
 * rewrites body's messages.  Blocks on the summary call. */
void api_session_fit(coord *c, http_req *req, json_t *body, api_session *s);

/* The body to forward: body without session_id, malloc'd compact JSON. */
char *api_session_forward_body(const json_t *body, size_t *len);

/* Stores the turn and the answer: a chat.completion, or (completion NULL)
 * the text of a collected stream.  Nothing when both are NULL (an answer
 * that could not be read). */
void api_session_commit(coord *c, api_session *s, const json_t *completion, const char *text, size_t len);

/* A copy that shares nothing mutable with src (for a stream's own record). */
void api_session_copy(api_session *dst, const api_session *src);
void api_session_free(api_session *s);

#endif
