/* api/lowcode: what browser-based and low-code clients need from the
 * gateway, as one policy over every answer:
 *
 *   CORS       an allowlist of origins; an allowed origin is echoed with
 *              credentials allowed, preflights (OPTIONS) are answered, other
 *              origins get no CORS headers (and 403 to a preflight).
 *   envelope   "always200": every JSON answer comes with status 200, as
 *              {"ok":true,"status":N,"data":…} or {"ok":false,"status":N,
 *              "error":{…}}, because data-source layers drop the bodies of
 *              non-2xx answers.  Asked for by ?envelope=always200,
 *              X-Gpupool-Envelope: always200, or by the server for some
 *              origins or for everyone.
 *   case       "camel": request bodies' camelCase keys are read as snake_case
 *              and answers come in camelCase (api/jsoncase).  ?case=camel or
 *              X-Gpupool-Case: camel, or the server's default.
 *   fields     ?fields=status,result trims a task to those fields (and id).
 *
 * The decisions are pure functions of the configuration and the request's
 * headers (tested without sockets); lowcode_prepare and lowcode_answer apply
 * them to a request and to its answer. */
#ifndef GPUPOOL_API_LOWCODE_H
#define GPUPOOL_API_LOWCODE_H

#include <jansson.h>
#include <stddef.h>

#include "http/server.h"

#define LOWCODE_MAX_ORIGINS 32
#define LOWCODE_ORIGIN_MAX 256

typedef struct lowcode_cfg {
    char cors[LOWCODE_MAX_ORIGINS][LOWCODE_ORIGIN_MAX];     /* allowed origins, normalised */
    int ncors;
    char envelope[LOWCODE_MAX_ORIGINS][LOWCODE_ORIGIN_MAX]; /* origins answered in the envelope by default */
    int nenvelope;
    int envelope_all; /* every request gets the envelope unless it asks otherwise */
    int camel_all;    /* every request speaks camelCase unless it asks otherwise */
    int max_age_s;    /* how long a browser may keep a preflight's answer */
} lowcode_cfg;

/* Normalises an origin ("https://Apps.Example.com:8443/" ->
 * "https://apps.example.com:8443"): scheme http or https, a host, an optional
 * port, nothing after.  Returns 0, or -1 with a reason. */
int lowcode_origin_normalise(const char *in, char *out, size_t outlen, char *err, size_t errlen);
/* Adds to the CORS allowlist (cors = 1) or to the envelope origins.  Returns
 * 0, or -1 with a reason (a bad origin, too many). */
int lowcode_add_origin(lowcode_cfg *c, int cors, const char *origin, char *err, size_t errlen);

/* What one request gets. */
typedef struct lowcode_mode {
    int applies;    /* the path is part of the public API (/v1/..., /healthz) */
    int cors;       /* the Origin is allowed: answer with CORS headers */
    int vary;       /* CORS is configured, so answers depend on Origin */
    int envelope;   /* always200 */
    int camel;
    char origin[LOWCODE_ORIGIN_MAX]; /* as the client sent it, when cors */
} lowcode_mode;

/* The request's facts, each NULL when absent. */
typedef struct lowcode_req {
    const char *path;
    const char *origin;
    const char *envelope_header, *envelope_query; /* "always200" or "off" */
    const char *case_header, *case_query;         /* "camel" or "snake" */
} lowcode_req;

/* Decides the mode.  Returns 0, or -1 with the name of the parameter whose
 * value is not one of those above (the request then gets 400). */
int lowcode_decide(const lowcode_cfg *c, const lowcode_req *r, lowcode_mode *m, const char **bad_param);

/* The body of an answer in the envelope, from the answer's status and JSON
 * body (taken: the caller's reference moves into the result).  An error body
 * is the API's {"error":{…}}; its object becomes the envelope's "error". */
json_t *lowcode_envelope(int status, json_t *body);

/* Keeps only the named top-level fields (comma-separated, either case) of a
 * task object, plus "id"; a list's tasks are trimmed each.  Anything that is
 * not a task is left alone. */
void lowcode_trim_fields(json_t *body, const char *fields);

/* In camel mode: rewrites a field name an error's "param" names
 * ("input.max_tokens" -> "input.maxTokens"), into out. */
void lowcode_param_to_camel(const char *param, char *out, size_t outlen);

/* Headers, as name/value pairs, that an answer gets: every answer to an
 * allowed origin (Allow-Origin, Allow-Credentials, Expose-Headers, and Vary
 * whenever CORS is configured), and what a preflight adds (Allow-Methods
 * from the path's `methods`, Allow-Headers, Max-Age).  Returns how many. */
typedef struct lowcode_header { const char *name; char value[512]; } lowcode_header;
#define LOWCODE_MAX_HEADERS 8
int lowcode_cors_headers(const lowcode_mode *m, lowcode_header out[LOWCODE_MAX_HEADERS]);
int lowcode_preflight_headers(const lowcode_cfg *c, const char *methods, lowcode_header out[LOWCODE_MAX_HEADERS]);

/* ---- applied to requests (api/router calls these) ---- */

/* Runs first for every request: answers a preflight or an OPTIONS, rejects a
 * bad envelope/case value, and in camel mode rewrites the body's keys to
 * snake_case; moves a task body's "idempotency_key" to the Idempotency-Key
 * header.  Returns 1 when it has answered the request. */
int lowcode_prepare(const lowcode_cfg *c, http_req *req);
/* The answer hook: CORS headers, case, fields and the envelope. */
void lowcode_answer(const lowcode_cfg *c, http_req *req, http_answer *a);

#endif
