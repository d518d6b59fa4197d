/* worker/agent: see agent.h. */
#include "worker/agent.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "http/client.h"
#include "worker/procs.h"
#include "worker/wcatalog.h"
#include "util/clock.h"
#include "util/ids.h"
#include "util/log.h"

/* The pid serving an engine we front but did not start, from its port;
 * looked up again when that process is gone, at most every 10 s. */
static int adopted_pid(worker *w, int i, const char *url, int64_t now)
{
    int pid = w->adopted_pid[i];
    if (pid > 0 && (kill(pid, 0) == 0 || errno == EPERM)) return pid;
    if (now - w->adopted_at[i] < 10000 && w->adopted_at[i]) return 0;
    w->adopted_at[i] = now;
    int port = procs_loopback_port(url);
    w->adopted_pid[i] = port ? procs_tcp_listener(port) : 0;
    if (w->adopted_pid[i]) log_info("the engine at %s is process %d", url, w->adopted_pid[i]);
    return w->adopted_pid[i];
}

/* This worker's processes among those on the GPUs: itself, the engines it
 * started, the ones it fronts, and their children.  /proc is read only for
 * pids that are not plainly ours. */
static int own_pids(worker *w, const gpu_info *gpus, int ngpus, int64_t now, int *own)
{
    int n = 0;
    char urls[WORKER_MAX_ENGINES][256];
    int adopted[WORKER_MAX_ENGINES], nad = 0;
    own[n++] = (int)getpid();
    pthread_mutex_lock(&w->mu);
    for (int i = 0; i < w->nengines; i++) {
        if (w->engines[i].child > 0) own[n++] = (int)w->engines[i].child;
        else if (!w->engines[i].managed) {
            adopted[nad] = i;
            snprintf(urls[nad++], sizeof urls[0], "%s", w->engines[i].url);
        }
    }
    pthread_mutex_unlock(&w->mu);
    int roots = n, looked = 0;
    for (int g = 0; g < ngpus; g++)
        for (int k = 0; k < gpus[g].nprocs && n < OWNER_MAX_PIDS; k++) {
            int pid = gpus[g].procs[k].pid, known = 0;
            for (int j = 0; j < n; j++) known |= own[j] == pid;
            if (known) continue;
            if (!looked) {
                for (int a = 0; a < nad && n < OWNER_MAX_PIDS; a++) {
                    int ap = adopted_pid(w, adopted[a], urls[a], now);
                    if (ap > 0) own[n++] = ap;
                }
                roots = n;
                looked = 1;
                for (int j = 0; j < n; j++) known |= own[j] == pid;
                if (known) continue;
            }
            if (procs_descends_from(pid, own, roots)) own[n++] = pid;
        }
    return n;
}

/* Caller holds mu.  Logs each change of the node's own verdict once. */
static void note_transitions(worker *w, int lost, const char *lost_why, const owner_verdict *v)
{
    if (lost && !w->gpu_lost) log_warn("self-check failed, taking no work: %s", lost_why);
    if (!lost && w->gpu_lost) log_info("self-check passes again: the GPUs answer");
    w->gpu_lost = lost;
    snprintf(w->gpu_lost_reason, sizeof w->gpu_lost_reason, "%s", lost ? lost_why : "");
    if (v->draining && (!w->draining || v->rule != w->drain_rule))
        log_warn("draining, taking no new work: %s", v->reason);
    else if (!v->draining && w->draining)
        log_info("serving again: no longer %s", w->drain_reason);
    w->draining = v->draining;
    w->drain_rule = v->rule;
    snprintf(w->drain_reason, sizeof w->drain_reason, "%s", v->reason);
}

/* The self-check and the owner's rules, from a fresh GPU read (ngpus < 0:
 * it failed with probe_err). */
static void judge(worker *w, gpu_info *gpus, int ngpus, const char *probe_err)
{
    int64_t now = mono_ms();
    int own[OWNER_MAX_PIDS];
    int nown = own_pids(w, gpus, ngpus, now, own);
    owner_input in = {.gpus = gpus, .ngpus = ngpus, .own_pids = own, .nown = nown, .idle_s = -1};
    pthread_mutex_lock(&w->mu);
    owner_policy pol = w->owner;
    pol.settle_ms = 3 * w->heartbeat_ms;
    for (int i = 0; i < w->nengines; i++) {
        const managed_spec *m = w->engines[i].managed;
        if (!m) continue;
        in.starting |= m->loading;
        in.expected_bytes += m->charged_bytes;
    }
    /* Nor right after a stop, while the driver gives the memory back. */
    in.starting |= now < w->settle_until_ms;
    int seen = w->gpus_seen;
    pthread_mutex_unlock(&w->mu);
    char idle_why[200] = "";
    if (w->idle) in.idle_s = idle_read(w->idle, now, idle_why, sizeof idle_why);
    in.idle_why = idle_why;
    /* The owner's hours are local wall time, the one use of it here. */
    time_t t = time(NULL);
    struct tm tm;
    localtime_r(&t, &tm);
    in.weekday = tm.tm_wday;
    in.hour = tm.tm_hour;
    in.minute = tm.tm_min;
    owner_verdict v;
    owner_decide(&pol, &in, &w->owner_st, now, &v);

    char lost_why[256] = "";
    if (ngpus < 0) snprintf(lost_why, sizeof lost_why, "the GPU probe failed: %.200s", probe_err);
    else if (ngpus < seen) snprintf(lost_why, sizeof lost_why, "only %d of %d GPUs answer", ngpus, seen);
    pthread_mutex_lock(&w->mu);
    if (ngpus >= 0) {
        for (int i = 0; i < ngpus; i++) {
            w->gpus[i] = gpus[i];
            w->gpus[i].free_bytes = v.offer_free[i];
            w->gpus[i].foreign_procs = v.foreign_procs[i];
        }
        w->ngpus = ngpus;
        if (ngpus > w->gpus_seen) w->gpus_seen = ngpus;
    }
    note_transitions(w, lost_why[0] != 0, lost_why, &v);
    pthread_mutex_unlock(&w->mu);
}

int worker_refuses_work(worker *w, char *why, size_t whylen)
{
    pthread_mutex_lock(&w->mu);
    int refuse = 1;
    if (w->gpu_lost) snprintf(why, whylen, "this node failed its self-check: %s", w->gpu_lost_reason);
    else if (w->draining) snprintf(why, whylen, "this node is draining: %s", w->drain_reason);
    else refuse = 0;
    pthread_mutex_unlock(&w->mu);
    return refuse;
}

void worker_refresh(worker *w)
{
    gpu_info gpus[GPU_MAX];
    char probe_err[256];
    pthread_mutex_lock(&w->probe_mu);
    int ngpus = w->probe ? gpu_probe_read(w->probe, gpus, GPU_MAX) : 0;
    snprintf(probe_err, sizeof probe_err, "%s", w->probe ? gpu_probe_error(w->probe) : "");
    pthread_mutex_unlock(&w->probe_mu);
    engine fresh[WORKER_MAX_ENGINES];
    pthread_mutex_lock(&w->mu);
    int n = w->nengines;
    engine snap[WORKER_MAX_ENGINES];
    memcpy(snap, w->engines, sizeof(engine) * (size_t)n);
    pthread_mutex_unlock(&w->mu);
    /* Engine calls happen outside the lock so requests are never held up.
     * A managed engine that is not running has nothing to ask. */
    for (int i = 0; i < n; i++) {
        if (snap[i].managed && (!snap[i].child || snap[i].managed->loading)) fresh[i] = snap[i];
        else engine_refresh(&snap[i], &fresh[i]);
    }
    pthread_mutex_lock(&w->mu);
    for (int i = 0; i < n; i++) {
        if (w->engines[i].managed && w->engines[i].child != snap[i].child) continue; /* started or stopped meanwhile */
        int inflight = w->engines[i].inflight;
        if (fresh[i].managed && fresh[i].healthy) {
            /* A started engine serves exactly the model it was started for,
             * whatever id it lists (llama-server lists the file's path). */
            fresh[i].nmodels = 1;
            snprintf(fresh[i].models[0], sizeof fresh[i].models[0], "%s", fresh[i].managed->name);
        }
        if (w->engines[i].healthy != fresh[i].healthy)
            log_info("engine %s at %s is %s%s%s", engine_kind_name(fresh[i].kind), fresh[i].url,
                     fresh[i].healthy ? "up" : "down", fresh[i].error[0] ? ": " : "", fresh[i].error);
        w->engines[i] = fresh[i];
        w->engines[i].inflight = inflight;
    }
    pthread_mutex_unlock(&w->mu);
    judge(w, gpus, ngpus, probe_err);
}

/* Bodies smaller than this arrive in a few segments: their timing measures
 * the round trip, not the throughput. */
#define LINK_SAMPLE_MIN_BYTES (256 * 1024)

void worker_note_upload(worker *w, size_t bytes, int64_t us)
{
    if (bytes < LINK_SAMPLE_MIN_BYTES || us <= 0) return;
    pthread_mutex_lock(&w->mu);
    w->link_bytes += (double)bytes;
    w->link_ms += (double)us / 1000.0;
    pthread_mutex_unlock(&w->mu);
}

int worker_token_ok(worker *w, const char *bearer)
{
    if (!bearer) return 0;
    pthread_mutex_lock(&w->mu);
    int ok = (w->token[0] && secret_equal(bearer, w->token)) || (w->prev_token[0] && secret_equal(bearer, w->prev_token));
    pthread_mutex_unlock(&w->mu);
    return ok;
}

/* Caller holds mu.  What the coordinator needs to place work here. */
static json_t *report(worker *w)
{
    json_t *gpus = json_array(), *engines = json_array(), *loadable = json_array();
    for (int i = 0; i < w->ngpus; i++) json_array_append_new(gpus, gpu_info_json(&w->gpus[i]));
    int healthy = 0;
    for (int i = 0; i < w->nengines; i++) {
        const engine *e = &w->engines[i];
        json_array_append_new(engines, engine_json(e));
        /* A model whose engine is stopped can still be served: it is offered
         * as loadable, and counts towards the node being ready. */
        healthy += e->healthy || e->managed;
    }
    uint64_t evictable = worker_managed_report_locked(w, engines, loadable, mono_ms());
    json_t *j = json_pack("{s:s, s:s, s:s, s:o, s:o, s:o, s:i, s:b, s:I, s:I}", "name", w->name, "address", w->address,
                          "fingerprint", w->fingerprint, "gpus", gpus, "engines", engines, "loadable", loadable,
                          "inflight", w->inflight, "ready", healthy > 0 && !w->gpu_lost, "evictable_bytes",
                          (json_int_t)evictable, "releasing_bytes", (json_int_t)worker_releasing_locked(w));
    /* A failed self-check is the stronger word: the node must not look as
     * if it merely drained. */
    if (w->gpu_lost) json_object_set_new(j, "not_ready_reason", json_string(w->gpu_lost_reason));
    else if (!healthy) json_object_set_new(j, "not_ready_reason", json_string("no engine is answering"));
    /* Files peers may fetch from here, and this node's own downloads. */
    json_object_set_new(j, "files", files_held_json(&w->files));
    json_object_set_new(j, "transfers", files_transfers_json(&w->files));
    if (w->draining && !w->gpu_lost) {
        json_object_set_new(j, "draining", json_true());
        json_object_set_new(j, "draining_reason", json_string(w->drain_reason));
    }
    if (w->link_bytes > 0 && w->link_ms > 0) {
        json_object_set_new(j, "link", json_pack("{s:f, s:f}", "bytes", w->link_bytes, "ms", w->link_ms));
        w->link_bytes = w->link_ms = 0;
    }
    wcat_report_locked(w, j);
    return j;
}

static long post(worker *w, const char *path, const char *bearer, json_t *body, json_t **answer)
{
    char url[384];
    snprintf(url, sizeof url, "%s%s", w->coordinator, path);
    char *text = json_dumps(body, JSON_COMPACT);
    http_call_opts o = {.method = "POST", .url = url, .body = text, .body_len = strlen(text), .bearer = bearer,
                        .timeout_ms = 5000, .connect_timeout_ms = 2000};
    http_result res;
    http_call(&o, &res);
    free(text);
    *answer = res.status ? json_loadb(res.body, res.body_len, 0, NULL) : NULL;
    if (!res.status) log_debug("coordinator unreachable: %s", res.error);
    long st = res.status;
    http_result_free(&res);
    return st;
}

static const char *error_message(json_t *answer)
{
    const char *m = json_string_value(json_object_get(json_object_get(answer, "error"), "message"));
    return m ? m : "no reason given";
}

static void do_register(worker *w)
{
    pthread_mutex_lock(&w->mu);
    json_t *body = report(w);
    pthread_mutex_unlock(&w->mu);
    json_t *ans = NULL;
    long st = post(w, "/internal/v1/register", w->join_token, body, &ans);
    json_decref(body);
    if (st == 200) {
        const char *id = json_string_value(json_object_get(ans, "node_id"));
        const char *tok = json_string_value(json_object_get(ans, "node_token"));
        json_int_t hb = json_integer_value(json_object_get(ans, "heartbeat_ms"));
        if (id && tok) {
            pthread_mutex_lock(&w->mu);
            snprintf(w->node_id, sizeof w->node_id, "%s", id);
            snprintf(w->prev_token, sizeof w->prev_token, "%s", w->token);
            snprintf(w->token, sizeof w->token, "%s", tok);
            w->registered = 1;
            w->seq = 0;
            if (hb > 0) w->heartbeat_ms = hb;
            pthread_mutex_unlock(&w->mu);
            log_info("joined the pool at %s as %s", w->coordinator, id);
            wcat_take(w, ans);
        }
    } else if (st) {
        log_error("the coordinator refused registration (%ld): %s", st, error_message(ans));
    }
    json_decref(ans);
}

static void do_heartbeat(worker *w)
{
    pthread_mutex_lock(&w->mu);
    json_t *body = report(w);
    json_object_set_new(body, "node_id", json_string(w->node_id));
    json_object_set_new(body, "seq", json_integer((json_int_t)++w->seq));
    char token[72];
    snprintf(token, sizeof token, "%s", w->token);
    pthread_mutex_unlock(&w->mu);
    json_t *ans = NULL;
    long st = post(w, "/internal/v1/heartbeat", token, body, &ans);
    json_decref(body);
    if (st == 200) {
        const char *tok = json_string_value(json_object_get(ans, "node_token"));
        if (tok) {
            pthread_mutex_lock(&w->mu);
            snprintf(w->prev_token, sizeof w->prev_token, "%s", w->token);
            snprintf(w->token, sizeof w->token, "%s", tok);
            pthread_mutex_unlock(&w->mu);
            log_debug("node token rotated");
        }
        wcat_take(w, ans);
    } else if (st == 401) {
        /* The coordinator restarted or our token expired: join again. */
        log_warn("the coordinator no longer knows this node (%s); registering again", error_message(ans));
        pthread_mutex_lock(&w->mu);
        w->registered = 0;
        pthread_mutex_unlock(&w->mu);
    } else if (st) {
        log_warn("heartbeat refused (%ld): %s", st, error_message(ans));
    }
    json_decref(ans);
}

/* Until the next beat is due, stopping engines whose keep-alive runs out
 * meanwhile (a request with keep_alive 0 wakes this at once).  Returns
 * early, for a beat, when such a stop has finished, so the pool learns
 * soon that the engine and its memory are free. */
static void wait_for_beat(worker *w, int64_t beat_at)
{
    for (;;) {
        int64_t now = mono_ms();
        if (now >= beat_at) return;
        int64_t wake = beat_at, next = worker_next_unload_ms(w, now);
        if (next == 0) {
            if (worker_unload_idle(w, now) > 0) continue;
            next = 50; /* it was busy again: look once more shortly */
        }
        if (next > 0 && now + next < wake) wake = now + next;
        pthread_mutex_lock(&w->mu);
        struct timespec ts = mono_at(wake);
        if (!w->stopping && !w->beat_soon) pthread_cond_timedwait(&w->cv, &w->mu, &ts);
        int stopping = w->stopping, beat = w->beat_soon;
        w->beat_soon = 0;
        pthread_mutex_unlock(&w->mu);
        if (stopping || beat) return;
    }
}

static void *agent_thread(void *arg)
{
    worker *w = arg;
    for (;;) {
        worker_refresh(w);
        worker_unload_idle(w, mono_ms());
        wcat_hash_pending(w);
        pthread_mutex_lock(&w->mu);
        int registered = w->registered, stopping = w->stopping;
        pthread_mutex_unlock(&w->mu);
        if (stopping) break;
        if (!registered) {
            do_register(w);
            pthread_mutex_lock(&w->mu);
            registered = w->registered;
            pthread_mutex_unlock(&w->mu);
        }
        /* Right after registering too: the first beat makes the node ready. */
        if (registered) do_heartbeat(w);
        pthread_mutex_lock(&w->mu);
        int64_t beat_at = mono_ms() + w->heartbeat_ms;
        pthread_mutex_unlock(&w->mu);
        wait_for_beat(w, beat_at);
        pthread_mutex_lock(&w->mu);
        stopping = w->stopping;
        pthread_mutex_unlock(&w->mu);
        if (stopping) break;
    }
    return NULL;
}

int worker_agent_start(worker *w)
{
    return pthread_create(&w->thread, NULL, agent_thread, w);
}

void worker_agent_stop(worker *w)
{
    pthread_mutex_lock(&w->mu);
    w->stopping = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    worker_wait_stops(w);
    wcat_stop(w);
}
