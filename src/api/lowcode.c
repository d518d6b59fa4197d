/* api/lowcode: see lowcode.h. */
#include "api/lowcode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/errors.h"
#include "api/jsoncase.h"
#include "api/routes.h"
#include "util/log.h"

/* Headers a browser may send cross-origin.  Authorization and a JSON
 * Content-Type are what make a data source's request need a preflight;
 * the rest are the gateway's own and what XHR libraries add. */
static const char ALLOW_HEADERS[] =
    "Authorization, Content-Type, Accept, Idempotency-Key, X-Requested-With, X-Gpupool-Envelope, "
    "X-Gpupool-Case, X-Gpupool-Priority, X-Gpupool-Continue, X-Gpupool-Sensitivity, Cache-Control, "
    "X-Gpupool-Session, X-Gpupool-Track, X-Gpupool-Urgency, X-Request-Id";
/* Answer headers a page's script may read (beyond the always-safe ones). */
static const char EXPOSE_HEADERS[] =
    "X-Gpupool-Node, X-Gpupool-Route, X-Gpupool-Task, X-Gpupool-Simulated, X-Gpupool-Status, "
    "X-Gpupool-Sensitivity, X-Gpupool-Cache, Age, Retry-After, Idempotent-Replayed, X-Gpupool-Session, "
    "X-Gpupool-Session-Dropped, X-Gpupool-Version, X-Gpupool-Batch, X-Gpupool-Batch-Status, X-Gpupool-Run, "
    "X-Request-Id";

int lowcode_origin_normalise(const char *in, char *out, size_t outlen, char *err, size_t errlen)
{
    size_t scheme;
    if (!strncasecmp(in, "http://", 7)) scheme = 7;
    else if (!strncasecmp(in, "https://", 8)) scheme = 8;
    else { snprintf(err, errlen, "origin '%s' must start with http:// or https://", in); return -1; }
    size_t n = strlen(in);
    if (n > scheme && in[n - 1] == '/') n--; /* "https://a.example/" is the same origin */
    if (n >= outlen || n == scheme) { snprintf(err, errlen, "origin '%s' has no host or is too long", in); return -1; }
    int port = 0, bracket = 0;
    for (size_t i = scheme; i < n; i++) {
        char ch = in[i];
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-' ||
                 ch == '.';
        if (ch == '[' && i == scheme) { bracket = 1; ok = 1; }
        else if (ch == ']' && bracket) { bracket = 0; ok = 1; }
        else if (bracket && ch == ':') ok = 1;
        else if (ch == ':' && !bracket && !port && i + 1 < n) { port = 1; ok = 1; }
        else if (port && !(ch >= '0' && ch <= '9')) ok = 0;
        if (!ok) {
            snprintf(err, errlen, "origin '%s' must be scheme://host[:port] with nothing after", in);
            return -1;
        }
    }
    if (bracket) { snprintf(err, errlen, "origin '%s' has an unclosed [", in); return -1; }
    for (size_t i = 0; i < n; i++) out[i] = (char)(in[i] >= 'A' && in[i] <= 'Z' ? in[i] - 'A' + 'a' : in[i]);
    out[n] = 0;
    return 0;
}

int lowcode_add_origin(lowcode_cfg *c, int cors, const char *origin, char *err, size_t errlen)
{
    int *count = cors ? &c->ncors : &c->nenvelope;
    char(*list)[LOWCODE_ORIGIN_MAX] = cors ? c->cors : c->envelope;
    if (*count >= LOWCODE_MAX_ORIGINS) {
        snprintf(err, errlen, "at most %d origins", LOWCODE_MAX_ORIGINS);
        return -1;
    }
    if (lowcode_origin_normalise(origin, list[*count], LOWCODE_ORIGIN_MAX, err, errlen)) return -1;
    (*count)++;
    return 0;
}

static int listed(const char (*list)[LOWCODE_ORIGIN_MAX], int n, const char *origin)
{
    char norm[LOWCODE_ORIGIN_MAX], err[8];
    if (!origin || lowcode_origin_normalise(origin, norm, sizeof norm, err, sizeof err)) return 0;
    for (int i = 0; i < n; i++)
        if (!strcmp(list[i], norm)) return 1;
    return 0;
}

/* A request's choice: 1 on, 0 off, -1 not given, -2 not understood. */
static int choice(const char *v, const char *on, const char *off)
{
    if (!v) return -1;
    if (!strcasecmp(v, on)) return 1;
    if (!strcasecmp(v, off)) return 0;
    return -2;
}

int lowcode_decide(const lowcode_cfg *c, const lowcode_req *r, lowcode_mode *m, const char **bad_param)
{
    memset(m, 0, sizeof *m);
    *bad_param = NULL;
    const char *p = r->path ? r->path : "";
    if (!strncmp(p, "/internal/", 10)) return 0; /* the workers' plane is not the browser's */
    m->vary = c->ncors > 0;
    if (listed(c->cors, c->ncors, r->origin)) {
        m->cors = 1;
        snprintf(m->origin, sizeof m->origin, "%s", r->origin);
    }
    m->applies = !strncmp(p, "/v1/", 4) || !strcmp(p, "/healthz");
    if (!m->applies) return 0;
    /* The header is the request's own choice; the query wins over it
     * because a data source can change its URL more easily than headers. */
    int env = choice(r->envelope_query, "always200", "off");
    if (env == -2) { *bad_param = "envelope"; return -1; }
    if (env == -1) env = choice(r->envelope_header, "always200", "off");
    if (env == -2) { *bad_param = "X-Gpupool-Envelope"; return -1; }
    if (env == -1)
        env = c->envelope_all || listed(c->envelope, c->nenvelope, r->origin);
    int camel = choice(r->case_query, "camel", "snake");
    if (camel == -2) { *bad_param = "case"; return -1; }
    if (camel == -1) camel = choice(r->case_header, "camel", "snake");
    if (camel == -2) { *bad_param = "X-Gpupool-Case"; return -1; }
    if (camel == -1) camel = c->camel_all;
    m->envelope = env;
    m->camel = camel;
    return 0;
}

json_t *lowcode_envelope(int status, json_t *body)
{
    int ok = status >= 200 && status < 400;
    json_t *e = json_object();
    json_object_set_new(e, "ok", json_boolean(ok));
    json_object_set_new(e, "status", json_integer(status));
    json_t *err = ok ? NULL : json_object_get(body, "error");
    if (err) json_object_set(e, "error", err);
    else json_object_set(e, ok ? "data" : "error", body ? body : json_null());
    json_decref(body);
    return e;
}

static void trim_task(json_t *t, const char *fields)
{
    if (!json_is_object(t) || !json_is_string(json_object_get(t, "object")) ||
        strcmp(json_string_value(json_object_get(t, "object")), "task"))
        return;
    void *it = json_object_iter(t);
    while (it) {
        const char *k = json_object_iter_key(it);
        void *next = json_object_iter_next(t, it);
        int keep = !strcmp(k, "id");
        for (const char *f = fields; *f && !keep;) {
            size_t len = strcspn(f, ",");
            char name[128], snake[128];
            if (len < sizeof name) {
                memcpy(name, f, len);
                name[len] = 0;
                char *s = name; /* "status, result" */
                while (*s == ' ') s++;
                s[strcspn(s, " ")] = 0;
                keep = jsoncase_to_snake(s, snake, sizeof snake) >= 0 && !strcmp(snake, k);
            }
            f += len + (f[len] == ',');
        }
        if (!keep) json_object_del(t, k);
        it = next;
    }
}

void lowcode_trim_fields(json_t *body, const char *fields)
{
    if (!fields || !*fields) return;
    trim_task(body, fields);
    json_t *data = json_object_get(body, "data");
    size_t i;
    json_t *t;
    if (json_is_array(data)) json_array_foreach(data, i, t) trim_task(t, fields);
}

void lowcode_param_to_camel(const char *param, char *out, size_t outlen)
{
    size_t n = 0;
    if (!outlen) return;
    out[0] = 0;
    for (const char *p = param; *p;) {
        size_t len = strcspn(p, ".");
        char seg[128], cam[128];
        if (len >= sizeof seg) return;
        memcpy(seg, p, len);
        seg[len] = 0;
        if (jsoncase_to_camel(seg, cam, sizeof cam) < 0) return;
        int w = snprintf(out + n, outlen - n, "%s%s", n ? "." : "", cam);
        if (w < 0 || (size_t)w >= outlen - n) return;
        n += (size_t)w;
        p += len + (p[len] == '.');
    }
}

static int put(lowcode_header *out, int n, const char *name, const char *value)
{
    if (n >= LOWCODE_MAX_HEADERS) return n;
    out[n].name = name;
    snprintf(out[n].value, sizeof out[n].value, "%s", value);
    return n + 1;
}

int lowcode_cors_headers(const lowcode_mode *m, lowcode_header out[LOWCODE_MAX_HEADERS])
{
    int n = 0;
    if (m->vary) n = put(out, n, "Vary", "Origin");
    if (!m->cors) return n;
    n = put(out, n, "Access-Control-Allow-Origin", m->origin);
    n = put(out, n, "Access-Control-Allow-Credentials", "true");
    n = put(out, n, "Access-Control-Expose-Headers", EXPOSE_HEADERS);
    return n;
}

int lowcode_preflight_headers(const lowcode_cfg *c, const char *methods, lowcode_header out[LOWCODE_MAX_HEADERS])
{
    char all[96], age[32];
    snprintf(all, sizeof all, "%s, OPTIONS", methods);
    snprintf(age, sizeof age, "%d", c->max_age_s > 0 ? c->max_age_s : 600);
    int n = put(out, 0, "Access-Control-Allow-Methods", all);
    n = put(out, n, "Access-Control-Allow-Headers", ALLOW_HEADERS);
    n = put(out, n, "Access-Control-Max-Age", age);
    /* The answer also depends on what the preflight asked for. */
    n = put(out, n, "Vary", "Access-Control-Request-Method, Access-Control-Request-Headers");
    return n;
}

/* ---- applied to requests ---- */

static int mode_of(const lowcode_cfg *c, http_req *req, lowcode_mode *m, const char **bad)
{
    lowcode_req r = {.path = http_req_path(req),
                     .origin = http_req_header(req, "Origin"),
                     .envelope_header = http_req_header(req, "X-Gpupool-Envelope"),
                     .envelope_query = http_req_query(req, "envelope"),
                     .case_header = http_req_header(req, "X-Gpupool-Case"),
                     .case_query = http_req_query(req, "case")};
    return lowcode_decide(c, &r, m, bad);
}

static void set_headers(http_req *req, const lowcode_header *h, int n)
{
    for (int i = 0; i < n; i++) http_set_header(req, h[i].name, h[i].value);
}

/* OPTIONS: a CORS preflight, or a plain question about the methods. */
static void options(const lowcode_cfg *c, http_req *req, const lowcode_mode *m)
{
    char methods[64];
    const char *path = http_req_path(req);
    if (!api_route_methods(path, methods, sizeof methods) || !strncmp(path, "/internal/", 10)) {
        api_error(req, 404, "invalid_request_error", "not_found", NULL, "no such endpoint: OPTIONS %s", path);
        return;
    }
    const char *origin = http_req_header(req, "Origin");
    if (origin && http_req_header(req, "Access-Control-Request-Method")) {
        if (!m->cors) {
            log_warn("refused a CORS preflight for %s from origin %s: not in --cors-origin", path, origin);
            api_error(req, 403, "invalid_request_error", "cors_origin_not_allowed", NULL,
                      "the origin '%s' may not call this API from a browser (see --cors-origin)", origin);
            return;
        }
        lowcode_header h[LOWCODE_MAX_HEADERS];
        set_headers(req, h, lowcode_preflight_headers(c, methods, h));
    } else {
        char allow[96];
        snprintf(allow, sizeof allow, "%s, OPTIONS", methods);
        http_set_header(req, "Allow", allow);
    }
    http_respond(req, 204, NULL, "", 0);
}

/* Reads the body again after renaming its keys, and takes a task's
 * idempotency key from the body for clients that cannot set headers.
 * Returns 1 when it answered (a conflicting key). */
static int rewrite_body(http_req *req, const lowcode_mode *m)
{
    size_t len;
    const char *body = http_req_body(req, &len);
    int task = !strcmp(http_req_method(req), "POST") && !strcmp(http_req_path(req), "/v1/tasks");
    int has_key = task && (memmem(body, len, "idempotency_key", 15) || memmem(body, len, "idempotencyKey", 14));
    if (!len || (!m->camel && !has_key)) return 0;
    /* A body that does not parse is left for its handler to refuse. */
    json_t *j = json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL);
    if (!json_is_object(j)) { json_decref(j); return 0; }
    if (m->camel) jsoncase_keys_to_snake(j);
    json_t *key = task ? json_object_get(j, "idempotency_key") : NULL;
    if (!m->camel && !key) { json_decref(j); return 0; } /* the words were only in a message */
    if (key) {
        const char *given = http_req_header(req, "Idempotency-Key");
        if (!json_is_string(key)) {
            api_bad_request(req, "invalid_type", m->camel ? "idempotencyKey" : "idempotency_key",
                            "the idempotency key must be a string");
            json_decref(j);
            return 1;
        }
        if (given && strcmp(given, json_string_value(key))) {
            api_bad_request(req, "invalid_value", m->camel ? "idempotencyKey" : "idempotency_key",
                            "the body's idempotency key differs from the Idempotency-Key header");
            json_decref(j);
            return 1;
        }
        if (!given) http_req_add_header(req, "Idempotency-Key", json_string_value(key));
        json_object_del(j, "idempotency_key");
    }
    char *text = json_dumps(j, JSON_COMPACT);
    if (text) http_req_replace_body(req, text, strlen(text));
    free(text);
    json_decref(j);
    return 0;
}

int lowcode_prepare(const lowcode_cfg *c, http_req *req)
{
    lowcode_mode m;
    const char *bad;
    int rc = mode_of(c, req, &m, &bad);
    if (!strcmp(http_req_method(req), "OPTIONS")) {
        options(c, req, &m);
        return 1;
    }
    if (rc) {
        int is_case = !strcmp(bad, "case") || !strcmp(bad, "X-Gpupool-Case");
        api_bad_request(req, "invalid_value", bad, "the %s %s must be %s", bad[0] == 'X' ? "header" : "parameter",
                        bad, is_case ? "camel or snake" : "always200 or off");
        return 1;
    }
    if (m.applies) return rewrite_body(req, &m);
    return 0;
}

void lowcode_answer(const lowcode_cfg *c, http_req *req, http_answer *a)
{
    lowcode_mode m;
    const char *bad;
    /* A bad envelope or case value keeps the CORS headers (the page should
     * see the 400 that names it), without the envelope or case. */
    if (mode_of(c, req, &m, &bad)) m.envelope = m.camel = 0;
    lowcode_header h[LOWCODE_MAX_HEADERS];
    set_headers(req, h, lowcode_cors_headers(&m, h));
    const char *fields = http_req_query(req, "fields");
    int trim = fields && a->status == 200 && !strcmp(http_req_method(req), "GET") &&
               !strncmp(http_req_path(req), "/v1/tasks", 9);
    if (a->streamed || !m.applies || (!m.envelope && !m.camel && !trim)) return;
    if (!a->content_type || strncmp(a->content_type, "application/json", 16)) return;
    json_t *j = json_loadb(a->body, a->len, 0, NULL);
    if (!j) return;
    if (trim) lowcode_trim_fields(j, fields);
    if (m.camel) {
        jsoncase_keys_to_camel(j);
        json_t *err = json_object_get(j, "error");
        const char *param = json_string_value(json_object_get(err, "param"));
        if (param) {
            char cam[128];
            lowcode_param_to_camel(param, cam, sizeof cam);
            if (cam[0]) json_object_set_new(err, "param", json_string(cam));
        }
    }
    if (m.envelope) {
        char st[16];
        snprintf(st, sizeof st, "%d", a->status);
        http_set_header(req, "X-Gpupool-Status", st);
        j = lowcode_envelope(a->status, j);
        a->status = 200;
    }
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!text) return;
    free(a->replaced);
    a->replaced = text;
    a->body = text;
    a->len = strlen(text);
}
