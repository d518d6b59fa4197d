/* api/audit: see audit.h. */
#include "api/audit.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/audit_rec.h"
#include "util/buf.h"
#include "util/clock.h"
#include "util/ids.h"
#include "util/log.h"
#include "util/str.h"

#define MAX_ATTEMPTS 8
#define BATCH 128
#define PRUNE_EVERY_MS (10 * 60 * 1000)
/* The writer wakes when WAKE_AT records wait, or WRITE_EVERY_MS (cfg.nap_ms)
 * after its last round for the few that came since.  A wake-up per record would cost
 * the request's thread a futex call and the writer a transaction per record;
 * waking only by time lets a busy gateway pile up hundreds of records, whose
 * redaction and insert then hold a core for milliseconds and become the
 * requests' p99. */
#define WAKE_AT 32
#define WRITE_EVERY_MS 50

typedef struct attempt {
    char node[40];
    int external;
    long status;
    char outcome[24];
} attempt;

/* One call on its way to the disk; raw until the writer redacts it. */
typedef struct note {
    int stream_update;       /* only the text of a stream that ended */
    int no_answer;           /* keep no copy of the answer's body */
    char request_id[72];
    int64_t ts_ms, dur_us;
    char method[16];
    char *path;
    char owner[40];
    char poll_id[64];
    int status;
    char *req_body, *resp_body;
    size_t req_len, resp_len;
    int req_cut, resp_cut;
    int routed, is_private;
    char rule[64];
    attempt att[MAX_ATTEMPTS];
    int natt;
} note;

struct auditor {
    audit_db *db;
    const detect_rules *rules;
    audit_cfg cfg;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    note **ring;
    int head, count, stopping;
    int wake_at;     /* WAKE_AT, or half of a smaller queue */
    pthread_t thread;
    atomic_ullong written, dropped;
    /* The writer's own: stream texts that came before their record (a
     * stream may end before its answer's head is queued). */
    note *pending[64];
    int npending;
};

static char id_prefix[9];
static void seed_ids(void) { rand_hex(id_prefix, 4); }

static void note_free(void *p)
{
    note *n = p;
    if (!n) return;
    free(n->path);
    free(n->req_body);
    free(n->resp_body);
    free(n);
}

/* A copy of at most cap + margin bytes; *cut says it is not all of it. */
static char *copy_capped(const char *s, size_t len, size_t cap, size_t *out_len, int *cut)
{
    size_t keep = len > cap + AUDIT_REDACT_MARGIN ? cap + AUDIT_REDACT_MARGIN : len;
    *cut = keep < len;
    *out_len = keep;
    char *c = malloc(keep + 1);
    if (c) {
        if (keep) memcpy(c, s, keep);
        c[keep] = 0;
    }
    return c;
}

static void push(auditor *a, note *n)
{
    pthread_mutex_lock(&a->mu);
    if (a->count >= a->cfg.queue_max || a->stopping) {
        pthread_mutex_unlock(&a->mu);
        atomic_fetch_add(&a->dropped, 1);
        note_free(n);
        return;
    }
    a->ring[(a->head + a->count) % a->cfg.queue_max] = n;
    a->count++;
    if (a->count == a->wake_at) pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

/* "req_" and 24 hex digits, like make_id's ids, but without a system call
 * per request: a random prefix drawn once per process and a counter. */
static void fresh_id(char *out, size_t len)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    static atomic_ullong next;
    pthread_once(&once, seed_ids);
    unsigned long long n = atomic_fetch_add(&next, 1);
    char id[4 + 8 + 16 + 1] = "req_";
    memcpy(id + 4, id_prefix, 8);
    for (int i = 0; i < 16; i++) id[12 + i] = "0123456789abcdef"[(n >> (60 - 4 * i)) & 15];
    id[28] = 0;
    str_copy(out, len, id);
}

void audit_begin(auditor *a, http_req *req, const char *owner, audit_keep keep)
{
    char id[72];
    const char *given = http_req_header(req, "X-Request-Id");
    if (audit_request_id_ok(given)) str_copy(id, sizeof id, given);
    else fresh_id(id, sizeof id);
    http_req_add_header(req, "X-Request-Id", id);
    http_set_header(req, "X-Request-Id", id);
    if (!a || keep == AUDIT_NONE) return;
    note *n = calloc(1, sizeof *n);
    if (!n) return;
    memcpy(n->request_id, id, sizeof id);
    n->ts_ms = wall_ms();
    str_copy(n->method, sizeof n->method, http_req_method(req));
    n->path = strdup(http_req_path(req));
    str_copy(n->owner, sizeof n->owner, owner);
    const char *poll = http_req_query(req, "id");
    if (poll) str_copy(n->poll_id, sizeof n->poll_id, poll);
    n->no_answer = keep == AUDIT_NO_ANSWER;
    http_req_set_note(req, n, note_free);
}

void audit_answer(auditor *a, http_req *req, const http_answer *ans)
{
    note *n = http_req_note(req);
    if (!a || !n || n->req_body) return;
    size_t len;
    const char *body = http_req_body(req, &len);
    n->req_body = copy_capped(body, len, a->cfg.body_max, &n->req_len, &n->req_cut);
    if (!ans->streamed && !n->no_answer) n->resp_body = copy_capped(ans->body, ans->len, a->cfg.body_max, &n->resp_len, &n->resp_cut);
}

void audit_finish(auditor *a, http_req *req, int status, int64_t dur_us)
{
    note *n = a ? http_req_take_note(req) : NULL;
    if (!n) return;
    n->status = status;
    n->dur_us = dur_us;
    push(a, n);
}

void audit_route_class(http_req *req, int is_private, const char *rule)
{
    note *n = http_req_note(req);
    if (!n) return;
    n->routed = 1;
    n->is_private = is_private;
    str_copy(n->rule, sizeof n->rule, is_private ? rule : NULL);
}

void audit_route_attempt(http_req *req, const char *node_id, int external, long status, const char *outcome)
{
    note *n = http_req_note(req);
    if (!n || n->natt >= MAX_ATTEMPTS) return;
    attempt *t = &n->att[n->natt++];
    str_copy(t->node, sizeof t->node, node_id);
    t->external = external;
    t->status = status;
    str_copy(t->outcome, sizeof t->outcome, outcome);
}

const char *audit_request_id(http_req *req)
{
    const char *id = http_req_header(req, "X-Request-Id");
    return id ? id : "";
}

void audit_stream_done(auditor *a, const char *request_id, const char *text, size_t len, int64_t dur_us)
{
    if (!a || !request_id || !*request_id) return;
    note *n = calloc(1, sizeof *n);
    if (!n) return;
    n->stream_update = 1;
    n->ts_ms = mono_ms(); /* for how long it may wait for its record */
    str_copy(n->request_id, sizeof n->request_id, request_id);
    n->dur_us = dur_us;
    n->resp_body = copy_capped(text ? text : "", text ? len : 0, a->cfg.body_max, &n->resp_len, &n->resp_cut);
    push(a, n);
}

/* ---- the writer ---- */

static int put_json_str(buf *b, const char *s)
{
    return buf_puts(b, "\"") | buf_put_json_text(b, s, strlen(s)) | buf_puts(b, "\"");
}

/* {"sensitivity","rule","nodes":[...],"attempts":[{node,backend,status,
 * outcome}]}, written directly: it is made for every proxied call. */
static char *route_json(const note *n)
{
    if (!n->routed && !n->natt) return NULL;
    buf b = {0};
    int bad = buf_puts(&b, n->is_private ? "{\"sensitivity\":\"private\",\"rule\":" : "{\"sensitivity\":\"normal\",\"rule\":");
    bad |= n->rule[0] ? put_json_str(&b, n->rule) : buf_puts(&b, "null");
    bad |= buf_puts(&b, ",\"nodes\":[");
    for (int i = 0, listed = 0; i < n->natt; i++) {
        int seen = 0;
        for (int k = 0; k < i; k++) seen |= !strcmp(n->att[k].node, n->att[i].node);
        if (seen) continue;
        if (listed++) bad |= buf_puts(&b, ",");
        bad |= put_json_str(&b, n->att[i].node);
    }
    bad |= buf_puts(&b, "],\"attempts\":[");
    for (int i = 0; i < n->natt; i++) {
        const attempt *t = &n->att[i];
        bad |= buf_puts(&b, i ? ",{\"node\":" : "{\"node\":") | put_json_str(&b, t->node);
        bad |= buf_puts(&b, t->external ? ",\"backend\":\"cloud\",\"status\":" : ",\"backend\":\"local\",\"status\":");
        bad |= t->status >= 0 ? buf_put_uint(&b, (unsigned long long)t->status) : buf_printf(&b, "%ld", t->status);
        bad |= buf_puts(&b, ",\"outcome\":") | put_json_str(&b, t->outcome) | buf_puts(&b, "}");
    }
    bad |= buf_puts(&b, "]}");
    if (bad) { buf_free(&b); return NULL; }
    return buf_steal(&b);
}

typedef struct prepared {
    audit_entry e;
    char task_id[64];
    char *req, *resp, *route;
} prepared;

static void prepare(auditor *a, const note *n, prepared *p)
{
    memset(p, 0, sizeof *p);
    int t1 = 0, t2 = 0;
    audit_task_of(n->method, n->path, n->poll_id, n->resp_body, n->resp_len, p->task_id, sizeof p->task_id);
    size_t cap = a->cfg.body_max;
    int raw = a->cfg.raw_scan;
    if (n->req_body) p->req = audit_redact_body(a->rules, n->req_body, n->req_len, n->req_cut, cap, raw, &t1);
    if (n->resp_body)
        p->resp = audit_redact_body(a->rules, n->resp_body, n->resp_len, n->resp_cut, cap, raw, &t2);
    p->route = route_json(n);
    p->e = (audit_entry){.request_id = n->request_id, .ts_ms = n->ts_ms, .method = n->method, .path = n->path,
                         .status = n->status, .duration_us = n->dur_us, .owner = n->owner, .task_id = p->task_id,
                         .request_body = p->req, .response_body = p->resp, .truncated = t1 || t2,
                         .route_json = p->route};
}

static void write_batch(auditor *a, note **batch, int n)
{
    prepared p[BATCH];
    const audit_entry *rows[BATCH];
    int nrows = 0;
    for (int i = 0; i < n; i++) {
        if (batch[i]->stream_update) {
            /* Whatever rows came before it must be in first. */
            if (nrows && !audit_db_insert(a->db, rows, nrows)) atomic_fetch_add(&a->written, (unsigned)nrows);
            for (int k = 0; k < nrows; k++) { free(p[k].req); free(p[k].resp); free(p[k].route); }
            nrows = 0;
            int cut = 0;
            char *text = audit_redact_body(a->rules, batch[i]->resp_body, batch[i]->resp_len, batch[i]->resp_cut,
                                           a->cfg.body_max, a->cfg.raw_scan, &cut);
            int found = text ? audit_db_set_response(a->db, batch[i]->request_id, text, cut, batch[i]->dur_us) : -1;
            free(text);
            if (found == 0 && a->npending < 64) {
                a->pending[a->npending++] = batch[i];
                batch[i] = NULL;
            }
            continue;
        }
        prepare(a, batch[i], &p[nrows]);
        rows[nrows] = &p[nrows].e;
        nrows++;
    }
    if (nrows) {
        if (audit_db_insert(a->db, rows, nrows)) log_warn("audit: could not write %d record(s)", nrows);
        else atomic_fetch_add(&a->written, (unsigned)nrows);
    }
    for (int k = 0; k < nrows; k++) { free(p[k].req); free(p[k].resp); free(p[k].route); }
}

/* Stream texts whose record has been written since, or that waited long
 * enough that it never will be. */
static void retry_pending(auditor *a, int last_call)
{
    int kept = 0;
    for (int i = 0; i < a->npending; i++) {
        note *n = a->pending[i];
        int cut = 0, found = -1;
        char *text =
            audit_redact_body(a->rules, n->resp_body, n->resp_len, n->resp_cut, a->cfg.body_max, a->cfg.raw_scan, &cut);
        if (text) found = audit_db_set_response(a->db, n->request_id, text, cut, n->dur_us);
        free(text);
        if (found == 0 && !last_call && mono_ms() - n->ts_ms < 30000) a->pending[kept++] = n;
        else note_free(n);
    }
    a->npending = kept;
}

static void prune(auditor *a)
{
    int64_t n = audit_db_prune(a->db, wall_ms() - (int64_t)a->cfg.days * 86400000);
    if (n > 0) log_info("audit: pruned %lld record(s) older than %d day(s)", (long long)n, a->cfg.days);
}

static void *writer(void *arg)
{
    auditor *a = arg;
    int64_t pruned_at = mono_ms();
    prune(a);
    pthread_mutex_lock(&a->mu);
    for (;;) {
        if (a->count < a->wake_at && !a->stopping) {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            ts.tv_sec += a->cfg.nap_ms / 1000;
            ts.tv_nsec += (a->cfg.nap_ms % 1000) * 1000000L;
            if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
            pthread_cond_timedwait(&a->cv, &a->mu, &ts);
        }
        note *batch[BATCH];
        int n = 0;
        while (a->count && n < BATCH) {
            batch[n++] = a->ring[a->head];
            a->head = (a->head + 1) % a->cfg.queue_max;
            a->count--;
        }
        int stop = a->stopping && !a->count;
        pthread_mutex_unlock(&a->mu);
        if (n) write_batch(a, batch, n);
        for (int i = 0; i < n; i++) note_free(batch[i]);
        if (a->npending) retry_pending(a, stop);
        if (mono_ms() - pruned_at >= PRUNE_EVERY_MS) {
            pruned_at = mono_ms();
            prune(a);
        }
        pthread_mutex_lock(&a->mu);
        if (stop && !a->count) break;
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

auditor *auditor_start(audit_db *db, const detect_rules *rules, const audit_cfg *cfg)
{
    auditor *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    a->db = db;
    a->rules = rules;
    a->cfg = *cfg;
    if (a->cfg.queue_max < 1) a->cfg.queue_max = 4096;
    if (a->cfg.nap_ms < 1) a->cfg.nap_ms = WRITE_EVERY_MS;
    a->wake_at = a->cfg.queue_max / 2 + 1 < WAKE_AT ? a->cfg.queue_max / 2 + 1 : WAKE_AT;
    a->ring = calloc((size_t)a->cfg.queue_max, sizeof *a->ring);
    pthread_mutex_init(&a->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&a->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (!a->ring || pthread_create(&a->thread, NULL, writer, a)) {
        pthread_mutex_destroy(&a->mu);
        pthread_cond_destroy(&a->cv);
        free(a->ring);
        free(a);
        return NULL;
    }
    return a;
}

void auditor_stop(auditor *a)
{
    if (!a) return;
    pthread_mutex_lock(&a->mu);
    a->stopping = 1;
    pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
    pthread_join(a->thread, NULL);
    audit_db_close(a->db);
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->cv);
    free(a->ring);
    free(a);
}

audit_db *auditor_db(auditor *a) { return a ? a->db : NULL; }

void auditor_counts(auditor *a, uint64_t *written, uint64_t *dropped)
{
    *written = a ? atomic_load(&a->written) : 0;
    *dropped = a ? atomic_load(&a->dropped) : 0;
}
