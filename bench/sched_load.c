/* sched_load: the open-loop task load behind bench/sched.sh.
 *
 * It builds one workload from a seed (the same seed gives the same arrival
 * times, models, priorities, prompt and output lengths), submits it to a
 * coordinator as async tasks (POST /v1/tasks) at those times, whatever the
 * pool does meanwhile, and watches the tasks finish.  Latency is the time
 * from the start of a task's POST to the poll that first shows it succeeded,
 * on CLOCK_MONOTONIC.
 *
 * Arrivals: a Poisson process at --rate tasks/s, plus bursts.  Burst starts
 * are themselves Poisson (mean gap --burst-every s); during a burst
 * (--burst-len s) the rate is --burst-x times the base rate.
 *
 * Watching: one thread polls GET /v1/tasks?status=succeeded&limit=L, newest
 * first, with L just large enough to reach back to the oldest unfinished
 * task (tasks are created in submission order, give or take the submitters
 * running at once), so one request per round sees every completion.  Every
 * tenth round it also lists failed tasks.  The interval between rounds is
 * the polling resolution; it is measured and printed, together with how
 * much the client-side latency exceeds the coordinator's own
 * finished_at - created_at.
 *
 * Node kill (--kill-at): from that time on, once at least --kill-min tasks
 * run on --kill-node (5 s later at the latest), it notes them, sends
 * --kill-signal to --kill-pids (and with --kill-children to their child
 * processes, the engines a worker started), and at the end
 * reports, per such task, how long after the kill it finished, against
 * 3 heartbeat intervals plus the run time of the attempt that produced its
 * result.  Tasks the coordinator sends to the dead node after the kill
 * (before it notices) count too, from the time they were sent.
 *
 * Output: a human summary, one "SUMMARY k=v ..." line for the script, and
 * with --csv one row per task.
 *
 * Build: cc -std=c17 -O2 bench/sched_load.c -o bench/out/sched_load \
 *          $(pkg-config --cflags --libs libcurl jansson) -lm -pthread */
#define _GNU_SOURCE 1
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* ---- options ---- */

static const char *url = "http://127.0.0.1:8420";
static const char *label = "run";
static const char *csv_path;
static const char *model_name[2] = {"small", "large"};
static uint64_t seed = 1;
static double duration = 40, rate = 3, burst_every = 12, burst_len = 4, burst_x = 3;
static double large_frac = 0.2, high_frac = 0.3, drain_s = 30;
static int prio_high = 8, prio_low = 2, poll_ms = 25, submitters = 4, describe_only;
static double kill_at = -1;
static const char *kill_pids, *kill_node, *kill_record;
static int kill_signal = SIGKILL, kill_children, kill_min = 1, hb_ms = 2000;

/* ---- clocks ---- */

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_until_ns(int64_t t)
{
    struct timespec ts = {.tv_sec = t / 1000000000, .tv_nsec = t % 1000000000};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {}
}

/* ---- the workload ---- */

static uint64_t rng_state;
static uint64_t rng_next(void) /* splitmix64 */
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static double rng_unit(void) { return (double)(rng_next() >> 11) / 9007199254740992.0; } /* [0,1) */
static double rng_exp(double r) { return -log(1.0 - rng_unit()) / r; }

static const int TOKENS[] = {16, 32, 64, 128, 256};
static const double TOKENS_P[] = {0.15, 0.20, 0.25, 0.25, 0.15};
static const int PROMPT[] = {64, 512, 2048, 8192}; /* characters */
static const double PROMPT_P[] = {0.30, 0.30, 0.25, 0.15};

static int pick(const int *v, const double *p, int n)
{
    double u = rng_unit(), acc = 0;
    for (int i = 0; i < n - 1; i++)
        if (u < (acc += p[i])) return v[i];
    return v[n - 1];
}

enum { T_PENDING, T_SUBMITTING, T_SUBMITTED, T_REFUSED, T_SUCCEEDED, T_FAILED };

typedef struct task {
    double at; /* seconds after the start */
    int model, high, max_tokens, prompt_len;
    char *body;
    int state;
    int http_status; /* of the POST */
    int64_t t_submit, t_ack, t_done; /* mono ns */
    char id[64], node[64], error[64];
    int attempts, victim;
    int64_t queued_ms, run_ms, created_at, finished_at;
} task;

static task *tasks;
static int ntasks;
static double burst_time; /* seconds inside bursts, within the window */
static int nbursts;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static char *make_body(const task *t)
{
    static const char *words[] = {"quarterly", "report", "summary", "customer", "meeting", "notes", "budget",
                                  "project", "timeline", "review", "action", "items", "the", "and", "for"};
    char *prompt = malloc((size_t)t->prompt_len + 64);
    int n = snprintf(prompt, 64, "Summarise these notes: ");
    for (int w = 0; n < t->prompt_len; w++) n += sprintf(prompt + n, "%s ", words[(w * 7 + t->prompt_len) % 15]);
    prompt[t->prompt_len] = 0;
    json_t *j = json_pack("{s:s, s:s, s:i, s:{s:[{s:s, s:s}], s:i}}", "type", "chat", "model", model_name[t->model],
                          "priority", t->high ? prio_high : prio_low, "input", "messages", "role", "user",
                          "content", prompt, "max_tokens", t->max_tokens);
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    free(prompt);
    return s;
}

static void build_workload(void)
{
    /* Separate streams (reseeded between the steps), so that changing the
     * rate leaves the burst windows, and the arrival times, where they were. */
    rng_state = seed * 4 + 1;
    size_t cap = 1024, n = 0;
    double *at = malloc(cap * sizeof *at);
#define ADD(x) do { if (n == cap) at = realloc(at, (cap *= 2) * sizeof *at); at[n++] = (x); } while (0)
    double bstart[256], bend[256];
    if (burst_x > 1 && burst_every > 0 && burst_len > 0) {
        for (double b = rng_exp(1.0 / burst_every); b < duration && nbursts < 256;
             b += burst_len + rng_exp(1.0 / burst_every)) {
            bstart[nbursts] = b;
            bend[nbursts] = fmin(b + burst_len, duration);
            burst_time += bend[nbursts] - b;
            nbursts++;
        }
    }
    rng_state = seed * 4 + 2;
    for (double t = rng_exp(rate); t < duration; t += rng_exp(rate)) ADD(t);
    rng_state = seed * 4 + 3;
    for (int k = 0; k < nbursts; k++)
        for (double t = bstart[k] + rng_exp(rate * (burst_x - 1)); t < bend[k]; t += rng_exp(rate * (burst_x - 1)))
            ADD(t);
    rng_state = seed * 4 + 4;
#undef ADD
    qsort(at, n, sizeof *at, cmp_double);
    ntasks = (int)n;
    tasks = calloc(n ? n : 1, sizeof *tasks);
    for (size_t i = 0; i < n; i++) {
        task *t = &tasks[i];
        t->at = at[i];
        t->max_tokens = pick(TOKENS, TOKENS_P, 5);
        t->prompt_len = pick(PROMPT, PROMPT_P, 4);
    }
    /* Exactly round(f * n) large and high-priority tasks, at random places,
     * so that a seed does not change the mix the pool has to serve. */
    size_t *perm = malloc((n ? n : 1) * sizeof *perm);
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < n; i++) perm[i] = i;
        for (size_t i = n; i > 1; i--) {
            size_t j = rng_next() % i, tmp = perm[i - 1];
            perm[i - 1] = perm[j];
            perm[j] = tmp;
        }
        size_t k = (size_t)llround((pass ? high_frac : large_frac) * (double)n);
        for (size_t i = 0; i < k && i < n; i++) {
            if (pass) tasks[perm[i]].high = 1;
            else tasks[perm[i]].model = 1;
        }
    }
    free(perm);
    free(at);
}

/* ---- HTTP ---- */

typedef struct buf {
    char *p;
    size_t len, cap;
} buf;

static size_t on_data(char *p, size_t sz, size_t nm, void *ctx)
{
    buf *b = ctx;
    size_t n = sz * nm;
    if (b->len + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 65536;
        while (nc < b->len + n + 1) nc *= 2;
        char *q = realloc(b->p, nc);
        if (!q) return 0;
        b->p = q;
        b->cap = nc;
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
    b->p[b->len] = 0;
    return n;
}

/* One request on a reused handle (keep-alive).  Returns the HTTP status, 0
 * when none came; the body is in *b. */
static long http(CURL *c, const char *method, const char *path, const char *body, buf *b)
{
    char u[512];
    snprintf(u, sizeof u, "%s%s", url, path);
    b->len = 0;
    if (b->p) b->p[0] = 0;
    curl_easy_setopt(c, CURLOPT_URL, u);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, b);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 15000L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 3000L);
    struct curl_slist *h = NULL;
    if (body) {
        h = curl_slist_append(h, "Content-Type: application/json");
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    } else {
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, NULL);
        curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
    }
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, strcmp(method, "GET") && strcmp(method, "POST") ? method : NULL);
    long status = 0;
    int64_t began = mono_ns();
    if (curl_easy_perform(c) == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    int64_t took = mono_ns() - began;
    if (took > 200000000) /* worth knowing when reading the polling figures */
        fprintf(stderr, "sched_load: %s %s took %.0f ms (HTTP %ld)\n", method, path, took / 1e6, status);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, NULL);
    curl_slist_free_all(h);
    return status;
}

static const char *jstr(json_t *o, const char *key, const char *dflt)
{
    const char *v = json_string_value(json_object_get(o, key));
    return v ? v : dflt;
}

/* ---- shared state ---- */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int next_task;
static int64_t t0; /* mono ns of time 0 of the schedule */
static int64_t max_lag_ns;
static int nfinal; /* refused + succeeded + failed */

/* id -> task index, open addressing; filled by the submitters. */
static int *slot_of;
static size_t nslots;
static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    while (*s) h = (h ^ (unsigned char)*s++) * 1099511628211ULL;
    return h;
}
static void id_put(const char *id, int idx) /* caller holds mu */
{
    size_t k = hash_str(id) & (nslots - 1);
    while (slot_of[k] >= 0) k = (k + 1) & (nslots - 1);
    slot_of[k] = idx;
}
static int id_get(const char *id) /* caller holds mu */
{
    for (size_t k = hash_str(id) & (nslots - 1); slot_of[k] >= 0; k = (k + 1) & (nslots - 1))
        if (!strcmp(tasks[slot_of[k]].id, id)) return slot_of[k];
    return -1;
}

static void *submitter(void *arg)
{
    (void)arg;
    CURL *c = curl_easy_init();
    buf b = {0};
    for (;;) {
        int i = atomic_fetch_add(&next_task, 1);
        if (i >= ntasks) break;
        task *t = &tasks[i];
        int64_t due = t0 + (int64_t)(t->at * 1e9);
        sleep_until_ns(due);
        pthread_mutex_lock(&mu);
        t->state = T_SUBMITTING;
        t->t_submit = mono_ns();
        if (t->t_submit - due > max_lag_ns) max_lag_ns = t->t_submit - due;
        pthread_mutex_unlock(&mu);
        long st = http(c, "POST", "/v1/tasks", t->body, &b);
        int64_t ack = mono_ns();
        json_t *j = st == 202 ? json_loads(b.p, 0, NULL) : NULL;
        const char *id = json_string_value(json_object_get(j, "id"));
        pthread_mutex_lock(&mu);
        t->t_ack = ack;
        t->http_status = (int)st;
        if (id) {
            snprintf(t->id, sizeof t->id, "%s", id);
            id_put(t->id, i);
            t->state = T_SUBMITTED;
        } else {
            t->state = T_REFUSED;
            nfinal++;
            fprintf(stderr, "sched_load: task %d refused: HTTP %ld %.200s\n", i, st, b.p ? b.p : "");
        }
        pthread_mutex_unlock(&mu);
        json_decref(j);
    }
    free(b.p);
    curl_easy_cleanup(c);
    return NULL;
}

/* Takes what a task listing says about finished tasks.  Returns how many
 * tasks it finished. */
static int take_listing(const char *body, int64_t seen, int want_state)
{
    json_t *j = json_loads(body ? body : "", 0, NULL);
    json_t *arr = json_object_get(j, "data");
    if (!json_is_array(arr)) { /* one task, from GET /v1/tasks/{id} */
        arr = json_array();
        if (json_is_object(j)) json_array_append(arr, j);
    } else {
        json_incref(arr);
    }
    json_t *o;
    size_t k;
    int done = 0;
    pthread_mutex_lock(&mu);
    json_array_foreach(arr, k, o) {
        const char *id = json_string_value(json_object_get(o, "id"));
        const char *status = json_string_value(json_object_get(o, "status"));
        if (!id || !status) continue;
        int st = !strcmp(status, "succeeded") ? T_SUCCEEDED
                 : (!strcmp(status, "failed") || !strcmp(status, "canceled")) ? T_FAILED : 0;
        if (!st || (want_state && st != want_state)) continue;
        int i = id_get(id);
        if (i < 0 || tasks[i].state != T_SUBMITTED) continue;
        task *t = &tasks[i];
        t->state = st;
        t->t_done = seen;
        const char *node = json_string_value(json_object_get(o, "node"));
        snprintf(t->node, sizeof t->node, "%s", node ? node : "-");
        t->attempts = (int)json_integer_value(json_object_get(o, "attempts"));
        t->queued_ms = json_integer_value(json_object_get(o, "queued_ms"));
        t->run_ms = json_integer_value(json_object_get(o, "run_ms"));
        t->created_at = json_integer_value(json_object_get(o, "created_at"));
        t->finished_at = json_integer_value(json_object_get(o, "finished_at"));
        const char *ec = json_string_value(json_object_get(json_object_get(o, "error"), "code"));
        snprintf(t->error, sizeof t->error, "%s", ec ? ec : "");
        nfinal++;
        done++;
    }
    pthread_mutex_unlock(&mu);
    json_decref(arr);
    json_decref(j);
    return done;
}

/* ---- the node kill ---- */

static int64_t kill_mono, kill_wall;
static int nvictims;

/* Appends the direct children of pid to out (a comma list): the engines a
 * worker started. */
static void children_of(int pid, char *out, size_t len)
{
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        int child = atoi(e->d_name);
        if (child <= 0) continue;
        char path[300], stat[512];
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        FILE *s = fopen(path, "r");
        if (!s) continue;
        size_t n = fread(stat, 1, sizeof stat - 1, s);
        fclose(s);
        stat[n] = 0;
        char *rp = strrchr(stat, ')'); /* "pid (comm) state ppid ..." */
        int ppid = 0;
        char state;
        if (rp && sscanf(rp + 1, " %c %d", &state, &ppid) == 2 && ppid == pid)
            snprintf(out + strlen(out), len - strlen(out), ",%d", child);
    }
    if (d) closedir(d);
}

/* From --kill-at on, kills the node as soon as at least --kill-min tasks run
 * on it (or 5 s later regardless).  Returns whether it did. */
static int do_kill(CURL *c, buf *b, int64_t now)
{
    long st = http(c, "GET", "/v1/tasks?status=running&limit=1000", NULL, b);
    json_t *j = st == 200 ? json_loads(b->p, 0, NULL) : NULL;
    json_t *o;
    size_t k;
    int n = 0;
    json_array_foreach(json_object_get(j, "data"), k, o) n += !strcmp(jstr(o, "node", ""), kill_node);
    if (n < kill_min && now < t0 + (int64_t)((kill_at + 5) * 1e9)) {
        json_decref(j);
        return 0;
    }
    pthread_mutex_lock(&mu);
    json_array_foreach(json_object_get(j, "data"), k, o) {
        const char *node = json_string_value(json_object_get(o, "node"));
        int i = id_get(jstr(o, "id", ""));
        if (i < 0 || !node || strcmp(node, kill_node)) continue;
        tasks[i].victim = 1;
        nvictims++;
    }
    pthread_mutex_unlock(&mu);
    json_decref(j);
    char list[1024], all[2048];
    snprintf(list, sizeof list, "%s", kill_pids);
    snprintf(all, sizeof all, "%s", kill_pids);
    if (kill_children) {
        char *save = NULL;
        for (char *p = strtok_r(list, ",", &save); p; p = strtok_r(NULL, ",", &save))
            children_of(atoi(p), all, sizeof all);
    }
    if (kill_record) {
        FILE *f = fopen(kill_record, "w");
        if (f) { fprintf(f, "%s\n", all); fclose(f); }
    }
    snprintf(list, sizeof list, "%s", all);
    kill_wall = wall_ms();
    kill_mono = mono_ns();
    char *save = NULL;
    for (char *p = strtok_r(list, ",", &save); p; p = strtok_r(NULL, ",", &save))
        if (kill((pid_t)atoi(p), kill_signal)) fprintf(stderr, "sched_load: kill %s: %s\n", p, strerror(errno));
    printf("signal %d to %s (pids %s) at %.1f s, %d task(s) running there\n", kill_signal, kill_node, all,
           (kill_mono - t0) / 1e9, nvictims);
    fflush(stdout);
    return 1;
}

/* The index of the task's first attempt on the killed node that was still
 * open at the kill (running then, or sent there afterwards), or -1. */
static int victim_attempt(json_t *task_json)
{
    json_t *a;
    size_t k;
    json_array_foreach(json_object_get(task_json, "attempt_history"), k, a) {
        int64_t en = json_integer_value(json_object_get(a, "ended_at"));
        if (!strcmp(jstr(a, "node", ""), kill_node) && (!en || en >= kill_wall)) return (int)k;
    }
    return -1;
}

/* ---- the poller ---- */

static int npolls;
static double *poll_gaps; /* ms between consecutive listing answers */
static int npoll_gaps, cap_poll_gaps;
static double poll_req_ms_sum;
static int64_t t_end, max_gap_ns, max_gap_at;

static void *poller(void *arg)
{
    (void)arg;
    CURL *c = curl_easy_init();
    buf b = {0};
    int64_t last_seen = 0, deadline = t0 + (int64_t)((duration + drain_s) * 1e9);
    size_t rot = 0;
    int64_t next_kill_try = 0;
    for (int round = 0;; round++) {
        int64_t start = mono_ns();
        if (kill_at >= 0 && !kill_mono && start >= t0 + (int64_t)(kill_at * 1e9) && start >= next_kill_try)
            if (!do_kill(c, &b, start)) next_kill_try = start + 100000000;
        /* How far back the listing must reach: to the oldest unfinished task. */
        pthread_mutex_lock(&mu);
        int started = atomic_load(&next_task);
        if (started > ntasks) started = ntasks;
        int oldest = -1, all_done = nfinal == ntasks;
        for (int i = 0; i < started; i++)
            if (tasks[i].state == T_SUBMITTING || tasks[i].state == T_SUBMITTED) { oldest = i; break; }
        pthread_mutex_unlock(&mu);
        if (all_done || start > deadline) break;
        if (oldest < 0) last_seen = 0; /* nothing to watch: no gap in the polling */
        if (oldest >= 0) {
            int want = started - oldest + submitters + 1;
            char path[96];
            snprintf(path, sizeof path, "/v1/tasks?status=succeeded&limit=%d", want > 1000 ? 1000 : want);
            long st = http(c, "GET", path, NULL, &b);
            int64_t seen = mono_ns();
            if (st == 200) take_listing(b.p, seen, T_SUCCEEDED);
            npolls++;
            poll_req_ms_sum += (seen - start) / 1e6;
            if (last_seen) {
                if (npoll_gaps == cap_poll_gaps)
                    poll_gaps = realloc(poll_gaps, (cap_poll_gaps = cap_poll_gaps ? cap_poll_gaps * 2 : 4096) * sizeof *poll_gaps);
                poll_gaps[npoll_gaps++] = (seen - last_seen) / 1e6;
                if (seen - last_seen > max_gap_ns) { max_gap_ns = seen - last_seen; max_gap_at = seen; }
            }
            last_seen = seen;
            if (want > 1000) {
                /* The oldest ones lie beyond one listing: ask a few of them one by one. */
                int beyond = started - 1000 + submitters + 1, asked = 0;
                for (int tries = 0; tries < beyond - oldest && asked < 8; tries++) {
                    int i = oldest + (int)(rot++ % (size_t)(beyond - oldest));
                    char id[64] = "";
                    pthread_mutex_lock(&mu);
                    if (tasks[i].state == T_SUBMITTED) snprintf(id, sizeof id, "%s", tasks[i].id);
                    pthread_mutex_unlock(&mu);
                    if (!id[0]) continue;
                    asked++;
                    snprintf(path, sizeof path, "/v1/tasks/%s", id);
                    if (http(c, "GET", path, NULL, &b) == 200) take_listing(b.p, mono_ns(), 0);
                }
            }
            if (round % 10 == 0 && http(c, "GET", "/v1/tasks?status=failed&limit=1000", NULL, &b) == 200)
                take_listing(b.p, mono_ns(), T_FAILED);
        }
        int64_t next = start + (int64_t)poll_ms * 1000000;
        if (mono_ns() < next) sleep_until_ns(next);
    }
    t_end = mono_ns();
    free(b.p);
    curl_easy_cleanup(c);
    return NULL;
}

/* ---- statistics ---- */

typedef struct sample {
    double ms;
    int censored;
} sample;

static int cmp_sample(const void *a, const void *b)
{
    double x = ((const sample *)a)->ms, y = ((const sample *)b)->ms;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile.  Unfinished tasks count with the time they had
 * waited so far, a lower bound; when such a bound could sit at or below the
 * percentile, the percentile is itself only a lower bound: *lb is set. */
static double pct(sample *s, int n, double p, int *lb)
{
    *lb = 0;
    if (n == 0) return NAN;
    qsort(s, (size_t)n, sizeof *s, cmp_sample);
    int r = (int)ceil(p / 100.0 * n);
    if (r < 1) r = 1;
    double v = s[r - 1].ms;
    for (int i = 0; i < n; i++)
        if (s[i].censored && s[i].ms <= v) *lb = 1;
    return v;
}

static double dpct(double *v, int n, double p)
{
    if (n == 0) return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    int r = (int)ceil(p / 100.0 * n);
    return v[(r < 1 ? 1 : r) - 1];
}

/* Latency samples of the succeeded (and, censored, unfinished) tasks of a
 * class: 0 low, 1 high, 2 all. */
static int collect(int cls, sample *out)
{
    int n = 0;
    for (int i = 0; i < ntasks; i++) {
        task *t = &tasks[i];
        if (cls < 2 && t->high != cls) continue;
        if (t->state == T_SUCCEEDED) out[n++] = (sample){(t->t_done - t->t_submit) / 1e6, 0};
        else if (t->state == T_SUBMITTED) out[n++] = (sample){(t_end - t->t_submit) / 1e6, 1};
    }
    return n;
}

static void fmt_ms(char *out, size_t len, double v, int lb)
{
    if (isnan(v)) snprintf(out, len, "-");
    else snprintf(out, len, "%s%.0f", lb ? ">=" : "", v);
}

static void usage(void)
{
    fprintf(stderr,
            "usage: sched_load [--url URL] [--label NAME] [--seed N] [--duration S] [--rate R]\n"
            "  [--burst-every S] [--burst-len S] [--burst-x X] [--large-frac F] [--high-frac F]\n"
            "  [--models SMALL,LARGE] [--prio-high N] [--prio-low N] [--drain S] [--poll-ms N]\n"
            "  [--submitters N] [--csv FILE] [--describe]\n"
            "  [--kill-at S --kill-node ID --kill-pids P1,P2 [--kill-children] [--kill-signal N] [--kill-min N]\n"
            "   [--kill-record FILE] [--hb-ms N]]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    static char models_buf[256];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--describe")) { describe_only = 1; continue; }
        if (!strcmp(a, "--kill-children")) { kill_children = 1; continue; }
        if (i + 1 >= argc) usage();
        const char *v = argv[++i];
        if (!strcmp(a, "--url")) url = v;
        else if (!strcmp(a, "--label")) label = v;
        else if (!strcmp(a, "--csv")) csv_path = v;
        else if (!strcmp(a, "--seed")) seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--duration")) duration = atof(v);
        else if (!strcmp(a, "--rate")) rate = atof(v);
        else if (!strcmp(a, "--burst-every")) burst_every = atof(v);
        else if (!strcmp(a, "--burst-len")) burst_len = atof(v);
        else if (!strcmp(a, "--burst-x")) burst_x = atof(v);
        else if (!strcmp(a, "--large-frac")) large_frac = atof(v);
        else if (!strcmp(a, "--high-frac")) high_frac = atof(v);
        else if (!strcmp(a, "--prio-high")) prio_high = atoi(v);
        else if (!strcmp(a, "--prio-low")) prio_low = atoi(v);
        else if (!strcmp(a, "--drain")) drain_s = atof(v);
        else if (!strcmp(a, "--poll-ms")) poll_ms = atoi(v);
        else if (!strcmp(a, "--submitters")) submitters = atoi(v);
        else if (!strcmp(a, "--kill-at")) kill_at = atof(v);
        else if (!strcmp(a, "--kill-node")) kill_node = v;
        else if (!strcmp(a, "--kill-pids")) kill_pids = v;
        else if (!strcmp(a, "--kill-signal")) kill_signal = atoi(v);
        else if (!strcmp(a, "--kill-record")) kill_record = v;
        else if (!strcmp(a, "--kill-min")) kill_min = atoi(v);
        else if (!strcmp(a, "--hb-ms")) hb_ms = atoi(v);
        else if (!strcmp(a, "--models")) {
            snprintf(models_buf, sizeof models_buf, "%s", v);
            char *comma = strchr(models_buf, ',');
            if (!comma) usage();
            *comma = 0;
            model_name[0] = models_buf;
            model_name[1] = comma + 1;
        } else usage();
    }
    if (rate <= 0 || duration <= 0 || submitters < 1 || poll_ms < 1) usage();
    if (kill_at >= 0 && (!kill_node || !kill_pids)) usage();
    build_workload();

    int nlarge = 0, nhigh = 0;
    double tokens = 0;
    for (int i = 0; i < ntasks; i++) {
        nlarge += tasks[i].model;
        nhigh += tasks[i].high;
        tokens += tasks[i].max_tokens;
    }
    printf("workload: seed %llu, %d tasks in %.0f s (%.2f/s; base %.2f/s, %d bursts at %.1fx covering %.0f s), "
           "%d %s + %d %s, %d high (priority %d) + %d low (priority %d), mean max_tokens %.0f\n",
           (unsigned long long)seed, ntasks, duration, ntasks / duration, rate, nbursts, burst_x, burst_time,
           ntasks - nlarge, model_name[0], nlarge, model_name[1], nhigh, prio_high, ntasks - nhigh, prio_low,
           ntasks ? tokens / ntasks : 0);
    fflush(stdout);
    if (describe_only) return 0;

    curl_global_init(CURL_GLOBAL_DEFAULT);
    for (int i = 0; i < ntasks; i++) tasks[i].body = make_body(&tasks[i]);
    for (nslots = 16; nslots < (size_t)ntasks * 2 + 16; nslots *= 2) {}
    slot_of = malloc(nslots * sizeof *slot_of);
    for (size_t k = 0; k < nslots; k++) slot_of[k] = -1;

    t0 = mono_ns() + 200000000; /* 200 ms for the threads to get going */
    pthread_t sub[64], pol;
    if (submitters > 64) submitters = 64;
    for (int i = 0; i < submitters; i++) pthread_create(&sub[i], NULL, submitter, NULL);
    pthread_create(&pol, NULL, poller, NULL);
    for (int i = 0; i < submitters; i++) pthread_join(sub[i], NULL);
    pthread_join(pol, NULL);

    /* Node names, for the tasks-per-node figures. */
    CURL *c = curl_easy_init();
    buf b = {0};
    json_t *nodes = http(c, "GET", "/v1/nodes", NULL, &b) == 200 ? json_loads(b.p, 0, NULL) : NULL;

    int nok = 0, nfail = 0, nref = 0, nunf = 0;
    int64_t first = 0, last = 0;
    for (int i = 0; i < ntasks; i++) {
        task *t = &tasks[i];
        nok += t->state == T_SUCCEEDED;
        nfail += t->state == T_FAILED;
        nref += t->state == T_REFUSED;
        nunf += t->state == T_SUBMITTED || t->state == T_SUBMITTING;
        if (t->t_submit && (!first || t->t_submit < first)) first = t->t_submit;
        if (t->state == T_SUCCEEDED && t->t_done > last) last = t->t_done;
    }
    double span = last > first ? (last - first) / 1e9 : NAN;

    sample *s = malloc(sizeof *s * (size_t)(ntasks + 1));
    char pv[3][3][32];
    double pnum[3][3];
    int plb[3][3];
    static const double P[] = {50, 95, 99};
    for (int cls = 0; cls < 3; cls++) {
        int n = collect(cls, s);
        for (int k = 0; k < 3; k++) {
            pnum[cls][k] = pct(s, n, P[k], &plb[cls][k]);
            fmt_ms(pv[cls][k], sizeof pv[cls][k], pnum[cls][k], plb[cls][k]);
        }
    }

    /* How much the client sees on top of the coordinator's own times. */
    double *extra = malloc(sizeof *extra * (size_t)(ntasks + 1)), *ack = malloc(sizeof *ack * (size_t)(ntasks + 1));
    int nextra = 0, nack = 0;
    for (int i = 0; i < ntasks; i++) {
        task *t = &tasks[i];
        if (t->t_ack) ack[nack++] = (t->t_ack - t->t_submit) / 1e6;
        if (t->state == T_SUCCEEDED && t->finished_at && t->created_at)
            extra[nextra++] = (t->t_done - t->t_submit) / 1e6 - (double)(t->finished_at - t->created_at);
    }
    double gap_mean = 0;
    for (int i = 0; i < npoll_gaps; i++) gap_mean += poll_gaps[i];
    gap_mean = npoll_gaps ? gap_mean / npoll_gaps : NAN;

    /* Tasks per node (by name), in order of first appearance. */
    char names[16][64];
    int counts[16] = {0}, nn = 0;
    for (int i = 0; i < ntasks; i++) {
        if (tasks[i].state != T_SUCCEEDED) continue;
        const char *name = tasks[i].node;
        size_t k;
        json_t *o;
        json_array_foreach(json_object_get(nodes, "data"), k, o)
            if (!strcmp(jstr(o, "id", ""), tasks[i].node))
                name = jstr(o, "name", name);
        int j;
        for (j = 0; j < nn; j++)
            if (!strcmp(names[j], name)) break;
        if (j == nn && nn < 16) snprintf(names[nn++], sizeof names[0], "%s", name);
        if (j < 16) counts[j]++;
    }
    char per_node[512] = "";
    for (int j = 0; j < nn; j++)
        snprintf(per_node + strlen(per_node), sizeof per_node - strlen(per_node), "%s%s:%d", j ? "," : "",
                 names[j], counts[j]);
    int retried = 0;
    for (int i = 0; i < ntasks; i++) retried += tasks[i].state == T_SUCCEEDED && tasks[i].attempts > 1;

    printf("%s: %d succeeded, %d failed, %d refused at submission, %d unfinished after the %.0f s drain; "
           "throughput %.2f tasks/s over %.1f s\n",
           label, nok, nfail, nref, nunf, drain_s, nok / span, span);
    printf("  latency ms      p50      p95      p99\n");
    static const char *cls_name[] = {"low", "high", "all"};
    for (int cls = 1; cls >= 0; cls--)
        printf("  %-12s %8s %8s %8s\n", cls_name[cls], pv[cls][0], pv[cls][1], pv[cls][2]);
    printf("  %-12s %8s %8s %8s\n", "all", pv[2][0], pv[2][1], pv[2][2]);
    printf("  tasks per node: %s; succeeded after more than one attempt (retries, hedges): %d\n", per_node, retried);
    printf("  polling: %d listing rounds, every %.1f ms on average (p99 %.1f ms, max %.1f ms), each answered in "
           "%.2f ms (longest gap ended %.1f s into the run); client latency minus the coordinator's finished_at-created_at: median %.1f ms, p95 %.1f ms; "
           "POST answered in median %.1f ms, p99 %.1f ms; latest submission %.1f ms behind schedule\n",
           npolls, gap_mean, dpct(poll_gaps, npoll_gaps, 99), dpct(poll_gaps, npoll_gaps, 100),
           npolls ? poll_req_ms_sum / npolls : NAN, (max_gap_at - t0) / 1e9, dpct(extra, nextra, 50), dpct(extra, nextra, 95),
           dpct(ack, nack, 50), dpct(ack, nack, 99), max_lag_ns / 1e6);

    /* The node kill: when did the tasks that were running on it finish? */
    int kill_ok = 1, kill_n = 0, kill_after = 0;
    double worst_slack = -1e18;
    if (kill_mono) {
        /* Any task with an attempt on the node still open at the kill counts:
         * those dispatched between the listing and the signal, and those the
         * coordinator sent to the dead node before it noticed. */
        for (int i = 0; i < ntasks; i++) {
            task *t = &tasks[i];
            if (t->victim || !t->id[0] || (t->t_done && t->t_done < kill_mono)) continue;
            char path[128];
            snprintf(path, sizeof path, "/v1/tasks/%s", t->id);
            json_t *j = http(c, "GET", path, NULL, &b) == 200 ? json_loads(b.p, 0, NULL) : NULL;
            if (victim_attempt(j) >= 0) t->victim = 2;
            json_decref(j);
        }
        printf("  tasks on %s at the kill (at: 'kill'), or sent there after it (at: ms after the kill). In ms from\n"
               "  then: their attempt there ended (detect), the attempt that produced the result began (rerun;\n"
               "  negative: a hedge begun before) and ran (run), the task finished (done); bound = 3 x %d ms + run:\n",
               kill_node, hb_ms);
        printf("  %-30s %6s %8s %10s %10s %10s %10s %10s  %s\n", "task", "at", "attempts", "detect_ms", "rerun_ms",
               "run_ms", "done_ms", "bound_ms", "verdict");
        for (int pass = 1; pass <= 2; pass++)
        for (int i = 0; i < ntasks; i++) {
            task *t = &tasks[i];
            if (t->victim != pass) continue;
            kill_n++;
            char path[128];
            snprintf(path, sizeof path, "/v1/tasks/%s", t->id);
            json_t *j = http(c, "GET", path, NULL, &b) == 200 ? json_loads(b.p, 0, NULL) : NULL;
            json_t *hist = json_object_get(j, "attempt_history"), *a, *win = NULL;
            size_t k;
            int va = victim_attempt(j);
            json_array_foreach(hist, k, a) if (!strcmp(jstr(a, "outcome", ""), "succeeded")) win = a;
            json_t *a0 = json_array_get(hist, va < 0 ? 0 : (size_t)va);
            const char *status = jstr(j, "status", "?");
            int64_t a0_start = json_integer_value(json_object_get(a0, "started_at"));
            int64_t ref = a0_start > kill_wall ? a0_start : kill_wall;
            int64_t fin = json_integer_value(json_object_get(j, "finished_at"));
            int64_t a0_end = json_integer_value(json_object_get(a0, "ended_at"));
            int64_t w_start = json_integer_value(json_object_get(win, "started_at"));
            int64_t w_end = json_integer_value(json_object_get(win, "ended_at"));
            if (!w_end) w_end = fin;
            double detect = a0_end ? (double)(a0_end - ref) : NAN;
            double rerun = w_start ? (double)(w_start - ref) : NAN;
            double done = fin ? (double)(fin - ref) : NAN;
            double run = w_start && w_end ? (double)(w_end - w_start) : NAN;
            double bound = 3.0 * hb_ms + run;
            int ok = !strcmp(status, "succeeded") && !isnan(done) && done <= bound;
            if (!ok) kill_ok = 0;
            if (!isnan(done) && done - bound > worst_slack) worst_slack = done - bound;
            char at[16];
            kill_after += ref > kill_wall;
            if (ref == kill_wall) snprintf(at, sizeof at, "kill");
            else snprintf(at, sizeof at, "+%lld", (long long)(ref - kill_wall));
            printf("  %-30s %6s %8d %10.0f %10.0f %10.0f %10.0f %10.0f  %s %s\n", t->id, at,
                   (int)json_array_size(hist), detect, rerun, run, done, bound, ok ? "ok" : "OVER",
                   strcmp(status, "succeeded") ? status : "");
            json_decref(j);
        }
        if (!kill_n) kill_ok = 0;
    }

    printf("SUMMARY label=%s n=%d ok=%d failed=%d refused=%d unfinished=%d thr=%.3f "
           "hi_p50=%s hi_p95=%s hi_p99=%s lo_p50=%s lo_p95=%s lo_p99=%s all_p50=%s all_p95=%s all_p99=%s "
           "nodes=%s retried=%d poll_ms=%.1f poll_p99_ms=%.1f extra_p50_ms=%.1f",
           label, ntasks, nok, nfail, nref, nunf, nok / span, pv[1][0], pv[1][1], pv[1][2], pv[0][0], pv[0][1],
           pv[0][2], pv[2][0], pv[2][1], pv[2][2], per_node[0] ? per_node : "-", retried, gap_mean,
           dpct(poll_gaps, npoll_gaps, 99), dpct(extra, nextra, 50));
    if (kill_mono)
        printf(" victims=%d sent_after=%d kill_ok=%d worst_slack_ms=%+.0f", kill_n, kill_after, kill_ok,
               worst_slack > -1e18 ? worst_slack : NAN); /* nan: none of them finished */
    printf("\n");

    if (csv_path) {
        FILE *f = fopen(csv_path, "w");
        if (f) {
            fprintf(f, "index,arrival_s,model,priority,max_tokens,prompt_chars,state,latency_ms,server_latency_ms,"
                       "queued_ms,run_ms,attempts,node,error,submit_lag_ms,victim\n");
            static const char *SN[] = {"pending", "submitting", "unfinished", "refused", "succeeded", "failed"};
            for (int i = 0; i < ntasks; i++) {
                task *t = &tasks[i];
                double lat = t->state == T_SUCCEEDED ? (t->t_done - t->t_submit) / 1e6 : NAN;
                double slat = t->finished_at ? (double)(t->finished_at - t->created_at) : NAN;
                fprintf(f, "%d,%.3f,%s,%d,%d,%d,%s,%.1f,%.0f,%lld,%lld,%d,%s,%s,%.1f,%d\n", i, t->at,
                        model_name[t->model], t->high ? prio_high : prio_low, t->max_tokens, t->prompt_len,
                        SN[t->state], lat, slat, (long long)t->queued_ms, (long long)t->run_ms, t->attempts,
                        t->node[0] ? t->node : "-", t->error[0] ? t->error : "-",
                        t->t_submit ? (t->t_submit - t0) / 1e6 - t->at * 1e3 : NAN, t->victim);
            }
            fclose(f);
        }
    }
    json_decref(nodes);
    free(b.p);
    curl_easy_cleanup(c);
    curl_global_cleanup();
    return nref + nfail + nunf > 0 ? 3 : 0;
}
