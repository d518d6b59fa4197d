/* worker/peerfetch: see peerfetch.h. */
#include "worker/peerfetch.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "http/client.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/opts.h"
#include "worker/fetch.h"
#include "worker/filehash.h"
#include "worker/fileserve.h"

#define MAX_SOURCES 8
#define MiB(b) ((double)(b) / (1024.0 * 1024.0))

static int stopping(worker *w)
{
    pthread_mutex_lock(&w->mu);
    int s = w->stopping;
    pthread_mutex_unlock(&w->mu);
    return s;
}

/* Sleeps ms unless the worker stops meanwhile; 1 when it stops. */
static int pause_ms(worker *w, int64_t ms)
{
    for (int64_t until = mono_ms() + ms; mono_ms() < until;) {
        if (stopping(w)) return 1;
        sleep_ms(50);
    }
    return stopping(w);
}

static int worker_stopping(void *ctx) { return stopping(ctx); }

/* Offers the --load files that are here and have a sha256= to peers, once
 * their digest is checked. */
static void share_present(worker *w, const char *cache)
{
    for (int i = 0; i < WORKER_MAX_ENGINES && !stopping(w); i++) {
        char name[128], path[512], want[65];
        pthread_mutex_lock(&w->mu);
        const managed_spec *m = i < w->nengines ? w->engines[i].managed : NULL;
        int skip = !m || m->fetching || !m->pinned_sha256[0];
        if (!skip) {
            snprintf(name, sizeof name, "%s", m->name);
            snprintf(path, sizeof path, "%s", m->gguf);
            snprintf(want, sizeof want, "%s", m->pinned_sha256);
        }
        pthread_mutex_unlock(&w->mu);
        if (skip) continue;
        char sha[65], err[600];
        uint64_t bytes;
        if (filehash_get_cancellable(cache, path, sha, &bytes, worker_stopping, w, err, sizeof err)) {
            if (!stopping(w)) log_warn("cannot share %s's file with peers: %s", name, err);
            continue;
        }
        if (strcmp(want, sha)) {
            log_warn("%s's file %s has sha256 %s, not the sha256=%s given: not shared with peers", name, path, sha, want);
            continue;
        }
        files_add_held(&w->files, sha, path, bytes);
        log_info("sharing %s's file with peers: %.1f MiB, sha256 %s", name, MiB(bytes), sha);
    }
}

/* The live peers that hold the file, as file URLs.  -1 when the
 * coordinator could not be asked (why says so). */
static int sources(worker *w, const char *sha, char urls[][600], int max, char *why, size_t whylen)
{
    char url[400], token[72];
    pthread_mutex_lock(&w->mu);
    snprintf(url, sizeof url, "%s/internal/v1/files/%s/sources", w->coordinator, sha);
    snprintf(token, sizeof token, "%s", w->token);
    int registered = w->registered;
    pthread_mutex_unlock(&w->mu);
    if (!registered) { snprintf(why, whylen, "not registered with the coordinator yet"); return -1; }
    http_call_opts o = {.url = url, .bearer = token, .timeout_ms = 5000, .connect_timeout_ms = 2000};
    http_result r;
    http_call(&o, &r);
    int n = -1;
    json_t *j = r.status == 200 ? json_loadb(r.body, r.body_len, 0, NULL) : NULL;
    if (!j) snprintf(why, whylen, "the coordinator's sources lookup failed: %s", r.status ? r.body : r.error);
    else {
        n = 0;
        size_t i;
        json_t *s;
        json_array_foreach(json_object_get(j, "sources"), i, s) {
            const char *u = json_string_value(json_object_get(s, "url"));
            if (u && n < max && strlen(u) < 600) snprintf(urls[n++], 600, "%s", u);
        }
        if (!n) snprintf(why, whylen, "no live peer holds it yet");
    }
    json_decref(j);
    http_result_free(&r);
    return n;
}

typedef struct progress_ctx {
    worker *w;
    int idx;
    int attempts_before;  /* in earlier rounds */
    int64_t last_log_ms;
} progress_ctx;

static int cancelled(void *ctx)
{
    const progress_ctx *c = ctx;
    return stopping(c->w);
}

static void on_progress(void *ctx, const fetch_progress *p)
{
    progress_ctx *c = ctx;
    file_transfer t;
    files_transfer_get(&c->w->files, c->idx, &t);
    t.state = XFER_FETCHING;
    t.done = p->done;
    t.total = p->total;
    t.rate_bps = p->rate_bps;
    t.eta_s = p->eta_s;
    t.attempts = c->attempts_before + p->attempt;
    snprintf(t.source, sizeof t.source, "%s", p->source);
    files_transfer_set(&c->w->files, c->idx, &t);
    int64_t now = mono_ms();
    if (now - c->last_log_ms < 5000) return;
    c->last_log_ms = now;
    if (p->total)
        log_info("fetching %s: %.1f of %.1f MiB (%.0f%%) at %.1f MiB/s, eta %lld s, from %s", t.model, MiB(p->done),
                 MiB(p->total), 100.0 * (double)p->done / (double)p->total, MiB(p->rate_bps), (long long)p->eta_s,
                 p->source);
}

/* The model's file is here and verified: size it and offer it. */
static int arrived(worker *w, int engine_idx, int xidx, const char *sha)
{
    managed_spec copy;
    pthread_mutex_lock(&w->mu);
    copy = *w->engines[engine_idx].managed;
    pthread_mutex_unlock(&w->mu);
    char err[600];
    int rc = managed_size(&copy, err, sizeof err);
    file_transfer t;
    files_transfer_get(&w->files, xidx, &t);
    pthread_mutex_lock(&w->mu);
    managed_spec *m = w->engines[engine_idx].managed;
    if (rc == 0) {
        m->estimate_bytes = copy.estimate_bytes;
        m->need_bytes = copy.need_bytes;
        m->measured = copy.measured;
        m->meas = copy.meas;
        m->fetching = 0;
        m->last_error[0] = 0;
    } else {
        snprintf(m->last_error, sizeof m->last_error, "%s", err);
    }
    pthread_mutex_unlock(&w->mu);
    t.state = rc == 0 ? XFER_DONE : XFER_FAILED;
    t.eta_s = rc == 0 ? 0 : -1;
    if (rc) snprintf(t.error, sizeof t.error, "%s", err);
    else t.error[0] = 0;
    files_transfer_set(&w->files, xidx, &t);
    if (rc) {
        log_error("fetched %s's file but cannot use it: %s", copy.name, err);
        return -1;
    }
    files_add_held(&w->files, sha, copy.gguf, t.total);
    log_info("fetched %s's file %s (%.1f MiB), sha256 verified; offered from now on (needs %.0f MiB)", copy.name,
             copy.gguf, MiB(t.total), MiB(copy.need_bytes));
    return 0;
}

/* The file turned up by other means (copied by hand): the model is sized
 * and stops fetching; the catalogue's hasher then judges the file. */
static int appeared(worker *w, int engine_idx, int xidx, const char *name, const char *dest)
{
    if (access(dest, F_OK) != 0) return 0;
    pthread_mutex_lock(&w->mu);
    managed_spec copy = *w->engines[engine_idx].managed;
    pthread_mutex_unlock(&w->mu);
    char err[600];
    int rc = managed_size(&copy, err, sizeof err);
    pthread_mutex_lock(&w->mu);
    managed_spec *m = w->engines[engine_idx].managed;
    if (!rc) {
        m->estimate_bytes = copy.estimate_bytes;
        m->need_bytes = copy.need_bytes;
        m->measured = copy.measured;
        m->meas = copy.meas;
        m->fetching = 0;
        m->last_error[0] = 0;
    }
    pthread_mutex_unlock(&w->mu);
    if (rc) return 0; /* half copied, perhaps: look again later */
    file_transfer t;
    files_transfer_get(&w->files, xidx, &t);
    t.state = XFER_DONE;
    t.eta_s = 0;
    snprintf(t.error, sizeof t.error, "the file appeared on this node");
    files_transfer_set(&w->files, xidx, &t);
    log_info("%s's file %s appeared on this node: no longer fetching it", name, dest);
    return 1;
}

static void fetch_missing(worker *w, int engine_idx)
{
    char name[128], dest[512], sha[65];
    pthread_mutex_lock(&w->mu);
    const managed_spec *m = w->engines[engine_idx].managed;
    snprintf(name, sizeof name, "%s", m->name);
    snprintf(dest, sizeof dest, "%s", m->gguf);
    snprintf(sha, sizeof sha, "%s", m->pinned_sha256);
    uint64_t rate = w->fetch_rate_bps;
    char token[256];
    snprintf(token, sizeof token, "%s", w->join_token);
    pthread_mutex_unlock(&w->mu);
    int xidx = files_transfer_add(&w->files, sha, name, dest);
    log_info("%s's file %s is not here: fetching it (sha256 %s) from a peer", name, dest, sha);
    int64_t pause = 1000;
    int attempts = 0;
    char last_why[600] = "";
    for (;;) {
        if (stopping(w) || appeared(w, engine_idx, xidx, name, dest)) return;
        char urls[MAX_SOURCES][600], why[600];
        int n = sources(w, sha, urls, MAX_SOURCES, why, sizeof why);
        file_transfer t;
        files_transfer_get(&w->files, xidx, &t);
        if (n > 0) {
            const char *ptrs[MAX_SOURCES];
            for (int i = 0; i < n; i++) ptrs[i] = urls[i];
            progress_ctx pc = {.w = w, .idx = xidx, .attempts_before = attempts, .last_log_ms = mono_ms()};
            fetch_opts o = {.urls = ptrs, .nurls = n, .sha256 = sha, .dest = dest, .join_token = token,
                            .rate_bps = rate, .rounds = 1, .progress = on_progress, .cancelled = cancelled, .ctx = &pc};
            t.state = XFER_FETCHING;
            files_transfer_set(&w->files, xidx, &t);
            fetch_rc rc = fetch_file(&o, why, sizeof why);
            if (rc == FETCH_OK) { arrived(w, engine_idx, xidx, sha); return; }
            if (rc == FETCH_CANCELLED) return;
            files_transfer_get(&w->files, xidx, &t);
            attempts = t.attempts;
            if (rc == FETCH_CORRUPT) log_error("fetching %s: %s", name, why);
        }
        t.state = n > 0 ? XFER_FAILED : XFER_WAITING;
        snprintf(t.error, sizeof t.error, "%s", why);
        files_transfer_set(&w->files, xidx, &t);
        pthread_mutex_lock(&w->mu);
        snprintf(w->engines[engine_idx].managed->last_error, sizeof w->engines[engine_idx].managed->last_error,
                 "fetching the file from a peer: %.500s", why);
        pthread_mutex_unlock(&w->mu);
        if (strcmp(why, last_why)) log_warn("fetching %s: %s; trying again in %lld ms", name, why, (long long)pause);
        snprintf(last_why, sizeof last_why, "%s", why);
        /* A file copied in by hand is noticed within half a second, not only
         * when the backoff (up to 30 s) is over. */
        for (int64_t until = mono_ms() + pause; mono_ms() < until;)
            if (pause_ms(w, 500) || appeared(w, engine_idx, xidx, name, dest)) return;
        pause = pause * 2 > 30000 ? 30000 : pause * 2;
    }
}

/* Fetches every model marked fetching, one after another, and looks again
 * while peerfetch_request asked for it meanwhile. */
static void fetch_all_missing(worker *w)
{
    for (;;) {
        for (int i = 0; i < WORKER_MAX_ENGINES && !stopping(w); i++) {
            pthread_mutex_lock(&w->mu);
            int missing = i < w->nengines && w->engines[i].managed && w->engines[i].managed->fetching;
            pthread_mutex_unlock(&w->mu);
            if (missing) fetch_missing(w, i);
        }
        pthread_mutex_lock(&w->mu);
        int again = w->fetch_again && !w->stopping;
        w->fetch_again = 0;
        if (!again) w->fetch_busy = 0;
        pthread_mutex_unlock(&w->mu);
        if (!again) return;
    }
}

static void *peerfetch_thread(void *arg)
{
    worker *w = arg;
    char cache[600];
    snprintf(cache, sizeof cache, "%s/hashes.json", w->managed.data_dir);
    if (make_dirs(w->managed.data_dir)) log_warn("cannot make %s: file digests are not remembered", w->managed.data_dir);
    share_present(w, cache);
    fetch_all_missing(w);
    return NULL;
}

static void *refetch_thread(void *arg)
{
    fetch_all_missing(arg);
    return NULL;
}

int peerfetch_start(worker *w)
{
    w->fetch_busy = 1;
    if (pthread_create(&w->fetch_thread, NULL, peerfetch_thread, w)) {
        w->fetch_busy = 0;
        return -1;
    }
    w->fetch_running = 1;
    return 0;
}

void peerfetch_request(worker *w)
{
    pthread_mutex_lock(&w->mu);
    int busy = w->fetch_busy;
    if (busy) w->fetch_again = 1;
    else w->fetch_busy = 1;
    pthread_mutex_unlock(&w->mu);
    if (busy) return;
    /* The thread before has ended (it cleared fetch_busy on its way out). */
    if (w->fetch_running) pthread_join(w->fetch_thread, NULL);
    w->fetch_running = pthread_create(&w->fetch_thread, NULL, refetch_thread, w) == 0;
    if (!w->fetch_running) {
        log_warn("cannot start fetching model files from peers");
        pthread_mutex_lock(&w->mu);
        w->fetch_busy = 0;
        pthread_mutex_unlock(&w->mu);
    }
}

void peerfetch_stop(worker *w)
{
    if (w->fetch_running) pthread_join(w->fetch_thread, NULL);
    w->fetch_running = 0;
}
