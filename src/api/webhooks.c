/* api/webhooks: see webhooks.h. */
#include "api/webhooks.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "api/coord.h"
#include "api/webhook_rec.h"
#include "http/client.h"
#include "util/clock.h"
#include "util/ids.h"
#include "util/log.h"

#define SCAN_MS 200
#define PER_PASS 16
/* Finished deliveries stay in the delivery log this long. */
#define KEEP_MS (30LL * 86400000)
#define PRUNE_EVERY_MS (60 * 60 * 1000)

struct webhooks {
    coord *c;
    wh_db *db;
    webhook_cfg cfg;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stopping, kicked;
    atomic_int stop_now;
    pthread_t thread;
};

static void kick(webhooks *w)
{
    pthread_mutex_lock(&w->mu);
    w->kicked = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* Every address host resolves to must be allowed (a name that resolves
 * partly outside the list is refused). */
static int host_allowed(const cidr_list *allow, const char *host, char *why, size_t whylen)
{
    if (allow->n == 0) return 1;
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(host, NULL, &hints, &res) || !res) {
        snprintf(why, whylen, "its host '%s' does not resolve", host);
        return 0;
    }
    int ok = 1;
    for (struct addrinfo *a = res; a && ok; a = a->ai_next) {
        char ip[INET6_ADDRSTRLEN] = "";
        if (a->ai_family == AF_INET) inet_ntop(AF_INET, &((struct sockaddr_in *)a->ai_addr)->sin_addr, ip, sizeof ip);
        else if (a->ai_family == AF_INET6)
            inet_ntop(AF_INET6, &((struct sockaddr_in6 *)a->ai_addr)->sin6_addr, ip, sizeof ip);
        if (!cidr_list_allows(allow, ip)) {
            snprintf(why, whylen, "its host '%s' (%s) is outside --webhook-allow-cidr", host, ip);
            ok = 0;
        }
    }
    freeaddrinfo(res);
    return ok;
}

int webhook_url_allowed(webhooks *w, const char *url, char *why, size_t whylen)
{
    char host[256];
    if (webhook_url_check(url, host, sizeof host, why, whylen)) return -1;
    return w && !host_allowed(&w->cfg.allow, host, why, whylen) ? -1 : 0;
}

int webhook_enqueue(webhooks *w, const char *event, const char *object_id, const char *url, const char *body)
{
    char id[64];
    make_id(id, sizeof id, "whd");
    int rc = wh_enqueue(w->db, id, event, object_id, url, body, wall_ms(), NULL);
    if (!rc) kick(w);
    return rc;
}

int webhook_subscribe(webhooks *w, const char *kind, const char *object_id, const char *url)
{
    int rc = wh_subscribe(w->db, kind, object_id, url, wall_ms());
    if (!rc) kick(w);
    return rc;
}

/* Objects that finished: their deliveries, stored before anything is sent. */
static void fire(webhooks *w)
{
    json_t *fired = wh_fired(w->db, PER_PASS);
    size_t i;
    json_t *s;
    json_array_foreach(fired, i, s) {
        const char *kind = json_string_value(json_object_get(s, "kind"));
        const char *oid = json_string_value(json_object_get(s, "object_id"));
        int found = 0;
        json_t *obj = !strcmp(kind, "task")  ? api_task_view(w->c, oid, &found)
                      : !strcmp(kind, "run") ? api_run_view(w->c, oid, &found)
                                             : api_batch_view(w->c, oid, &found);
        if (!obj) continue; /* a read error: the next pass tries again */
        char event[64], id[64];
        /* A run's event names what ran: app.succeeded, pipeline.failed. */
        const char *run_kind = json_string_value(json_object_get(obj, "kind"));
        webhook_event_name(!strcmp(kind, "run") && run_kind ? run_kind : kind,
                           json_string_value(json_object_get(obj, "status")), event, sizeof event);
        make_id(id, sizeof id, "whd");
        char *body = json_dumps(obj, JSON_COMPACT);
        if (body && wh_enqueue(w->db, id, event, oid, json_string_value(json_object_get(s, "url")), body, wall_ms(), oid))
            log_warn("webhooks: could not store the delivery of %s", oid);
        free(body);
        json_decref(obj);
    }
    json_decref(fired);
}

static int cancelled(void *ctx) { return atomic_load(&((webhooks *)ctx)->stop_now); }

static void deliver(webhooks *w, json_t *d)
{
    const char *id = json_string_value(json_object_get(d, "id"));
    const char *url = json_string_value(json_object_get(d, "url"));
    const char *event = json_string_value(json_object_get(d, "event"));
    const char *body = json_string_value(json_object_get(d, "body"));
    int attempt = (int)json_integer_value(json_object_get(d, "attempts")) + 1;
    int64_t started = wall_ms(), t0 = mono_ms();
    char why[300] = "", host[256];
    long status = 0;
    int permanent = 0;
    if (webhook_url_check(url, host, sizeof host, why, sizeof why) || !host_allowed(&w->cfg.allow, host, why, sizeof why)) {
        permanent = 1; /* the same URL will not become allowed by retrying */
    } else {
        char sig[128], h_sig[160], h_event[96], h_id[96];
        webhook_signature(w->cfg.secret, started / 1000, body, strlen(body), sig, sizeof sig);
        snprintf(h_sig, sizeof h_sig, "X-Gpupool-Signature: %s", sig);
        snprintf(h_event, sizeof h_event, "X-Gpupool-Event: %s", event);
        snprintf(h_id, sizeof h_id, "X-Gpupool-Delivery: %s", id);
        const char *headers[] = {h_sig, h_event, h_id, "User-Agent: gpupool-webhooks", NULL};
        http_call_opts o = {.method = "POST", .url = url, .body = body, .body_len = strlen(body),
                            .headers = headers, .timeout_ms = w->cfg.timeout_ms, .cancelled = cancelled,
                            .cancel_ctx = w};
        http_result res;
        http_call(&o, &res);
        status = res.status;
        if (!status) snprintf(why, sizeof why, "%s", res.timed_out ? "timed out" : res.error);
        else if (status < 200 || status > 299) snprintf(why, sizeof why, "the receiver answered %ld", status);
        http_result_free(&res);
    }
    int ok = status >= 200 && status <= 299;
    if (!ok && atomic_load(&w->stop_now)) return; /* cut short by shutdown: not an attempt */
    const char *state = ok ? "delivered" : permanent || attempt >= w->cfg.max_attempts ? "failed" : "pending";
    unsigned char r;
    char rh[3];
    rand_hex(rh, 1);
    r = (unsigned char)strtoul(rh, NULL, 16);
    int64_t next = !strcmp(state, "pending")
                       ? wall_ms() + webhook_backoff_ms(attempt, w->cfg.backoff_ms, w->cfg.max_backoff_ms, r / 256.0)
                       : 0;
    if (wh_record(w->db, id, attempt, started, mono_ms() - t0, status, ok ? NULL : why, state, next))
        log_warn("webhooks: could not record attempt %d of %s", attempt, id);
    if (!ok)
        log_warn("webhook %s (%s) attempt %d/%d to %s failed: %s%s", id, event, attempt, w->cfg.max_attempts, url, why,
                 !strcmp(state, "failed") ? "; giving up" : "");
}

static void *run(void *arg)
{
    webhooks *w = arg;
    int64_t pruned_at = 0;
    pthread_mutex_lock(&w->mu);
    while (!w->stopping) {
        if (!w->kicked) {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            ts.tv_nsec += SCAN_MS * 1000000L;
            if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
            pthread_cond_timedwait(&w->cv, &w->mu, &ts);
        }
        w->kicked = 0;
        if (w->stopping) break;
        pthread_mutex_unlock(&w->mu);
        if (!pruned_at || mono_ms() - pruned_at >= PRUNE_EVERY_MS) {
            pruned_at = mono_ms();
            int64_t n = wh_prune(w->db, wall_ms() - KEEP_MS);
            if (n > 0) log_info("webhooks: forgot %lld finished deliveries older than 30 days", (long long)n);
        }
        fire(w);
        json_t *due = wh_due(w->db, wall_ms(), PER_PASS);
        size_t i;
        json_t *d;
        json_array_foreach(due, i, d) {
            if (atomic_load(&w->stop_now)) break;
            deliver(w, d);
        }
        json_decref(due);
        pthread_mutex_lock(&w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

webhooks *webhooks_start(coord *c, wh_db *db, const webhook_cfg *cfg)
{
    webhooks *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->c = c;
    w->db = db;
    w->cfg = *cfg;
    if (w->cfg.max_attempts < 1) w->cfg.max_attempts = 1;
    pthread_mutex_init(&w->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&w->thread, NULL, run, w)) {
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
        free(w);
        return NULL;
    }
    return w;
}

void webhooks_stop(webhooks *w)
{
    if (!w) return;
    atomic_store(&w->stop_now, 1);
    pthread_mutex_lock(&w->mu);
    w->stopping = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    wh_db_close(w->db);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w);
}

wh_db *webhooks_db(webhooks *w) { return w ? w->db : NULL; }
