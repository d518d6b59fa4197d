/* api/batches: many inputs in one submission (POST /v1/batches), in the
 * OpenAI Batch API's shape where it fits.  Every item is validated before
 * anything is stored, so a batch is accepted whole or not at all; then the
 * batch and its items, each an ordinary durable task, go to the store in one
 * transaction.  The dispatcher spreads the items over the pool like any other
 * tasks; batches default to a low priority so people waiting on interactive
 * calls and ordinary tasks keep their latency.  Progress and results are read
 * back from the items' tasks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/coord.h"
#include "api/errors.h"
#include "api/validate.h"
#include "catalog/catalog.h"
#include "policy/classify.h"
#include "util/clock.h"
#include "util/ids.h"
#include "util/log.h"

/* More would make one submission hold the store's lock for long. */
#define BATCH_MAX_ITEMS 50000
#define BATCH_DEFAULT_PRIORITY 1
#define BATCH_LIST_MAX 100

/* One parsed item: its OpenAI body (owned), kind and caller's id. */
typedef struct item {
    json_t *body;
    api_kind kind;
    const char *custom_id; /* borrowed from the parsed input */
} item;

typedef struct batch_in {
    json_t *root;        /* the JSON body, or an array of the JSONL lines */
    json_t *inputs;      /* borrowed: the array of raw items */
    const char *type;    /* the batch's default type; NULL = each item's url */
    const char *model;   /* the batch's default model; NULL = each item's own */
    int priority, max_attempts;
} batch_in;

static api_kind kind_from_url(const char *url)
{
    for (api_kind k = KIND_CHAT; k < KIND_UNKNOWN; k++)
        if (url && !strcmp(url, api_kind_path(k))) return k;
    return KIND_UNKNOWN;
}

/* An integer option from the JSON body or, for JSONL, the query. */
static int int_opt(http_req *req, json_t *v, const char *qv, const char *name, int lo, int hi, int *out)
{
    long x;
    if (v && !json_is_null(v)) {
        if (!json_is_integer(v)) { api_bad_request(req, "invalid_type", name, "'%s' must be an integer", name); return -1; }
        x = (long)json_integer_value(v);
    } else if (qv) {
        char *e;
        x = strtol(qv, &e, 10);
        if (e == qv || *e) { api_bad_request(req, "invalid_type", name, "'%s' must be an integer", name); return -1; }
    } else {
        return 0;
    }
    if (x < lo || x > hi) {
        api_bad_request(req, "invalid_value", name, "'%s' must be between %d and %d", name, lo, hi);
        return -1;
    }
    *out = (int)x;
    return 0;
}

/* JSONL: one JSON object per non-empty line. */
static json_t *parse_jsonl(http_req *req, const char *body, size_t len)
{
    json_t *lines = json_array();
    size_t pos = 0;
    int lineno = 0;
    while (pos < len) {
        const char *nl = memchr(body + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - body) : len;
        lineno++;
        size_t a = pos, b = end;
        while (a < b && (body[a] == ' ' || body[a] == '\t' || body[a] == '\r')) a++;
        while (b > a && (body[b - 1] == ' ' || body[b - 1] == '\t' || body[b - 1] == '\r')) b--;
        pos = end + 1;
        if (a == b) continue;
        json_error_t jerr;
        json_t *j = json_loadb(body + a, b - a, JSON_REJECT_DUPLICATES, &jerr);
        if (!json_is_object(j)) {
            json_decref(j);
            json_decref(lines);
            api_bad_request(req, "invalid_json", "inputs", "line %d of the JSONL body is not a JSON object%s%s",
                            lineno, j ? "" : ": ", j ? "" : jerr.text);
            return NULL;
        }
        if (json_array_size(lines) >= BATCH_MAX_ITEMS) {
            json_decref(j);
            json_decref(lines);
            api_bad_request(req, "invalid_value", "inputs", "a batch holds at most %d items", BATCH_MAX_ITEMS);
            return NULL;
        }
        json_array_append_new(lines, j);
    }
    return lines;
}

static int is_jsonl(http_req *req)
{
    const char *ct = http_req_header(req, "Content-Type");
    return ct && (strstr(ct, "jsonl") || strstr(ct, "ndjson") || strstr(ct, "json-seq"));
}

/* The batch's options and raw items, from either form.  0 on success; else
 * the 400 has been sent. */
static int read_batch(coord *c, http_req *req, batch_in *in)
{
    memset(in, 0, sizeof *in);
    in->priority = BATCH_DEFAULT_PRIORITY;
    in->max_attempts = c->cfg.max_attempts;
    json_t *prio = NULL, *maxat = NULL;
    const char *qprio = NULL, *qmax = NULL;
    if (is_jsonl(req)) {
        size_t len;
        const char *body = http_req_body(req, &len);
        if (!(in->root = parse_jsonl(req, body, len))) return -1;
        in->inputs = in->root;
        in->type = http_req_query(req, "type");
        in->model = http_req_query(req, "model");
        qprio = http_req_query(req, "priority");
        qmax = http_req_query(req, "max_attempts");
    } else {
        if (!(in->root = api_read_json_object(req))) return -1;
        json_t *type = json_object_get(in->root, "type"), *model = json_object_get(in->root, "model");
        if (type && !json_is_string(type)) { api_bad_request(req, "invalid_type", "type", "'type' must be a string"); return -1; }
        if (model && (!json_is_string(model) || !json_string_length(model))) {
            api_bad_request(req, "invalid_type", "model", "'model' must be a non-empty string");
            return -1;
        }
        in->type = json_string_value(type);
        in->model = json_string_value(model);
        in->inputs = json_object_get(in->root, "inputs");
        prio = json_object_get(in->root, "priority");
        maxat = json_object_get(in->root, "max_attempts");
        if (!in->inputs) { api_bad_request(req, "missing_field", "inputs", "'inputs' is required"); return -1; }
        if (!json_is_array(in->inputs)) {
            api_bad_request(req, "invalid_type", "inputs", "'inputs' must be an array of request bodies");
            return -1;
        }
    }
    if (in->type && *in->type && api_kind_from_task_type(in->type) == KIND_UNKNOWN) {
        api_bad_request(req, "invalid_value", "type", "'type' must be one of \"chat\", \"completion\", \"embedding\"");
        return -1;
    }
    if (in->type && !*in->type) in->type = NULL;
    if (in->model && !*in->model) in->model = NULL;
    if (int_opt(req, prio, qprio, "priority", 0, 9, &in->priority)) return -1;
    if (int_opt(req, maxat, qmax, "max_attempts", 1, 10, &in->max_attempts)) return -1;
    size_t n = json_array_size(in->inputs);
    if (n == 0) { api_bad_request(req, "invalid_value", "inputs", "a batch needs at least one item"); return -1; }
    if (n > BATCH_MAX_ITEMS) {
        api_bad_request(req, "invalid_value", "inputs", "a batch holds at most %d items (this one has %zu)",
                        BATCH_MAX_ITEMS, n);
        return -1;
    }
    return 0;
}

/* Item i as a task body: an OpenAI body, or OpenAI's batch line
 * {"custom_id", "method", "url", "body"}.  0 on success; else the 400 (or
 * 404/503) naming the item has been sent. */
static int read_item(coord *c, http_req *req, const batch_in *in, size_t i, item *it, classification *cls)
{
    json_t *raw = json_array_get(in->inputs, i), *body = raw;
    char param[96];
    snprintf(param, sizeof param, "inputs[%zu]", i);
    if (!json_is_object(raw)) {
        api_bad_request(req, "invalid_type", param, "item %zu must be an object (a request body)", i);
        return -1;
    }
    it->kind = in->type ? api_kind_from_task_type(in->type) : KIND_UNKNOWN;
    json_t *url = json_object_get(raw, "url"), *inner = json_object_get(raw, "body");
    if (json_is_object(inner) && (url || json_object_get(raw, "custom_id"))) {
        json_t *cid = json_object_get(raw, "custom_id"), *method = json_object_get(raw, "method");
        if (cid && !json_is_string(cid)) {
            api_bad_request(req, "invalid_type", param, "item %zu: 'custom_id' must be a string", i);
            return -1;
        }
        if (method && (!json_is_string(method) || strcmp(json_string_value(method), "POST"))) {
            api_bad_request(req, "invalid_value", param, "item %zu: 'method' must be \"POST\"", i);
            return -1;
        }
        if (url) {
            it->kind = kind_from_url(json_string_value(url));
            if (it->kind == KIND_UNKNOWN) {
                api_bad_request(req, "invalid_value", param, "item %zu: 'url' must be /v1/chat/completions, "
                                "/v1/completions or /v1/embeddings", i);
                return -1;
            }
        }
        it->custom_id = json_string_value(cid);
        body = inner;
    }
    if (it->kind == KIND_UNKNOWN) {
        api_bad_request(req, "missing_field", "type", "item %zu: the batch has no 'type' and the item no 'url'", i);
        return -1;
    }
    it->body = json_deep_copy(body);
    json_object_del(it->body, "stream");
    json_t *model = json_object_get(it->body, "model");
    if (!model && in->model) json_object_set_new(it->body, "model", json_string(in->model));
    if (!json_object_get(it->body, "model")) {
        api_bad_request(req, "missing_field", "model", "item %zu has no 'model' and the batch names none", i);
        return -1;
    }
    api_invalid why;
    if (api_validate_body(it->kind, it->body, &why)) {
        snprintf(param, sizeof param, "inputs[%zu].%s", i, why.param);
        api_bad_request(req, why.code, param, "item %zu: %s", i, why.message);
        return -1;
    }
    const char *m = json_string_value(json_object_get(it->body, "model"));
    const char *canonical = catalog_resolve(c->catalog, m); /* an alias runs as the entry's name */
    if (canonical && strcmp(canonical, m)) {
        json_object_set_new(it->body, "model", json_string(canonical));
        m = json_string_value(json_object_get(it->body, "model"));
    }
    char version[256];
    if (api_rollout_task_model(c, NULL, m, it->body, version, sizeof version)) {
        json_object_set_new(it->body, "model", json_string(version));
        m = json_string_value(json_object_get(it->body, "model"));
    }
    if (!registry_model_known(c->reg, m)) {
        api_error(req, 404, "invalid_request_error", "model_not_found", "model",
                  "item %zu: the model '%s' is not served by any node in the pool", i, m);
        return -1;
    }
    if (classify_request(c->rules, it->body, http_req_header(req, "X-Gpupool-Sensitivity"),
                         coord_key_private(c, req), cls)) {
        api_bad_request(req, "invalid_value", "X-Gpupool-Sensitivity",
                        "X-Gpupool-Sensitivity must be \"private\" or \"normal\"");
        return -1;
    }
    char blocked[400];
    if (registry_model_blocked(c->reg, m, blocked, sizeof blocked)) {
        api_server_error(req, 503, "model_mismatch",
                         "item %zu: no node holds the catalogue's file for '%s': %s; the batch was not accepted", i, m,
                         blocked);
        return -1;
    }
    if (cls->is_private && !registry_model_trusted(c->reg, m)) {
        api_server_error(req, 503, "no_trusted_capacity",
                         "item %zu is private (%s) and no trusted node serves '%s'; the batch was not accepted", i,
                         cls->rule, m);
        return -1;
    }
    return 0;
}

static const char *batch_status(const batch_rec *b)
{
    if (b->cancelled_ms) return "cancelled";
    if (b->counts[0] + b->counts[1] > 0) return "in_progress";
    return b->counts[2] == 0 && b->counts[3] > 0 ? "failed" : "completed";
}

static json_t *ms_or_null(int64_t v) { return v ? json_integer(v) : json_null(); }

/* The public view of a batch: OpenAI's fields (times in ms, as for tasks),
 * the per-state counts and, while it runs, an ETA. */
static json_t *batch_json(coord *c, const batch_rec *b)
{
    const char *status = batch_status(b);
    api_kind k = api_kind_from_task_type(b->type);
    int64_t remaining = b->counts[0] + b->counts[1], done = b->counts[2] + b->counts[3];
    json_t *eta = json_null();
    if (remaining > 0 && !b->cancelled_ms) {
        /* The batch's own pace once it has one; before, the pool's drain
         * rate of the last minute. */
        int64_t elapsed = wall_ms() - b->first_started_ms;
        double rate = registry_drain_rate(c->reg, mono_ms());
        if (done > 0 && b->first_started_ms && elapsed > 0)
            eta = json_integer((json_int_t)((double)remaining * (double)elapsed / (double)done));
        else if (rate > 0)
            eta = json_integer((json_int_t)((double)remaining / rate * 1000));
    }
    json_t *counts = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I}", "total", (json_int_t)b->total, "completed",
                               (json_int_t)b->counts[2], "failed", (json_int_t)b->counts[3], "cancelled",
                               (json_int_t)b->counts[4], "queued", (json_int_t)b->counts[0], "running",
                               (json_int_t)b->counts[1]);
    json_t *j = json_object();
    json_object_set_new(j, "id", json_string(b->id));
    json_object_set_new(j, "object", json_string("batch"));
    json_object_set_new(j, "endpoint", k == KIND_UNKNOWN ? json_null() : json_string(api_kind_path(k)));
    json_object_set_new(j, "type", json_string(b->type));
    json_object_set_new(j, "model", *b->model ? json_string(b->model) : json_null());
    json_object_set_new(j, "priority", json_integer(b->priority));
    json_object_set_new(j, "status", json_string(status));
    json_object_set_new(j, "request_counts", counts);
    json_object_set_new(j, "created_at", json_integer(b->created_ms));
    json_object_set_new(j, "in_progress_at", ms_or_null(b->first_started_ms));
    json_object_set_new(j, "completed_at",
                        !strcmp(status, "completed") || !strcmp(status, "failed") ? ms_or_null(b->last_finished_ms)
                                                                                  : json_null());
    json_object_set_new(j, "cancelled_at", ms_or_null(b->cancelled_ms));
    json_object_set_new(j, "eta_ms", eta);
    json_object_set_new(j, "errors", json_null());
    return j;
}

static void not_found(http_req *req, const char *id)
{
    api_error(req, 404, "invalid_request_error", "batch_not_found", NULL, "no batch with id '%s'", id);
}

json_t *api_batch_view(coord *c, const char *id, int *found)
{
    batch_rec b;
    int rc = store_batch_get(c->st, id, &b);
    *found = rc != STORE_NOT_FOUND;
    return rc == STORE_OK ? batch_json(c, &b) : NULL;
}

static void respond_batch(coord *c, http_req *req, const char *id, int status)
{
    batch_rec b;
    int rc = store_batch_get(c->st, id, &b);
    if (rc == STORE_NOT_FOUND) { not_found(req, id); return; }
    if (rc != STORE_OK) { api_server_error(req, 500, "store_error", "the batch could not be read"); return; }
    json_t *j = batch_json(c, &b);
    http_set_header(req, "X-Gpupool-Batch", id);
    http_respond_json(req, status, j);
    json_decref(j);
}

/* Stores the parsed items as one batch and answers. */
static void store_and_answer(coord *c, http_req *req, const batch_in *in, item *items, classification *cls,
                             size_t n, const char *callback)
{
    size_t len;
    const char *raw = http_req_body(req, &len);
    const char *key = http_req_header(req, "Idempotency-Key");
    char hash[65], id[64], existing[64] = "", owner[40];
    sha256_hex(raw, len, hash);
    make_id(id, sizeof id, "batch");
    coord_owner(c, req, owner);
    task_new *tasks = calloc(n, sizeof *tasks);
    char (*ids)[64] = calloc(n, sizeof *ids);
    char **texts = calloc(n, sizeof *texts);
    const char **cids = calloc(n, sizeof *cids);
    int64_t now = wall_ms();
    int same_kind = 1, same_model = 1;
    const char *model0 = json_string_value(json_object_get(items[0].body, "model"));
    for (size_t i = 0; tasks && ids && texts && cids && i < n; i++) {
        const char *m = json_string_value(json_object_get(items[i].body, "model"));
        same_kind &= items[i].kind == items[0].kind;
        same_model &= !strcmp(m, model0);
        make_id(ids[i], sizeof ids[i], "task");
        texts[i] = json_dumps(items[i].body, JSON_COMPACT);
        cids[i] = items[i].custom_id;
        tasks[i] = (task_new){.id = ids[i], .type = api_kind_task_type(items[i].kind), .model = m,
                              .priority = in->priority, .input_json = texts[i], .max_attempts = in->max_attempts,
                              .created_ms = now, .owner = owner,
                              .prompt_tokens = api_estimate_prompt_tokens(items[i].body),
                              .max_tokens = api_requested_max_tokens(items[i].body),
                              .sensitivity = cls[i].is_private ? "private" : "normal",
                              .route_rule = cls[i].is_private ? cls[i].rule : NULL};
    }
    int rc = STORE_ERR;
    if (tasks && ids && texts && cids) {
        batch_new b = {.id = id, .type = same_kind ? api_kind_task_type(items[0].kind) : "mixed",
                       .model = same_model ? model0 : "", .priority = in->priority, .idem_key = key,
                       .body_hash = hash, .owner = owner, .created_ms = now, .items = tasks,
                       .custom_ids = cids, .n = (int)n};
        rc = store_batch_insert(c->st, &b, existing);
    }
    for (size_t i = 0; texts && i < n; i++) free(texts[i]);
    free(texts);
    free(cids);
    free(ids);
    free(tasks);
    if (rc == STORE_DUPLICATE) {
        http_set_header(req, "Idempotent-Replayed", "true");
        respond_batch(c, req, existing, 200);
    } else if (rc == STORE_CONFLICT) {
        api_error(req, 409, "invalid_request_error", "idempotency_key_reused", "Idempotency-Key",
                  "this Idempotency-Key was already used with a different request body (batch %s)", existing);
    } else if (rc != STORE_OK) {
        log_error("could not store a batch: %s", store_errmsg(c->st));
        api_server_error(req, 503, "store_unavailable", "the batch could not be stored; nothing was accepted");
    } else {
        log_info("batch %s: %zu items accepted at priority %d", id, n, in->priority);
        if (callback && webhook_subscribe(c->hooks, "batch", id, callback))
            log_error("batch %s: could not store its callback_url", id);
        respond_batch(c, req, id, 202);
        dispatcher_task_queued(c->disp);
    }
}

void api_batches_create(coord *c, http_req *req)
{
    batch_in in;
    if (read_batch(c, req, &in)) { json_decref(in.root); return; }
    const char *key = http_req_header(req, "Idempotency-Key");
    size_t n = json_array_size(in.inputs), got = 0;
    item *items = calloc(n, sizeof *items);
    classification *cls = calloc(n, sizeof *cls);
    json_t *cb_q = NULL;
    if (key && (strlen(key) == 0 || strlen(key) > 255)) {
        api_bad_request(req, "invalid_value", "Idempotency-Key", "the Idempotency-Key header must be 1 to 255 characters");
        goto out;
    }
    if (!items || !cls) { api_server_error(req, 503, "store_unavailable", "out of memory; nothing was accepted"); goto out; }
    /* JSONL has no place for it but the query */
    json_t *cb = json_is_object(in.root) ? json_object_get(in.root, "callback_url") : NULL;
    if (!cb && http_req_query(req, "callback_url")) cb = cb_q = json_string(http_req_query(req, "callback_url"));
    const char *callback;
    if (api_callback_url(c, req, cb, &callback)) goto out;
    for (; got < n; got++)
        if (read_item(c, req, &in, got, &items[got], &cls[got])) { got++; goto out; }
    int64_t counts[5];
    if (store_task_counts(c->st, counts) == STORE_OK && counts[0] + (int64_t)n > c->cfg.task_queue_max) {
        api_retry_after(c, req, counts[0]);
        api_error(req, 429, "rate_limit_error", "queue_full", NULL,
                  "%lld tasks are queued and the batch adds %zu, more than the %lld this pool holds; retry later",
                  (long long)counts[0], n, (long long)c->cfg.task_queue_max);
        goto out;
    }
    store_and_answer(c, req, &in, items, cls, n, callback);
out:
    json_decref(cb_q);
    for (size_t i = 0; items && i < got; i++) json_decref(items[i].body);
    free(items);
    free(cls);
    json_decref(in.root);
}

void api_batches_get(coord *c, http_req *req, const char *id)
{
    respond_batch(c, req, id, 200);
}

void api_batches_list(coord *c, http_req *req)
{
    const char *lim = http_req_query(req, "limit");
    int limit = 20;
    if (lim) {
        char *e;
        long v = strtol(lim, &e, 10);
        if (*e || e == lim || v < 1 || v > BATCH_LIST_MAX) {
            api_bad_request(req, "invalid_value", "limit", "'limit' must be an integer from 1 to %d", BATCH_LIST_MAX);
            return;
        }
        limit = (int)v;
    }
    batch_rec *rows = calloc((size_t)limit, sizeof *rows);
    int n = rows ? store_batch_list(c->st, rows, limit) : STORE_ERR;
    if (n < 0) {
        free(rows);
        api_server_error(req, 500, "store_error", "batches could not be listed");
        return;
    }
    json_t *data = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(data, batch_json(c, &rows[i]));
    free(rows);
    json_t *j = json_pack("{s:s, s:o}", "object", "list", "data", data);
    http_respond_json(req, 200, j);
    json_decref(j);
}

/* An item as a result: OpenAI's batch output line, plus its index, status
 * and task. */
static json_t *result_line(json_t *it)
{
    json_t *res = json_object_get(it, "result");
    json_t *o = json_pack("{s:O, s:O, s:O, s:O, s:O, s:O}", "index", json_object_get(it, "index"), "custom_id",
                          json_object_get(it, "custom_id"), "task_id", json_object_get(it, "task_id"), "status",
                          json_object_get(it, "status"), "attempts", json_object_get(it, "attempts"), "error",
                          json_object_get(it, "error"));
    json_object_set_new(o, "response", json_is_null(res) || !res ? json_null()
                                           : json_pack("{s:i, s:O}", "status_code", 200, "body", res));
    return o;
}

void api_batches_results(coord *c, http_req *req, const char *id)
{
    const char *fmt = http_req_query(req, "format");
    int jsonl = fmt && !strcmp(fmt, "jsonl");
    if (fmt && !jsonl && strcmp(fmt, "json")) {
        api_bad_request(req, "invalid_value", "format", "'format' must be \"json\" or \"jsonl\"");
        return;
    }
    batch_rec b;
    int rc = store_batch_get(c->st, id, &b);
    if (rc == STORE_NOT_FOUND) { not_found(req, id); return; }
    json_t *items = rc == STORE_OK ? store_batch_items(c->st, id) : NULL;
    if (!items) { api_server_error(req, 500, "store_error", "the batch's results could not be read"); return; }
    json_t *data = json_array();
    size_t i;
    json_t *it;
    json_array_foreach(items, i, it) json_array_append_new(data, result_line(it));
    json_decref(items);
    http_set_header(req, "X-Gpupool-Batch-Status", batch_status(&b));
    if (!jsonl) {
        json_t *j = json_pack("{s:s, s:s, s:s, s:o}", "object", "list", "batch", id, "status", batch_status(&b),
                              "data", data);
        http_respond_json(req, 200, j);
        json_decref(j);
        return;
    }
    /* One line per item, in input order, as OpenAI's output file. */
    size_t cap = 4096, len = 0;
    char *out = malloc(cap);
    json_array_foreach(data, i, it) {
        char *line = json_dumps(it, JSON_COMPACT);
        size_t l = line ? strlen(line) : 0;
        if (out && len + l + 2 > cap) {
            while (len + l + 2 > cap) cap *= 2;
            char *grown = realloc(out, cap);
            if (!grown) { free(out); out = NULL; }
            else out = grown;
        }
        if (out && line) {
            memcpy(out + len, line, l);
            len += l;
            out[len++] = '\n';
        }
        free(line);
    }
    json_decref(data);
    if (!out) { api_server_error(req, 500, "store_error", "the batch's results could not be rendered"); return; }
    http_respond(req, 200, "application/jsonl", out, len);
    free(out);
}

void api_batches_cancel(coord *c, http_req *req, const char *id)
{
    json_t *running = NULL;
    int rc = store_batch_cancel(c->st, id, wall_ms(), &running);
    if (rc == STORE_NOT_FOUND) { not_found(req, id); return; }
    if (rc == STORE_STALE) {
        api_error(req, 409, "invalid_request_error", "batch_finished", NULL,
                  "batch '%s' has already finished or been cancelled", id);
        return;
    }
    if (rc != STORE_OK) { api_server_error(req, 500, "store_error", "the batch could not be cancelled"); return; }
    size_t i;
    json_t *t;
    json_array_foreach(running, i, t) dispatcher_cancel_task(c->disp, json_string_value(t));
    log_info("batch %s cancelled (%zu running items stopped)", id, json_array_size(running));
    json_decref(running);
    respond_batch(c, req, id, 200);
}
