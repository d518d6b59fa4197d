/* e2e harness: see harness.h. */
#include "harness.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "http/client.h"
#include "util/opts.h"

int64_t h_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waiting on a condition: poll() with no descriptors is a bounded pause
 * between checks of the condition, never a fixed sleep standing in for one. */
static void pause_briefly(int ms) { poll(NULL, 0, ms); }

int h_wait_until(int (*cond)(void *), void *ctx, int64_t timeout_ms)
{
    int64_t deadline = h_now_ms() + timeout_ms;
    for (;;) {
        if (cond(ctx)) return 1;
        if (h_now_ms() >= deadline) return 0;
        pause_briefly(20);
    }
}

static const char *bin(void)
{
    const char *b = getenv("GPUPOOL_BIN");
    return b && *b ? b : "build-asan/gpupool";
}

void h_apply_filter(void)
{
    const char *f = getenv("GPUPOOL_TEST_FILTER");
    if (f && *f) cmocka_set_test_filter(f);
}

void h_pool_init(h_pool *p, const char *test_name)
{
    static int once;
    if (!once) { http_client_global_init(); signal(SIGPIPE, SIG_IGN); once = 1; }
    memset(p, 0, sizeof *p);
    snprintf(p->dir, sizeof p->dir, "/tmp/gpupool-e2e-%s-XXXXXX", test_name);
    if (!mkdtemp(p->dir)) fail_msg("mkdtemp: %s", strerror(errno));
}

static void rm_rf(const char *path)
{
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char sub[1024];
            snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
            struct stat st;
            if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode)) rm_rf(sub);
            else unlink(sub);
        }
        closedir(d);
    }
    rmdir(path);
}

static void dump_log(const h_proc *proc)
{
    FILE *f = fopen(proc->log, "r");
    if (!f) return;
    fprintf(stderr, "---- last lines of %s log ----\n", proc->name);
    char lines[40][512];
    int n = 0;
    while (fgets(lines[n % 40], sizeof lines[0], f)) n++;
    for (int i = n > 40 ? n - 40 : 0; i < n; i++) fputs(lines[i % 40], stderr);
    fclose(f);
}

void h_dump_logs(const h_pool *p)
{
    for (int i = 0; i < p->nprocs; i++) dump_log(&p->procs[i]);
}

h_pool *h_pool_new(const char *test_name)
{
    h_pool *p = calloc(1, sizeof *p);
    if (!p) abort();
    h_pool_init(p, test_name);
    return p;
}

int h_pool_teardown(void **state)
{
    int problems = h_pool_cleanup(*state);
    free(*state);
    return problems;
}

int h_pool_cleanup(h_pool *p)
{
    int problems = 0;
    for (int i = 0; i < p->nprocs; i++) {
        h_proc *proc = &p->procs[i];
        if (proc->pid > 0) {
            h_kill(proc, SIGTERM);
            int st = h_wait_exit(proc, 15000);
            if (st < 0) {
                fprintf(stderr, "%s did not stop on SIGTERM\n", proc->name);
                h_kill(proc, SIGKILL);
                h_wait_exit(proc, 5000);
                problems++;
            } else if (st != 0) {
                fprintf(stderr, "%s exited with status %d on SIGTERM\n", proc->name, st);
                problems++;
            }
        }
        /* Sanitizer reports from any process fail the test, killed ones too. */
        if (h_log_contains(proc, "ERROR: AddressSanitizer") || h_log_contains(proc, "ERROR: LeakSanitizer") ||
            h_log_contains(proc, "runtime error:")) {
            fprintf(stderr, "%s reported a sanitizer error\n", proc->name);
            problems++;
        }
    }
    if (problems || getenv("GPUPOOL_E2E_LOGS")) h_dump_logs(p);
    if (getenv("GPUPOOL_KEEP_TEST")) fprintf(stderr, "kept %s\n", p->dir);
    else rm_rf(p->dir);
    return problems;
}

static h_proc *spawn(h_pool *p, const char *name, const char *args, const char *const *env, int port_file)
{
    if (p->nprocs >= H_MAX_PROCS) fail_msg("too many processes");
    h_proc *proc = &p->procs[p->nprocs++];
    memset(proc, 0, sizeof *proc);
    snprintf(proc->name, sizeof proc->name, "%s", name);
    char dir[sizeof p->dir];
    memcpy(dir, p->dir, sizeof dir);
    snprintf(proc->log, sizeof proc->log, "%s/%s-%d.log", dir, name, p->nprocs);
    snprintf(proc->portfile, sizeof proc->portfile, "%s/%s-%d.port", dir, name, p->nprocs);
    char *argv[96];
    int n = 0;
    argv[n++] = (char *)bin();
    char *copy = strdup(args);
    char *save = NULL;
    for (char *t = strtok_r(copy, " ", &save); t && n < 90; t = strtok_r(NULL, " ", &save)) {
        /* "%20" stands for a space inside one argument. */
        for (char *q = strstr(t, "%20"); q; q = strstr(q, "%20")) { *q = ' '; memmove(q + 1, q + 3, strlen(q + 3) + 1); }
        argv[n++] = t;
    }
    if (port_file) {
        argv[n++] = "--port-file";
        argv[n++] = proc->portfile;
    }
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(proc->log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd >= 0) { dup2(fd, 1); dup2(fd, 2); close(fd); }
        setpgid(0, 0);
        for (const char *const *e = env; e && *e; e++) putenv((char *)*e);
        execv(argv[0], argv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    free(copy);
    proc->pid = pid;
    return proc;
}

h_proc *h_spawn(h_pool *p, const char *name, const char *args, const char *const *env)
{
    return spawn(p, name, args, env, 1);
}

h_proc *h_run_cli(h_pool *p, const char *name, const char *args)
{
    return spawn(p, name, args, NULL, 0);
}

void h_kill(h_proc *proc, int sig)
{
    if (proc->pid > 0) kill(proc->pid, sig);
}

int h_wait_exit(h_proc *proc, int64_t timeout_ms)
{
    if (proc->pid <= 0) return 0;
    int64_t deadline = h_now_ms() + timeout_ms;
    for (;;) {
        int st;
        pid_t r = waitpid(proc->pid, &st, WNOHANG);
        if (r == proc->pid) {
            proc->pid = 0;
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
        if (h_now_ms() >= deadline) return -1;
        pause_briefly(10);
    }
}

static int port_ready(void *ctx)
{
    h_proc *proc = ctx;
    char *s = read_small_file(proc->portfile, 32);
    if (s && *s) proc->port = atoi(s);
    free(s);
    return proc->port > 0 || waitpid(proc->pid, NULL, WNOHANG) == proc->pid;
}

int h_wait_port(h_proc *proc, int64_t timeout_ms)
{
    h_wait_until(port_ready, proc, timeout_ms);
    if (proc->port <= 0) { dump_log(proc); fail_msg("%s did not start listening", proc->name); }
    return proc->port;
}

const char *h_header(const h_resp *r, const char *name, char *out, size_t outlen)
{
    out[0] = 0;
    size_t nl = strlen(name);
    for (const char *line = r->headers; *line;) {
        const char *end = strstr(line, "\r\n");
        size_t len = end ? (size_t)(end - line) : strlen(line);
        if (len > nl && !strncasecmp(line, name, nl) && line[nl] == ':') {
            const char *v = line + nl + 1;
            while (*v == ' ') v++;
            snprintf(out, outlen, "%.*s", (int)(len - (size_t)(v - line)), v);
            return out;
        }
        line = end ? end + 2 : line + len;
    }
    return NULL;
}

int h_log_contains(h_proc *proc, const char *text)
{
    char *s = read_small_file(proc->log, 1 << 20);
    int found = s && strstr(s, text);
    free(s);
    return found;
}

pid_t h_child_pid(pid_t parent, const char *arg)
{
    DIR *d = opendir("/proc");
    if (!d) return -1;
    pid_t found = -1;
    struct dirent *e;
    while (found < 0 && (e = readdir(d))) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 0) continue;
        char path[64];
        snprintf(path, sizeof path, "/proc/%ld/stat", pid);
        char *st = read_small_file(path, 4096);
        /* "pid (comm) state ppid ...": comm may hold spaces, so parse after
         * its closing parenthesis. */
        const char *close = st ? strrchr(st, ')') : NULL;
        char state = 0;
        long ppid = -1;
        if (close && sscanf(close + 1, " %c %ld", &state, &ppid) == 2 && ppid == (long)parent && state != 'Z') {
            snprintf(path, sizeof path, "/proc/%ld/cmdline", pid);
            FILE *f = fopen(path, "r");
            char cmd[4096];
            size_t n = f ? fread(cmd, 1, sizeof cmd - 1, f) : 0;
            if (f) fclose(f);
            cmd[n] = 0;
            for (size_t i = 0; i < n; i += strlen(cmd + i) + 1)
                if (!strcmp(cmd + i, arg)) { found = (pid_t)pid; break; }
        }
        free(st);
    }
    closedir(d);
    return found;
}

h_proc *h_start_coordinator(h_pool *p, const char *extra_args)
{
    if (extra_args) snprintf(p->coord_args, sizeof p->coord_args, "%s", extra_args);
    if (!p->join_token[0]) snprintf(p->join_token, sizeof p->join_token, "test-join-token-0123456789");
    char args[2048];
    snprintf(args, sizeof args, "serve --listen 127.0.0.1:0 --data %s/data --join-token %s --heartbeat-ms 200 %s",
             p->dir, p->join_token, p->coord_args);
    p->coord = h_spawn(p, "coordinator", args, NULL);
    h_wait_port(p->coord, 20000);
    snprintf(p->base, sizeof p->base, "http://127.0.0.1:%d", p->coord->port);
    return p->coord;
}

h_proc *h_restart_coordinator(h_pool *p)
{
    char args[2048];
    snprintf(args, sizeof args, "serve --listen 127.0.0.1:%d --data %s/data --join-token %s --heartbeat-ms 200 %s",
             p->coord->port, p->dir, p->join_token, p->coord_args);
    p->coord = h_spawn(p, "coordinator", args, NULL);
    h_wait_port(p->coord, 20000);
    return p->coord;
}

typedef struct nodes_ctx { h_pool *p; int want; } nodes_ctx;
static int enough_ready(void *ctx)
{
    nodes_ctx *c = ctx;
    return h_node_count(c->p, "ready") >= c->want;
}

h_proc *h_start_worker(h_pool *p, const char *machine_id, const char *sim_args, const char *extra_args)
{
    int before = h_node_count(p, "ready");
    char args[2048], sim[512] = "";
    if (sim_args) snprintf(sim, sizeof sim, "--sim-args %s", sim_args);
    int own_engine = extra_args && (strstr(extra_args, "--engine") || strstr(extra_args, "--load"));
    snprintf(args, sizeof args,
             "worker --coordinator %s --join-token %s --listen 127.0.0.1:0 %s --heartbeat-ms 200 "
             "%s --name %s %s %s",
             p->base, p->join_token, own_engine ? "" : "--engine sim",
             extra_args && strstr(extra_args, "--fake-gpu") ? "" : "--fake-gpu RTX%203060:12:10", machine_id, sim,
             extra_args ? extra_args : "");
    char *env = malloc(128);
    snprintf(env, 128, "GPUPOOL_MACHINE_ID=%s", machine_id);
    const char *envs[] = {env, NULL};
    h_proc *proc = h_spawn(p, machine_id, args, envs);
    free(env);
    h_wait_port(proc, 20000);
    nodes_ctx c = {p, before + 1};
    if (!h_wait_until(enough_ready, &c, 20000)) { dump_log(proc); fail_msg("worker %s never became ready", machine_id); }
    return proc;
}

int h_request(h_pool *p, const char *method, const char *path, const char *body, const char *const *headers,
              h_resp *out)
{
    memset(out, 0, sizeof *out);
    char url[1024];
    if (!strncmp(path, "http", 4)) snprintf(url, sizeof url, "%s", path);
    else snprintf(url, sizeof url, "%s%s", p->base, path);
    http_call_opts o = {.method = method, .url = url, .body = body, .body_len = body ? strlen(body) : 0,
                        .headers = headers, .timeout_ms = 60000};
    if (!headers && p->api_key[0]) o.bearer = p->api_key;
    /* A Content-Type among the headers replaces the client's JSON default
     * rather than going out as a second one. */
    for (const char *const *h = headers; h && *h; h++)
        if (!strncasecmp(*h, "Content-Type:", 13)) o.content_type = *h + 13 + strspn(*h + 13, " ");
    http_result res;
    http_call(&o, &res);
    out->status = res.status;
    snprintf(out->headers, sizeof out->headers, "%s", res.headers ? res.headers : "");
    free(res.headers);
    res.headers = NULL;
    out->body = res.body;
    out->len = res.body_len;
    res.body = NULL;
    if (out->body && out->len) out->json = json_loadb(out->body, out->len, 0, NULL);
    return out->status ? 0 : -1;
}

void h_resp_free(h_resp *r)
{
    free(r->body);
    json_decref(r->json);
    memset(r, 0, sizeof *r);
}

int h_raw_connect_send(int port, const void *data, size_t len)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) { close(fd); return -1; }
    size_t off = 0;
    while (off < len) {
        ssize_t w = send(fd, (const char *)data + off, len - off, MSG_NOSIGNAL);
        if (w <= 0) break;
        off += (size_t)w;
    }
    return fd;
}

size_t h_raw_read(int fd, char *out, size_t max, int64_t timeout_ms)
{
    size_t n = 0;
    int64_t deadline = h_now_ms() + timeout_ms;
    while (n + 1 < max) {
        int64_t left = deadline - h_now_ms();
        if (left <= 0) break;
        struct pollfd pfd = {fd, POLLIN, 0};
        if (poll(&pfd, 1, (int)left) <= 0) break;
        ssize_t r = recv(fd, out + n, max - 1 - n, 0);
        if (r <= 0) break;
        n += (size_t)r;
    }
    out[n] = 0;
    return n;
}

int h_node_count(h_pool *p, const char *state)
{
    h_resp r;
    if (h_request(p, "GET", "/v1/nodes", NULL, NULL, &r)) return -1;
    int n = 0;
    size_t i;
    json_t *nd;
    json_array_foreach(json_object_get(r.json, "data"), i, nd) {
        if (!state || !strcmp(json_string_value(json_object_get(nd, "state")), state)) n++;
    }
    h_resp_free(&r);
    return n;
}

const char *h_node_field(h_pool *p, const char *key, const char *value, const char *field, char *out, size_t len)
{
    h_resp r;
    h_request(p, "GET", "/v1/nodes", NULL, NULL, &r);
    size_t i;
    json_t *n;
    out[0] = 0;
    json_array_foreach(json_object_get(r.json, "data"), i, n) {
        const char *v = json_string_value(json_object_get(n, key));
        if (v && !strcmp(v, value)) {
            snprintf(out, len, "%s", json_string_value(json_object_get(n, field)) ? json_string_value(json_object_get(n, field)) : "");
            break;
        }
    }
    h_resp_free(&r);
    return out;
}

char *h_submit_task(h_pool *p, const char *body, const char *idem_key, long *status)
{
    char hdr[300];
    const char *headers[] = {hdr, NULL};
    snprintf(hdr, sizeof hdr, "Idempotency-Key: %s", idem_key ? idem_key : "");
    h_resp r;
    h_request(p, "POST", "/v1/tasks", body, idem_key ? headers : NULL, &r);
    if (status) *status = r.status;
    const char *id = json_string_value(json_object_get(r.json, "id"));
    char *out = id ? strdup(id) : NULL;
    h_resp_free(&r);
    return out;
}

const char *h_task_status(h_pool *p, const char *id, char *out, size_t outlen)
{
    char path[256];
    snprintf(path, sizeof path, "/v1/tasks/%s", id);
    h_resp r;
    out[0] = 0;
    if (h_request(p, "GET", path, NULL, NULL, &r) == 0 && r.status == 200)
        snprintf(out, outlen, "%s", json_string_value(json_object_get(r.json, "status")));
    h_resp_free(&r);
    return out;
}

typedef struct task_ctx { h_pool *p; const char *id; } task_ctx;
static int task_final(void *ctx)
{
    task_ctx *c = ctx;
    char st[32];
    h_task_status(c->p, c->id, st, sizeof st);
    return !strcmp(st, "succeeded") || !strcmp(st, "failed") || !strcmp(st, "canceled");
}

json_t *h_wait_task_final(h_pool *p, const char *id, int64_t timeout_ms)
{
    task_ctx c = {p, id};
    if (!h_wait_until(task_final, &c, timeout_ms)) return NULL;
    char path[256];
    snprintf(path, sizeof path, "/v1/tasks/%s", id);
    h_resp r;
    h_request(p, "GET", path, NULL, NULL, &r);
    json_t *j = json_incref(r.json);
    h_resp_free(&r);
    return j;
}
