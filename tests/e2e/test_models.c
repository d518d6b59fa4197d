/* e2e: the life of models a worker starts itself (--load): one load for
 * concurrent first requests, unloading when idle (with a request's
 * keep_alive), least-recently-used eviction when VRAM is short, never
 * stopping a busy engine, failed loads explained by the engine's log, and
 * the memory the engine printed measured, reported and remembered.
 *
 * The engine is `gpupool sim-engine` started with llama-server's flags (the
 * worker's default command with {self} sim-engine in front of it), which
 * sizes the GGUF file with the planner, takes --load-ms to load and prints
 * llama.cpp's buffer lines.  The fake GPU loses an engine's need while it
 * runs, so two Llama-3-8B F16 models (about 16.6 GiB each at 2048 context)
 * do not fit a 24 GB card with 22 GB free together.  With llama-server on
 * the PATH and GPUPOOL_TEST_GGUF naming a model, one more test runs the real
 * engine. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "unit/gguf_writer.h"

static const gw_llama LLAMA3_8B = {32, 4096, 14336, 32, 8, 128, 128256, 0, 1, false};

typedef struct fixture {
    h_pool p;
    char gguf[3][400];
    char data[400];
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    h_pool_init(&f->p, "models");
    setenv("TMPDIR", f->p.dir, 1);
    for (int i = 0; i < 3; i++) {
        gw w;
        gw_init(&w, 3);
        gw_llama_kv(&w, "llama", &LLAMA3_8B, 8192);
        gw_llama_tensors(&w, &LLAMA3_8B);
        gw_write_file(&w, f->gguf[i], sizeof f->gguf[i]);
        gw_free(&w);
    }
    snprintf(f->data, sizeof f->data, "%s/worker-data", f->p.dir);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    int problems = h_pool_cleanup(&f->p);
    free(f);
    return problems;
}

/* The worker's default llama-server command, run by the simulator. */
#define SIM_CMD                                                                                                   \
    "{self}%20sim-engine%20-m%20{model}%20--alias%20{name}%20--host%20127.0.0.1%20--port%20{port}%20-c%20"     \
    "{ctx_total}%20-np%20{parallel}%20--kv-unified%20-ngl%20999%20-ctk%20{cache_type_k}%20-ctv%20"             \
    "{cache_type_v}%20-fa%20{flash_attn}%20--ttft-ms%200"

/* A worker named `name` with models llama-a, llama-b (and llama-c) from
 * the fixture's files; `load` are extra --load options for each model,
 * `sim` extra simulator flags (%20-separated), `extra` more worker options. */
static h_proc *start_worker(fixture *f, const char *name, const char *gpu, int nmodels, const char *load,
                            const char *sim, const char *extra)
    __attribute__((nonnull(1, 2, 3, 5, 6)));
static h_proc *start_worker(fixture *f, const char *name, const char *gpu, int nmodels, const char *load,
                            const char *sim, const char *extra)
{
    char args[4800], loads[1600] = "";
    for (int i = 0; i < nmodels; i++) {
        size_t n = strlen(loads);
        snprintf(loads + n, sizeof loads - n, "--load llama-%c=%s,ctx=2048%s ", 'a' + i, f->gguf[i], load);
    }
    snprintf(args, sizeof args, "--fake-gpu %s --data %s %s--engine-cmd %s%s %s", gpu, f->data, loads, SIM_CMD,
             sim, extra ? extra : "");
    return h_start_worker(&f->p, name, NULL, args);
}

static long chat(h_pool *p, const char *model, const char *extra, h_resp *r)
{
    char body[512];
    snprintf(body, sizeof body,
             "{\"model\":\"%s\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":3%s}", model,
             extra ? extra : "");
    h_request(p, "POST", "/v1/chat/completions", body, NULL, r);
    return r->status;
}

static void chat_ok(h_pool *p, const char *model, const char *extra)
{
    h_resp r;
    chat(p, model, extra, &r);
    if (r.status != 200) fail_msg("%s: %ld %s", model, r.status, r.body ? r.body : "");
    assert_non_null(strstr(r.body, "[simulated]"));
    h_resp_free(&r);
}

/* How often text occurs in a process's log. */
static int log_count(h_proc *proc, const char *text)
{
    FILE *fp = fopen(proc->log, "r");
    if (!fp) return 0;
    int n = 0;
    char line[4096];
    while (fgets(line, sizeof line, fp))
        if (strstr(line, text)) n++;
    fclose(fp);
    return n;
}

typedef struct log_want { h_proc *proc; const char *text; int n; } log_want;

static int log_reached(void *arg)
{
    log_want *l = arg;
    return log_count(l->proc, l->text) >= l->n;
}

/* Whether text occurs at least n times in the process's log within ms. */
static int wait_log_count(h_proc *proc, const char *text, int n, int64_t ms)
{
    log_want l = {proc, text, n};
    return h_wait_until(log_reached, &l, ms);
}

static int starts_of(h_proc *w, const char *model)
{
    char text[128];
    snprintf(text, sizeof text, " for %s (pid ", model);
    return log_count(w, text);
}

/* The engine entry for `model` in the coordinator's view of the first node
 * (a new reference, or NULL). */
static json_t *engine_of(h_pool *p, const char *model)
{
    h_resp r;
    h_request(p, "GET", "/v1/nodes", NULL, NULL, &r);
    json_t *found = NULL, *e;
    size_t i;
    json_array_foreach(json_object_get(json_array_get(json_object_get(r.json, "data"), 0), "engines"), i, e) {
        const char *m = json_string_value(json_object_get(e, "model"));
        if (m && !strcmp(m, model)) found = json_incref(e);
    }
    h_resp_free(&r);
    return found;
}

static int engine_state_is(h_pool *p, const char *model, const char *state)
{
    json_t *e = engine_of(p, model);
    const char *s = json_string_value(json_object_get(e, "state"));
    int yes = s && !strcmp(s, state);
    json_decref(e);
    return yes;
}

typedef struct wait_ctx { h_pool *p; const char *model, *state; } wait_ctx;

static int state_reached(void *arg)
{
    wait_ctx *c = arg;
    return engine_state_is(c->p, c->model, c->state);
}

static int wait_state(h_pool *p, const char *model, const char *state, int64_t ms)
{
    wait_ctx c = {p, model, state};
    return h_wait_until(state_reached, &c, ms);
}

/* ---- one load for concurrent first requests ---- */

typedef struct client { h_pool *p; const char *model; long status; } client;

static void *one_client(void *arg)
{
    client *c = arg;
    h_resp r;
    c->status = chat(c->p, c->model, NULL, &r);
    h_resp_free(&r);
    return NULL;
}

static void concurrent_first_requests_load_once(void **state)
{
    fixture *f = *state;
    /* Round-robin places without counting slots, so all six reach the
     * worker while the engine is still loading. */
    h_start_coordinator(&f->p, "--placement round-robin");
    h_proc *w = start_worker(f, "w", "RTX%204090:24:22", 1, ",parallel=4,keep-alive=60", "%20--load-ms%20800", NULL);
    pthread_t t[6];
    client c[6];
    for (int i = 0; i < 6; i++) {
        c[i] = (client){.p = &f->p, .model = "llama-a"};
        pthread_create(&t[i], NULL, one_client, &c[i]);
    }
    for (int i = 0; i < 6; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < 6; i++) assert_int_equal(c[i].status, 200);
    assert_int_equal(starts_of(w, "llama-a"), 1);
    /* The engine's output went to its own log, which shows the load. */
    h_proc engine_log = {0};
    snprintf(engine_log.log, sizeof engine_log.log, "%.400s/logs/llama-a.log", f->data);
    assert_true(h_log_contains(&engine_log, "SIMULATED load of"));
    assert_true(h_log_contains(&engine_log, "CUDA0 model buffer size"));
    /* Later requests use the engine that is up. */
    chat_ok(&f->p, "llama-a", NULL);
    assert_int_equal(starts_of(w, "llama-a"), 1);
}

/* ---- idle unload, with the request's keep_alive ---- */

static void idle_unload_follows_keep_alive(void **state)
{
    fixture *f = *state;
    h_start_coordinator(&f->p, NULL);
    h_proc *w = start_worker(f, "w", "RTX%204090:24:22", 1, ",keep-alive=60", "%20--load-ms%20100", NULL);
    /* The model's own keep-alive (60 s) holds it. */
    chat_ok(&f->p, "llama-a", NULL);
    assert_true(wait_state(&f->p, "llama-a", "running", 5000));
    assert_false(wait_state(&f->p, "llama-a", "stopped", 1200));
    assert_int_equal(log_count(w, "stopping the engine for llama-a"), 0);
    /* A request's keep_alive overrides it: "1s" after that request. */
    chat_ok(&f->p, "llama-a", ",\"keep_alive\":\"1s\"");
    assert_true(engine_state_is(&f->p, "llama-a", "running"));
    assert_true(wait_state(&f->p, "llama-a", "stopped", 6000));
    assert_int_equal(log_count(w, "stopping the engine for llama-a: idle"), 1);
    /* keep_alive 0: stopped right after the answer.  The worker's log says
     * so: the pool may not have had a beat since this start, and its view
     * would still be the "stopped" from before. */
    chat_ok(&f->p, "llama-a", ",\"keep_alive\":0");
    int64_t t0 = h_now_ms();
    assert_true(wait_log_count(w, "stopping the engine for llama-a: idle", 2, 3000));
    assert_true(h_now_ms() - t0 < 2500);
    assert_true(wait_state(&f->p, "llama-a", "stopped", 3000));
    assert_int_equal(starts_of(w, "llama-a"), 2);
    /* A stream's keep_alive counts when the stream ends, not before. */
    chat_ok(&f->p, "llama-a", NULL);
    assert_true(wait_state(&f->p, "llama-a", "running", 5000));
    chat_ok(&f->p, "llama-a", ",\"stream\":true,\"keep_alive\":0");
    assert_true(wait_log_count(w, "stopping the engine for llama-a: idle", 3, 3000));
    assert_true(wait_state(&f->p, "llama-a", "stopped", 3000));
    assert_int_equal(starts_of(w, "llama-a"), 3);
    /* A keep_alive that is not a duration is the client's mistake. */
    h_resp r;
    assert_int_equal(chat(&f->p, "llama-a", ",\"keep_alive\":\"soon\"", &r), 400);
    assert_string_equal(json_string_value(json_object_get(json_object_get(r.json, "error"), "param")), "keep_alive");
    h_resp_free(&r);
}

/* ---- eviction ---- */

/* The coordinator places by the last beat: a model whose engine that beat
 * showed serving a request cannot be evicted yet. */
static int evictable(h_pool *p, const char *model)
{
    json_t *e = engine_of(p, model);
    int yes = json_is_true(json_object_get(e, "evictable"));
    json_decref(e);
    return yes;
}

static int a_evictable(void *arg) { return evictable(arg, "llama-a"); }
static int b_evictable(void *arg) { return evictable(arg, "llama-b"); }

/* 22 GB free less one model's 16.6 GiB. */
static int one_model_in_use(void *arg)
{
    h_resp r;
    h_request(arg, "GET", "/v1/nodes", NULL, NULL, &r);
    json_t *g = json_array_get(json_object_get(json_array_get(json_object_get(r.json, "data"), 0), "gpus"), 0);
    json_int_t free_b = json_integer_value(json_object_get(g, "free_bytes"));
    h_resp_free(&r);
    return free_b > 4LL << 30 && free_b < 7LL << 30;
}

static void b_evicts_a_then_a_evicts_b(void **state)
{
    fixture *f = *state;
    h_start_coordinator(&f->p, NULL);
    h_proc *w = start_worker(f, "w", "RTX%204090:24:22", 2, ",keep-alive=60", "%20--load-ms%20100", NULL);
    chat_ok(&f->p, "llama-a", NULL);
    assert_true(h_wait_until(a_evictable, &f->p, 5000));
    /* B fits only once A is gone; the node offers it with what it must
     * find free after evicting A, so the coordinator still sends it here. */
    chat_ok(&f->p, "llama-b", NULL);
    assert_int_equal(log_count(w, "stopping the engine for llama-a (idle"), 1);
    assert_int_equal(log_count(w, "to make room for llama-b"), 1);
    assert_true(wait_state(&f->p, "llama-a", "stopped", 5000));
    assert_true(h_wait_until(b_evictable, &f->p, 3000));
    chat_ok(&f->p, "llama-a", NULL);
    assert_int_equal(log_count(w, "stopping the engine for llama-b (idle"), 1);
    assert_int_equal(starts_of(w, "llama-a"), 2);
    assert_int_equal(starts_of(w, "llama-b"), 1);
    /* The fake GPU shows one model's need in use, never two. */
    assert_true(h_wait_until(one_model_in_use, &f->p, 5000));
}

/* A driver gives memory back a while after the process ends: the next
 * load waits for it, and only so long. */
static void next_load_waits_for_the_vram(void **state)
{
    fixture *f = *state;
    h_start_coordinator(&f->p, NULL);
    h_proc *w = start_worker(f, "w", "RTX%204090:24:22", 2, ",keep-alive=60", "%20--load-ms%2050",
                             "--fake-gpu-release-ms 1200");
    chat_ok(&f->p, "llama-a", NULL);
    assert_true(h_wait_until(a_evictable, &f->p, 5000));
    int64_t t0 = h_now_ms();
    chat_ok(&f->p, "llama-b", NULL);
    assert_true(h_now_ms() - t0 >= 1100);
    assert_true(h_log_contains(w, "MiB of VRAM free "));
    assert_true(h_log_contains(w, " ms after stopping llama-a"));
}

/* A request that arrives while an engine stops (its keep-alive ran out
 * just then; the engine takes a while to free its memory) waits for that
 * memory and is served, rather than failing for VRAM on its way back.
 * Beats every second, so that the worker's beat, held up by the stop, does
 * not make the node look gone. */
static void start_waits_for_a_stopping_engine(void **state)
{
    fixture *f = *state;
    h_start_coordinator(&f->p, "--heartbeat-ms 1000");
    h_proc *w = start_worker(f, "w", "RTX%204090:24:22", 1, ",keep-alive=60", "%20--load-ms%2050%20--unload-ms%20800",
                             NULL);
    chat_ok(&f->p, "llama-a", ",\"keep_alive\":0");
    assert_true(wait_log_count(w, "stopping the engine for llama-a: idle", 1, 3000));
    int64_t t0 = h_now_ms();
    chat_ok(&f->p, "llama-a", NULL);
    /* Served once the memory was back: by the worker waiting for it, or,
     * if a beat told the pool of the stop first, by the pool waiting. */
    assert_true(h_now_ms() - t0 >= 400);
    assert_int_equal(starts_of(w, "llama-a"), 2);
}

/* The pid of the last engine the worker started for model, from its log ("... for M (pid N)"); 0 if none. */
static int engine_pid(h_proc *w, const char *model)
{
    char text[160], line[4096];
    snprintf(text, sizeof text, " for %s (pid ", model);
    int pid = 0;
    FILE *fp = fopen(w->log, "r");
    if (!fp) return 0;
    while (fgets(line, sizeof line, fp)) {
        const char *at = strstr(line, text);
        if (at) pid = atoi(at + strlen(text));
    }
    fclose(fp);
    return pid;
}

/* What the pool shows of the node while an engine stops. */
typedef struct stop_watch {
    h_pool *p;
    int pid;            /* the stopping engine */
    json_int_t oldest_beat_ms;
    char not_ready[32]; /* a state other than ready seen meanwhile; "" none */
} stop_watch;

/* Done once the engine's process is gone (the worker has reaped it);
 * every look until then records the node's beat age and state. */
static int stop_over(void *arg)
{
    stop_watch *sw = arg;
    int gone = kill(sw->pid, 0) != 0;
    h_resp r;
    h_request(sw->p, "GET", "/v1/nodes", NULL, NULL, &r);
    json_t *node = json_array_get(json_object_get(r.json, "data"), 0);
    json_int_t age = json_integer_value(json_object_get(node, "heartbeat_age_ms"));
    const char *st = json_string_value(json_object_get(node, "state"));
    if ((!st || strcmp(st, "ready")) && !sw->not_ready[0]) snprintf(sw->not_ready, sizeof sw->not_ready, "%s", st ? st : "(none)");
    if (age > sw->oldest_beat_ms) sw->oldest_beat_ms = age;
    h_resp_free(&r);
    return gone;
}

/* An engine slow to stop holds up no heartbeat: it exits on a thread of
 * its own, and the node stays ready meanwhile (at 200 ms beats, three
 * missed ones, 600 ms, would make it offline). */
static void slow_stop_keeps_the_node_beating(void **state)
{
    fixture *f = *state;
    h_start_coordinator(&f->p, NULL);
    h_proc *w = start_worker(f, "w", "RTX%204090:24:22", 1, ",keep-alive=60", "%20--load-ms%2050%20--unload-ms%201500",
                             NULL);
    chat_ok(&f->p, "llama-a", ",\"keep_alive\":0");
    assert_true(wait_log_count(w, "stopping the engine for llama-a: idle", 1, 3000));
    stop_watch sw = {.p = &f->p, .pid = engine_pid(w, "llama-a")};
    assert_true(sw.pid > 0);
    assert_true(h_wait_until(stop_over, &sw, 6000));
    if (sw.not_ready[0]) fail_msg("the node is %s during the stop", sw.not_ready);
    if (sw.oldest_beat_ms >= 600) fail_msg("a beat %lld ms old during the stop", (long long)sw.oldest_beat_ms);
    h_proc engine_log = {0};
    snprintf(engine_log.log, sizeof engine_log.log, "%.400s/logs/llama-a.log", f->data);
    assert_true(h_log_contains(&engine_log, "SIMULATED unload for 1500 ms"));
    assert_true(wait_state(&f->p, "llama-a", "stopped", 3000));
}

/* Has llama-a's engine stop right after this answer (keep_alive 0), and
 * returns its pid once the pool shows it stopped while its process, slow
 * to stop (--unload-ms), still exits. */
static int a_exiting(fixture *f, h_proc *w)
{
    chat_ok(&f->p, "llama-a", ",\"keep_alive\":0");
    assert_true(wait_state(&f->p, "llama-a", "stopped", 3000));
    int pid = engine_pid(w, "llama-a");
    assert_true(pid > 0 && kill(pid, 0) == 0);
    return pid;
}

/* A request for another model, placed while an engine is still exiting
 * (the pool already shows it stopped, its memory still taken), is served
 * once that memory is back, however long past the pool's own short wait
 * for a late beat (2 s here) the exit takes: the node offers the memory on
 * its way back, and the worker waits for it. */
static void memory_on_its_way_back_is_waited_for(void **state)
{
    fixture *f = *state;
    h_start_coordinator(&f->p, NULL);
    h_proc *w = start_worker(f, "w", "RTX%204090:24:22", 2, ",keep-alive=60", "%20--load-ms%2050%20--unload-ms%202600",
                             NULL);
    chat_ok(&f->p, "llama-a", NULL);
    assert_true(h_wait_until(one_model_in_use, &f->p, 5000));
    int pid = a_exiting(f, w);
    assert_true(one_model_in_use(&f->p)); /* the pool sees its memory taken */
    chat_ok(&f->p, "llama-b", NULL);
    assert_int_equal(kill(pid, 0), -1); /* served after the exit */
    assert_int_equal(starts_of(w, "llama-b"), 1);
}

/* Memory on its way back goes before an idle engine: with A exiting and B
 * idle, C waits for A's memory, and B keeps running. */
static void an_exiting_engine_is_waited_for_before_evicting(void **state)
{
    fixture *f = *state;
    h_start_coordinator(&f->p, NULL);
    /* Room for two of the three. */
    h_proc *w = start_worker(f, "w", "A100:40:38", 3, ",keep-alive=60", "%20--load-ms%2050%20--unload-ms%201500",
                             NULL);
    chat_ok(&f->p, "llama-a", NULL);
    chat_ok(&f->p, "llama-b", NULL);
    assert_true(h_wait_until(b_evictable, &f->p, 3000));
    int pid = a_exiting(f, w);
    chat_ok(&f->p, "llama-c", NULL);
    assert_int_equal(kill(pid, 0), -1);
    assert_int_equal(log_count(w, "stopping the engine for llama-b"), 0);
    assert_true(engine_state_is(&f->p, "llama-b", "running"));
    assert_int_equal(starts_of(w, "llama-b"), 1);
}

static void vram_that_stays_taken_fails_the_load(void **state)
{
    fixture *f = *state;
    h_start_coordinator(&f->p, NULL);
    h_proc *w = start_worker(f, "w", "RTX%204090:24:22", 2, ",keep-alive=60", "%20--load-ms%2050",
                             "--fake-gpu-release-ms 60000 --unload-wait-ms 300");
    chat_ok(&f->p, "llama-a", NULL);
    assert_true(h_wait_until(a_evictable, &f->p, 5000));
    h_resp r;
    chat(&f->p, "llama-b", NULL, &r);
    assert_true(r.status >= 500);
    h_resp_free(&r);
    assert_true(h_log_contains(w, "the VRAM did not come back within 300 ms of stopping llama-a"));
    assert_int_equal(starts_of(w, "llama-b"), 0);
}

static void least_recently_used_goes_first(void **state)
{
    fixture *f = *state;
    h_start_coordinator(&f->p, NULL);
    /* Room for two of the three. */
    h_proc *w = start_worker(f, "w", "A100:40:38", 3, ",keep-alive=60", "%20--load-ms%2050", NULL);
    chat_ok(&f->p, "llama-a", NULL);
    chat_ok(&f->p, "llama-b", NULL);
    chat_ok(&f->p, "llama-a", NULL); /* B is now the least recently used */
    assert_int_equal(log_count(w, "stopping the engine"), 0);
    assert_true(h_wait_until(a_evictable, &f->p, 3000));
    assert_true(h_wait_until(b_evictable, &f->p, 3000));
    chat_ok(&f->p, "llama-c", NULL);
    assert_int_equal(log_count(w, "stopping the engine for llama-b (idle"), 1);
    assert_int_equal(log_count(w, "stopping the engine for llama-a"), 0);
    assert_int_equal(starts_of(w, "llama-a"), 1);
}

/* A pinned model is never the one to go. */
static void pinned_model_stays(void **state)
{
    fixture *f = *state;
    h_start_coordinator(&f->p, NULL);
    char loads[600];
    snprintf(loads, sizeof loads, "--load llama-b=%s,ctx=2048,keep-alive=60", f->gguf[1]);
    h_proc *w = start_worker(f, "w", "RTX%204090:24:22", 1, ",keep-alive=0,pin", "%20--load-ms%2050", loads);
    chat_ok(&f->p, "llama-a", ",\"keep_alive\":0");
    assert_true(wait_state(&f->p, "llama-a", "running", 5000));
    h_resp r;
    /* B cannot make room: A is pinned.  The coordinator knows from the beat. */
    assert_int_equal(chat(&f->p, "llama-b", NULL, &r), 503);
    h_resp_free(&r);
    assert_int_equal(log_count(w, "stopping the engine for llama-a"), 0);
    json_t *e = engine_of(&f->p, "llama-a");
    assert_true(json_is_true(json_object_get(e, "pinned")));
    assert_false(json_is_true(json_object_get(e, "evictable")));
    json_decref(e);
}

/* ---- a busy engine is never stopped ---- */

typedef struct streamer { h_pool *p; long status; int done; } streamer;

static void *long_stream(void *arg)
{
    streamer *s = arg;
    h_resp r;
    s->status = h_request(s->p, "POST", "/v1/chat/completions",
                          "{\"model\":\"llama-a\",\"stream\":true,\"max_tokens\":60,"
                          "\"messages\":[{\"role\":\"user\",\"content\":\"tell me a long story\"}]}",
                          NULL, &r) == 0 ? r.status : -1;
    s->done = r.body && strstr(r.body, "[DONE]") != NULL;
    h_resp_free(&r);
    return NULL;
}

static int a_is_busy(void *arg)
{
    json_t *e = engine_of(arg, "llama-a");
    int busy = json_integer_value(json_object_get(e, "inflight")) > 0;
    json_decref(e);
    return busy;
}

static int a_is_idle(void *arg) { return !a_is_busy(arg); }

static void busy_engine_is_not_evicted(void **state)
{
    fixture *f = *state;
    h_start_coordinator(&f->p, NULL);
    /* 20 tokens a second: the 60-token stream takes 3 s. */
    h_proc *w = start_worker(f, "w", "RTX%204090:24:22", 2, ",keep-alive=60", "%20--load-ms%2050%20--tps%2020",
                             NULL);
    chat_ok(&f->p, "llama-a", NULL);
    streamer s = {.p = &f->p};
    pthread_t t;
    pthread_create(&t, NULL, long_stream, &s);
    assert_true(h_wait_until(a_is_busy, &f->p, 3000));
    /* B would need A's memory while A streams: it fails at once, with the
     * reason, rather than waiting for A or cutting A off. */
    int64_t t0 = h_now_ms();
    h_resp r;
    assert_int_equal(chat(&f->p, "llama-b", NULL, &r), 503);
    assert_true(h_now_ms() - t0 < 1500);
    assert_string_equal(json_string_value(json_object_get(json_object_get(r.json, "error"), "code")),
                        "insufficient_vram");
    h_resp_free(&r);
    json_t *e = engine_of(&f->p, "llama-a");
    assert_false(json_is_true(json_object_get(e, "evictable")));
    json_decref(e);
    pthread_join(t, NULL);
    assert_int_equal(s.status, 200);
    assert_true(s.done); /* A's answer was not cut */
    assert_int_equal(log_count(w, "stopping the engine for llama-a"), 0);
    /* Once A is idle, B may take its place. */
    assert_true(h_wait_until(a_is_idle, &f->p, 3000));
    chat_ok(&f->p, "llama-b", NULL);
    assert_int_equal(log_count(w, "stopping the engine for llama-a (idle"), 1);
}

/* ---- failed loads ---- */

static int last_error_known(void *arg)
{
    json_t *e = engine_of(arg, "llama-a");
    int known = json_string_value(json_object_get(e, "last_error")) != NULL;
    json_decref(e);
    return known;
}

static void failed_load_shows_the_engine_log(void **state)
{
    fixture *f = *state;
    h_start_coordinator(&f->p, NULL);
    h_proc *w = start_worker(f, "w", "RTX%204090:24:22", 1, "", "%20--no-such-flag", NULL);
    h_resp r;
    chat(&f->p, "llama-a", NULL, &r);
    assert_true(r.status >= 500);
    h_resp_free(&r);
    assert_true(h_log_contains(w, "could not start the engine for llama-a: the engine for llama-a exited with status 2"));
    assert_true(h_log_contains(w, "unknown option '--no-such-flag'"));
    /* The same reason reaches the coordinator in the node's heartbeat. */
    assert_true(h_wait_until(last_error_known, &f->p, 5000));
    json_t *e = engine_of(&f->p, "llama-a");
    const char *why = json_string_value(json_object_get(e, "last_error"));
    assert_non_null(strstr(why, "unknown option '--no-such-flag'"));
    json_decref(e);
}

static void load_timeout_shows_the_engine_log(void **state)
{
    fixture *f = *state;
    h_start_coordinator(&f->p, NULL);
    h_proc *w = start_worker(f, "w", "RTX%204090:24:22", 1, "", "%20--load-ms%2010000", "--load-timeout-ms 700");
    h_resp r;
    int64_t t0 = h_now_ms();
    chat(&f->p, "llama-a", NULL, &r);
    assert_true(r.status >= 500);
    assert_true(h_now_ms() - t0 < 8000);
    h_resp_free(&r);
    assert_true(h_log_contains(w, "did not answer within 700 ms (--load-timeout-ms); its log"));
    assert_true(h_log_contains(w, "CUDA0 model buffer size"));
    /* Stopped, not left loading. */
    assert_true(wait_state(&f->p, "llama-a", "stopped", 5000));
}

/* ---- measured memory ---- */

static int no_node_ready(void *arg) { return h_node_count(arg, "ready") == 0; }

static void measured_memory_is_used_and_kept(void **state)
{
    fixture *f = *state;
    h_start_coordinator(&f->p, NULL);
    /* This engine takes 80 % of what the planner says. */
    h_proc *w = start_worker(f, "w", "RTX%204090:24:22", 1, ",keep-alive=60", "%20--load-ms%2050%20--mem-factor%200.8",
                             NULL);
    json_t *e = engine_of(&f->p, "llama-a");
    json_int_t estimate = json_integer_value(json_object_get(e, "estimate_bytes"));
    assert_string_equal(json_string_value(json_object_get(e, "need_source")), "estimate");
    json_decref(e);
    chat_ok(&f->p, "llama-a", NULL);
    assert_true(h_log_contains(w, "llama-a measured on the GPU: model "));
    assert_true(wait_state(&f->p, "llama-a", "running", 5000));
    e = engine_of(&f->p, "llama-a");
    json_t *m = json_object_get(e, "measured");
    json_int_t model = json_integer_value(json_object_get(m, "model_bytes"));
    json_int_t kv = json_integer_value(json_object_get(m, "kv_bytes"));
    json_int_t compute = json_integer_value(json_object_get(m, "compute_bytes"));
    json_int_t total = json_integer_value(json_object_get(m, "total_bytes"));
    json_int_t need = json_integer_value(json_object_get(e, "need_bytes"));
    assert_true(model > 0 && kv > 0 && compute > 0);
    assert_int_equal(total, model + kv + compute);
    /* F16 Llama-3-8B weights on the GPU (all but the embeddings), scaled. */
    assert_true(model > (json_int_t)(0.8 * 13.5 * (1LL << 30)) && model < (json_int_t)(0.8 * 15.5 * (1LL << 30)));
    assert_true(llabs(kv - (json_int_t)(0.8 * 256 * (1 << 20))) < 6000);
    assert_string_equal(json_string_value(json_object_get(e, "need_source")), "measured");
    assert_true(need < estimate);
    json_decref(e);
    /* Kept in the data directory for the next worker. */
    char path[600];
    snprintf(path, sizeof path, "%s/measured.json", f->data);
    json_t *file = json_load_file(path, 0, NULL);
    json_t *entry = json_array_get(json_object_get(file, "entries"), 0);
    assert_int_equal(json_integer_value(json_object_get(entry, "model_bytes")), model);
    assert_int_equal(json_integer_value(json_object_get(entry, "ctx")), 2048);
    json_decref(file);

    h_kill(w, SIGTERM);
    assert_int_equal(h_wait_exit(w, 15000), 0);
    assert_true(h_wait_until(no_node_ready, &f->p, 10000));
    w = start_worker(f, "w", "RTX%204090:24:22", 1, ",keep-alive=60", "%20--load-ms%2050%20--mem-factor%200.8",
                     NULL);
    assert_true(h_log_contains(w, "as measured before"));
    e = engine_of(&f->p, "llama-a");
    assert_string_equal(json_string_value(json_object_get(e, "state")), "stopped");
    assert_string_equal(json_string_value(json_object_get(e, "need_source")), "measured");
    assert_int_equal(json_integer_value(json_object_get(e, "need_bytes")), need);
    json_decref(e);

    /* `gpupool plan --measured` sets the estimate and the measurement side by side. */
    char args[1200];
    snprintf(args, sizeof args, "plan %s --ctx 2048 --measured %s", f->gguf[0], path);
    h_proc *plan = h_run_cli(&f->p, "plan", args);
    assert_int_equal(h_wait_exit(plan, 20000), 0);
    assert_true(h_log_contains(plan, "measured"));
    assert_true(h_log_contains(plan, "engine/plan"));
}

/* ---- the real engine, where there is one ---- */

static int on_path(const char *prog)
{
    const char *path = getenv("PATH");
    char *copy = strdup(path ? path : ""), *save = NULL;
    int found = 0;
    for (char *d = strtok_r(copy, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
        char full[1024];
        snprintf(full, sizeof full, "%s/%s", d, prog);
        found = access(full, X_OK) == 0;
    }
    free(copy);
    return found;
}

static void real_llama_server(void **state)
{
    fixture *f = *state;
    const char *gguf = getenv("GPUPOOL_TEST_GGUF");
    if (!on_path("llama-server") || !gguf || !*gguf) {
        fprintf(stderr, "skipped: needs llama-server on the PATH and GPUPOOL_TEST_GGUF naming a model file\n");
        skip();
    }
    h_start_coordinator(&f->p, NULL);
    char args[2000];
    snprintf(args, sizeof args,
             "--fake-gpu Big:1024:1000 --data %s --load real=%s,ctx=2048,keep-alive=60 --load-timeout-ms 300000",
             f->data, gguf);
    h_proc *w = h_start_worker(&f->p, "w", NULL, args);
    h_resp r;
    chat(&f->p, "real", NULL, &r);
    if (r.status != 200) fail_msg("real: %ld %s", r.status, r.body ? r.body : "");
    h_resp_free(&r);
    assert_int_equal(starts_of(w, "real"), 1);
    assert_true(wait_state(&f->p, "real", "running", 5000));
    json_t *e = engine_of(&f->p, "real");
    json_t *m = json_object_get(e, "measured");
    /* A CPU build puts every buffer in host memory; a GPU build on the GPU. */
    assert_non_null(m);
    assert_true(json_integer_value(json_object_get(m, "total_bytes")) > 0 ||
                json_integer_value(json_object_get(m, "host_bytes")) > 0);
    json_decref(e);
}

int main(void)
{
    h_apply_filter();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(concurrent_first_requests_load_once, setup, teardown),
        cmocka_unit_test_setup_teardown(idle_unload_follows_keep_alive, setup, teardown),
        cmocka_unit_test_setup_teardown(b_evicts_a_then_a_evicts_b, setup, teardown),
        cmocka_unit_test_setup_teardown(next_load_waits_for_the_vram, setup, teardown),
        cmocka_unit_test_setup_teardown(start_waits_for_a_stopping_engine, setup, teardown),
        cmocka_unit_test_setup_teardown(slow_stop_keeps_the_node_beating, setup, teardown),
        cmocka_unit_test_setup_teardown(memory_on_its_way_back_is_waited_for, setup, teardown),
        cmocka_unit_test_setup_teardown(an_exiting_engine_is_waited_for_before_evicting, setup, teardown),
        cmocka_unit_test_setup_teardown(vram_that_stays_taken_fails_the_load, setup, teardown),
        cmocka_unit_test_setup_teardown(least_recently_used_goes_first, setup, teardown),
        cmocka_unit_test_setup_teardown(pinned_model_stays, setup, teardown),
        cmocka_unit_test_setup_teardown(busy_engine_is_not_evicted, setup, teardown),
        cmocka_unit_test_setup_teardown(failed_load_shows_the_engine_log, setup, teardown),
        cmocka_unit_test_setup_teardown(load_timeout_shows_the_engine_log, setup, teardown),
        cmocka_unit_test_setup_teardown(measured_memory_is_used_and_kept, setup, teardown),
        cmocka_unit_test_setup_teardown(real_llama_server, setup, teardown),
    };
    return cmocka_run_group_tests_name("e2e_models", tests, NULL, NULL);
}
