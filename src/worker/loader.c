/* worker/loader: the lives of the engines a worker starts itself (--load).
 *
 * A start happens when a model is first asked for, one start at a time per
 * worker: requests for the same model wait for that start and share its
 * outcome; others wait their turn, so two loads never race for the same
 * free memory.  Before a start it reads the GPUs afresh, and when the model
 * does not fit it stops idle engines, least recently used first
 * (worker/residency decides which), then waits, bounded, until the GPUs
 * show the memory free again: a driver gives memory back some time after
 * the process ends.  A start that finds the memory of an engine stopped a
 * moment ago (its keep-alive ran out as the request came) still taken waits
 * for it the same way.  An engine with requests in flight is never stopped,
 * nor a pinned one.  Between heartbeats, engines idle past their keep-alive
 * are stopped, and every idle one while the node drains: on a thread of
 * their own, since an engine can take seconds to exit and the heartbeats
 * must go on.
 *
 * Part of the agent module (worker/agent.h is its API).  Lock order: mu,
 * then probe_mu; nothing takes mu while it holds probe_mu. */
#include <stdio.h>
#include <string.h>

#include "util/clock.h"
#include "util/err.h"
#include "util/log.h"
#include "worker/agent.h"
#include "worker/residency.h"

#define MiB(b) ((unsigned long long)((b) >> 20))

/* Caller holds mu.  The started engines as residency sees them; map[j] is
 * the index of snapshot j in w->engines. */
static int snapshot(worker *w, res_engine *out, int *map)
{
    int n = 0;
    for (int i = 0; i < w->nengines; i++) {
        const engine *e = &w->engines[i];
        const managed_spec *m = e->managed;
        if (!m) continue;
        out[n] = (res_engine){.running = e->child > 0 && !m->loading, .busy = e->inflight > 0 || m->loading,
                              .pinned = m->pinned, .last_used_ms = m->last_used_ms,
                              .keep_alive_ms = m->keep_alive_cur_ms, .bytes = m->charged_bytes};
        map[n++] = i;
    }
    return n;
}

/* Caller holds mu.  A stop is under way or just done: for a while the GPUs
 * may still show its memory taken (the engine frees it as it exits, the
 * driver some time after). */
static void settle_after_stop_locked(worker *w)
{
    int64_t grace = w->unload_wait_ms < 5000 ? w->unload_wait_ms : 5000;
    if (mono_ms() + grace > w->settle_until_ms) w->settle_until_ms = mono_ms() + grace;
}

/* Caller holds mu.  Takes engine idx out of service, so that no request
 * picks it any more, and returns what is needed to stop it.  From here on
 * a start that finds too little free VRAM waits for this one's to come
 * back (make_room). */
static engine take_out(worker *w, int idx, const char *why)
{
    settle_after_stop_locked(w);
    engine *e = &w->engines[idx];
    engine copy = *e;
    int room = w->nreleasing < (int)(sizeof w->releasing / sizeof w->releasing[0]);
    if (e->child > 0 && e->managed->charged_bytes && room) {
        w->releasing[w->nreleasing].pid = e->child;
        w->releasing[w->nreleasing++].bytes = e->managed->charged_bytes;
    }
    w->beat_soon = 1;
    pthread_cond_broadcast(&w->cv);
    e->child = 0;
    e->healthy = 0;
    e->nmodels = 0;
    e->url[0] = 0;
    e->managed->charged_bytes = 0;
    snprintf(e->error, sizeof e->error, "%.190s", why);
    return copy;
}

static void stop_engine(worker *w, engine *copy)
{
    int pid = copy->child;
    engine_stop(copy);
    pthread_mutex_lock(&w->probe_mu);
    gpu_probe_uncharge(w->probe, pid);
    pthread_mutex_unlock(&w->probe_mu);
    /* Memory a driver has not given back yet is no foreign use. */
    pthread_mutex_lock(&w->mu);
    settle_after_stop_locked(w);
    for (int i = 0; i < w->nreleasing; i++)
        if (w->releasing[i].pid == pid) { w->releasing[i] = w->releasing[--w->nreleasing]; break; }
    pthread_mutex_unlock(&w->mu);
}

uint64_t worker_releasing_locked(const worker *w)
{
    uint64_t b = 0;
    for (int i = 0; i < w->nreleasing; i++) b += w->releasing[i].bytes;
    return b;
}

/* Free VRAM right now, within the owner's cap.  The GPU count (0: none to
 * go by), or -1 when they cannot be read (why set). */
static int free_now(worker *w, uint64_t *free_bytes, char *why, size_t whylen)
{
    gpu_info g[GPU_MAX];
    pthread_mutex_lock(&w->probe_mu);
    int n = w->probe ? gpu_probe_read(w->probe, g, GPU_MAX) : 0;
    if (n < 0) err_out(why, whylen, "the GPUs cannot be read: %.200s", gpu_probe_error(w->probe));
    pthread_mutex_unlock(&w->probe_mu);
    if (n <= 0) return n;
    uint64_t f = 0;
    for (int i = 0; i < n; i++) f += g[i].free_bytes;
    pthread_mutex_lock(&w->mu);
    if (w->owner.max_vram_bytes) {
        uint64_t own = 0;
        for (int i = 0; i < w->nengines; i++)
            if (w->engines[i].managed) own += w->engines[i].managed->charged_bytes;
        uint64_t left = own < w->owner.max_vram_bytes ? w->owner.max_vram_bytes - own : 0;
        if (f > left) f = left;
    }
    pthread_mutex_unlock(&w->mu);
    *free_bytes = f;
    return n;
}

/* Caller holds mu.  Why nothing can make room: what holds the memory. */
static void no_room(worker *w, const res_engine *r, const int *map, int k, uint64_t need, uint64_t free_bytes,
                    const char *model, char *why, size_t whylen)
{
    int o = snprintf(why, whylen, "%s needs %llu MiB of VRAM, %llu MiB are free", model, MiB(need), MiB(free_bytes));
    for (int j = 0; j < k && o > 0 && (size_t)o < whylen; j++) {
        const engine *e = &w->engines[map[j]];
        if (!r[j].running || (!r[j].busy && !r[j].pinned)) continue;
        if (r[j].pinned)
            o += snprintf(why + o, whylen - (size_t)o, "; %s holds %llu MiB and is pinned", e->managed->name,
                          MiB(r[j].bytes));
        else
            o += snprintf(why + o, whylen - (size_t)o, "; %s holds %llu MiB and is serving %d request%s",
                          e->managed->name, MiB(r[j].bytes), e->inflight, e->inflight == 1 ? "" : "s");
    }
}

/* Makes room for engine idx: stops idle engines if it must, then waits
 * for the GPUs to show the memory free.  Memory on its way back counts
 * first: while an engine stopped a moment ago (its keep-alive ran out
 * while this request was on its way) is still exiting, or the driver is
 * still freeing what it held, it waits for that memory, as long as the
 * settle window lasts, rather than stop another engine or give up.  0, or
 * -1 with why. */
static int make_room(worker *w, int idx, char *why, size_t whylen)
{
    uint64_t free_bytes = 0;
    res_engine r[WORKER_MAX_ENGINES];
    int map[WORKER_MAX_ENGINES], victims[WORKER_MAX_ENGINES];
    engine stop[WORKER_MAX_ENGINES];
    char names[256] = "";
    int64_t t0 = mono_ms(), deadline = t0 + w->unload_wait_ms;
    const managed_spec *m = w->engines[idx].managed;
    uint64_t need;
    int nv, waited = 0;
    for (;;) {
        int n = free_now(w, &free_bytes, why, whylen);
        if (n <= 0) return n; /* no GPU to go by: the engine finds out itself */
        pthread_mutex_lock(&w->mu);
        need = m->need_bytes;
        int k = snapshot(w, r, map);
        int64_t now = mono_ms();
        int settling = now < w->settle_until_ms && now < deadline;
        uint64_t on_its_way = settling ? worker_releasing_locked(w) : 0;
        nv = res_pick_victims(r, k, need, free_bytes + on_its_way, victims);
        int coming_back = settling && (nv < 0 || (nv == 0 && free_bytes < need));
        if (nv < 0 && !coming_back) no_room(w, r, map, k, need, free_bytes, m->name, why, whylen);
        for (int v = 0; v < nv; v++) {
            int i = map[victims[v]];
            const char *victim = w->engines[i].managed->name;
            log_info("stopping the engine for %s (idle %lld ms, least recently used) to make room for %s", victim,
                     (long long)(now - r[victims[v]].last_used_ms), m->name);
            size_t have = strlen(names);
            snprintf(names + have, sizeof names - have, "%s%s", have ? ", " : "", victim);
            char reason[200];
            snprintf(reason, sizeof reason, "stopped to make room for %.100s", m->name);
            stop[v] = take_out(w, i, reason);
        }
        pthread_mutex_unlock(&w->mu);
        if (!coming_back) break;
        waited = 1;
        sleep_ms(50);
    }
    if (nv < 0) return -1;
    if (waited && nv == 0)
        log_info("%llu MiB of VRAM free %lld ms after an engine stopped, for %s", MiB(free_bytes),
                 (long long)(mono_ms() - t0), m->name);
    for (int v = 0; v < nv; v++) stop_engine(w, &stop[v]);
    if (nv == 0) return 0;
    int64_t t1 = mono_ms();
    deadline = t1 + w->unload_wait_ms;
    for (;;) {
        int n = free_now(w, &free_bytes, why, whylen);
        if (n > 0 && free_bytes >= need) {
            log_info("%llu MiB of VRAM free %lld ms after stopping %s", MiB(free_bytes), (long long)(mono_ms() - t1),
                     names);
            return 0;
        }
        if (mono_ms() >= deadline)
            return err_out(why, whylen, "the VRAM did not come back within %lld ms of stopping %s: %llu MiB free, "
                           "%s needs %llu MiB", (long long)w->unload_wait_ms, names, MiB(free_bytes), m->name, MiB(need));
        sleep_ms(50);
    }
}

/* Caller holds mu.  Takes in what a successful start measured. */
static int take_measurement(managed_spec *m, const memlog_figures *mem, measured_entry *out)
{
    char err[256];
    if (managed_measurement(m, mem, wall_ms() / 1000, out, err, sizeof err)) {
        log_warn("cannot record what %s measured: %s", m->name, err);
        return 0;
    }
    m->meas = *out;
    m->measured = 1;
    if (!mem->gpu_buffers) {
        log_info("the engine for %s put no buffer on a GPU (%llu MiB in host memory); keeping the planner's %llu MiB",
                 m->name, MiB(mem->host_bytes), MiB(m->estimate_bytes));
        return 0;
    }
    m->need_bytes = managed_measured_need(&m->defaults, out);
    log_info("%s measured on the GPU: model %llu MiB, KV %llu MiB, compute %llu MiB; offered with %llu MiB from "
             "now on (the planner's need was %llu MiB)", m->name, MiB(out->model_bytes), MiB(out->kv_bytes),
             MiB(out->compute_bytes), MiB(m->need_bytes), MiB(m->estimate_bytes));
    return 1;
}

int worker_ensure_loaded(worker *w, const char *model, char *why, size_t whylen)
{
    pthread_mutex_lock(&w->mu);
    int idx = -1;
    for (int i = 0; i < w->nengines; i++) {
        if (w->engines[i].healthy && engine_has_model(&w->engines[i], model)) { pthread_mutex_unlock(&w->mu); return 1; }
        if (w->engines[i].managed && !strcmp(w->engines[i].managed->name, model)) idx = i;
    }
    if (idx < 0) { pthread_mutex_unlock(&w->mu); return 0; }
    engine *e = &w->engines[idx];
    managed_spec *m = e->managed;
    if (m->fetching) {
        snprintf(why, whylen, "%s's file is still being fetched from a peer%s%s", model, m->last_error[0] ? ": " : "",
                 m->last_error);
        pthread_mutex_unlock(&w->mu);
        return -1;
    }
    int waited = 0;
    while (m->loading || w->starting) {
        waited |= m->loading;
        pthread_cond_wait(&w->load_cv, &w->mu);
    }
    if (e->healthy) { pthread_mutex_unlock(&w->mu); return 1; }
    if (waited && m->last_error[0]) {
        /* The start this request waited for failed: say why, rather than
         * every waiting request trying the same load again. */
        snprintf(why, whylen, "%s", m->last_error);
        pthread_mutex_unlock(&w->mu);
        return -1;
    }
    w->starting = 1;
    m->loading = 1;
    engine dead = *e; /* an engine that crashed: reap it before starting anew */
    e->child = 0;
    m->charged_bytes = 0;
    pthread_mutex_unlock(&w->mu);
    if (dead.child) stop_engine(w, &dead);

    int rc = make_room(w, idx, why, whylen);
    memlog_figures mem;
    int have_mem = 0;
    int64_t t0 = mono_ms();
    engine copy;
    if (rc == 0) {
        pthread_mutex_lock(&w->mu);
        copy = *e;
        pthread_mutex_unlock(&w->mu);
        rc = managed_start(&copy, m->engine_cmd[0] ? m->engine_cmd : w->engine_cmd, w->load_timeout_ms, &mem, &have_mem, why, whylen);
    }
    measured_entry fresh;
    int store = 0;
    pthread_mutex_lock(&w->mu);
    m->loading = 0;
    w->starting = 0;
    if (rc == 0) {
        e->child = copy.child;
        snprintf(e->url, sizeof e->url, "%s", copy.url);
        e->healthy = 1;
        e->nmodels = 1;
        snprintf(e->models[0], sizeof e->models[0], "%s", model);
        e->error[0] = 0;
        m->last_error[0] = 0;
        m->last_used_ms = m->started_ms = mono_ms();
        m->keep_alive_cur_ms = m->keep_alive_ms;
        m->starts++;
        log_info("engine for %s is up at %s after %lld ms (start %d)", model, e->url, (long long)(mono_ms() - t0),
                 m->starts);
        if (have_mem) store = take_measurement(m, &mem, &fresh);
        else log_info("the engine for %s printed no buffer sizes; keeping the planner's %llu MiB", model,
                      MiB(m->need_bytes));
        /* Charged inside mu, so no GPU read sees the memory without its owner. */
        m->charged_bytes = m->need_bytes;
        pthread_mutex_lock(&w->probe_mu);
        gpu_probe_charge(w->probe, e->child, m->charged_bytes);
        pthread_mutex_unlock(&w->probe_mu);
    } else {
        snprintf(e->error, sizeof e->error, "%.190s", why);
        snprintf(m->last_error, sizeof m->last_error, "%s", why);
        log_warn("could not start the engine for %s: %s", model, why);
    }
    pthread_cond_broadcast(&w->load_cv);
    pthread_mutex_unlock(&w->mu);
    char err[300];
    if (store && measured_store(m->measured_path, &fresh, err, sizeof err))
        log_warn("cannot keep the measurement of %s: %s", model, err);
    return rc == 0 ? 1 : -1;
}

/* The engines an unload pass took out, stopped off the agent thread: an
 * engine takes a while to exit (up to 3 s before it is killed), and the
 * heartbeats must go on meanwhile, or the node would look gone. */
typedef struct stop_job {
    worker *w;
    engine stop[WORKER_MAX_ENGINES];
    int n;
} stop_job;

static void *stopper_thread(void *arg)
{
    stop_job *j = arg;
    worker *w = j->w;
    for (int i = 0; i < j->n; i++) stop_engine(w, &j->stop[i]);
    free(j);
    pthread_mutex_lock(&w->mu);
    w->stops_running--;
    w->beat_soon = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* Stops the engines in the background; here and now only when no thread
 * can be had. */
static void stop_in_background(worker *w, engine *stop, int n)
{
    stop_job *j = malloc(sizeof *j);
    pthread_attr_t attr;
    pthread_t t;
    if (j) {
        j->w = w;
        memcpy(j->stop, stop, sizeof *stop * (size_t)n);
        j->n = n;
        pthread_mutex_lock(&w->mu);
        w->stops_running++;
        pthread_mutex_unlock(&w->mu);
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&t, &attr, stopper_thread, j);
        pthread_attr_destroy(&attr);
        if (rc == 0) return;
        pthread_mutex_lock(&w->mu);
        w->stops_running--;
        pthread_mutex_unlock(&w->mu);
        free(j);
    }
    for (int i = 0; i < n; i++) stop_engine(w, &stop[i]);
}

void worker_wait_stops(worker *w)
{
    pthread_mutex_lock(&w->mu);
    while (w->stops_running > 0) pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
}

int worker_unload_idle(worker *w, int64_t now)
{
    engine stop[WORKER_MAX_ENGINES];
    res_engine r[WORKER_MAX_ENGINES];
    int map[WORKER_MAX_ENGINES], n = 0;
    pthread_mutex_lock(&w->mu);
    int k = snapshot(w, r, map);
    for (int j = 0; j < k; j++) {
        const char *name = w->engines[map[j]].managed->name;
        if (!r[j].running || r[j].busy) continue;
        /* The owner's claim on the machine outranks a pin. */
        if (w->draining) log_info("stopping the engine for %s: the node is draining", name);
        else if (res_expired(&r[j], now))
            log_info("stopping the engine for %s: idle for %lld ms (keep-alive %lld ms)", name,
                     (long long)(now - r[j].last_used_ms), (long long)r[j].keep_alive_ms);
        else continue;
        stop[n++] = take_out(w, map[j], "stopped");
    }
    pthread_mutex_unlock(&w->mu);
    if (n) stop_in_background(w, stop, n);
    return n;
}

int64_t worker_next_unload_ms(worker *w, int64_t now)
{
    res_engine r[WORKER_MAX_ENGINES];
    int map[WORKER_MAX_ENGINES];
    pthread_mutex_lock(&w->mu);
    int k = snapshot(w, r, map);
    int64_t next = res_next_expiry(r, k, now);
    for (int j = 0; j < k && w->draining; j++)
        if (r[j].running && !r[j].busy) next = 0;
    pthread_mutex_unlock(&w->mu);
    return next;
}

void worker_engine_used_locked(worker *w, int idx, int has_ka, int64_t ka_ms, int64_t now)
{
    engine *e = &w->engines[idx];
    managed_spec *m = e->managed;
    if (!m) return;
    m->last_used_ms = now;
    /* As Ollama: each request says how long the model stays after it. */
    m->keep_alive_cur_ms = has_ka ? ka_ms : m->keep_alive_ms;
    if (e->inflight == 0 && m->keep_alive_cur_ms == 0) pthread_cond_broadcast(&w->cv);
}

uint64_t worker_managed_report_locked(worker *w, json_t *engines, json_t *loadable, int64_t now)
{
    res_engine r[WORKER_MAX_ENGINES];
    int map[WORKER_MAX_ENGINES], victims[WORKER_MAX_ENGINES];
    int k = snapshot(w, r, map);
    uint64_t node_free = 0, releasing = worker_releasing_locked(w);
    for (int g = 0; g < w->ngpus; g++) node_free += w->gpus[g].free_bytes;
    for (int j = 0; j < k; j++) {
        const engine *e = &w->engines[map[j]];
        const managed_spec *m = e->managed;
        json_t *mj = managed_json(m, e->child > 0, now);
        json_object_set_new(mj, "evictable", json_boolean(r[j].running && !r[j].busy && !r[j].pinned));
        json_object_update(json_array_get(engines, (size_t)map[j]), mj);
        json_decref(mj);
        if (e->healthy || m->fetching) continue; /* a file still on its way is not offered */
        /* Offered with the free VRAM a start needs here: less what stopping
         * idle engines would give back, so a node that can make room is
         * still chosen when no node has the room already, and less what
         * engines still exiting are giving back (make_room waits for it). */
        uint64_t need = m->need_bytes, net = need > releasing ? need - releasing : 0;
        json_t *evicts = json_array();
        int nv = w->ngpus > 0 ? res_pick_victims(r, k, need, node_free + releasing, victims) : 0;
        for (int v = 0; v < nv; v++) {
            uint64_t b = r[victims[v]].bytes;
            net = net > b ? net - b : 0;
            json_array_append_new(evicts, json_string(w->engines[map[victims[v]]].managed->name));
        }
        if (net == 0) net = 1; /* the coordinator ignores a need of 0 */
        json_array_append_new(loadable, json_pack("{s:s, s:I, s:I, s:s, s:o, s:i}", "model", m->name, "need_bytes",
                                                  (json_int_t)net, "model_need_bytes", (json_int_t)need,
                                                  "need_source", m->measured && m->meas.model_bytes ? "measured" : "estimate",
                                                  "evicts", evicts, "slots", m->parallel));
    }
    return res_evictable(r, k);
}
