/* worker/managed: see managed.h. */
#include "worker/managed.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "http/client.h"
#include "plan/ggml_types.h"
#include "plan/plan.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/log.h"
#include "util/opts.h"
#include "worker/filehash.h"
#include "worker/residency.h"

#define LOAD_USAGE MANAGED_LOAD_USAGE

/* A file name from a model name: what is not [A-Za-z0-9._-] becomes '_'. */
static void safe_name(const char *name, char *out, size_t len)
{
    size_t i = 0;
    for (; name[i] && i + 1 < len; i++) {
        char c = name[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                 c == '_' || c == '-';
        out[i] = ok && !(i == 0 && c == '.') ? c : '_';
    }
    out[i] = 0;
}

static int parse_option(managed_spec *m, char *kv, char *err, size_t errlen)
{
    char *v = strchr(kv, '=');
    if (v) *v++ = 0;
    if (!strcmp(kv, "pin")) {
        if (v && strcmp(v, "1") && strcmp(v, "true") && strcmp(v, "0") && strcmp(v, "false"))
            return err_out(err, errlen, "--load %s: pin takes no value (or 1, true, 0, false)", m->name);
        m->pinned = !v || !strcmp(v, "1") || !strcmp(v, "true");
        return 0;
    }
    if (!v || !*v) return err_out(err, errlen, "--load %s: '%s' needs a value (%s)", m->name, kv, LOAD_USAGE);
    if (!strcmp(kv, "sha256")) {
        if (!filehash_valid(v)) return err_out(err, errlen, "--load %s: sha256 wants 64 hex digits", m->name);
        for (int i = 0; i < 65; i++) m->pinned_sha256[i] = (char)(v[i] >= 'A' && v[i] <= 'F' ? v[i] + 32 : v[i]);
    } else if (!strcmp(kv, "ctx") || !strcmp(kv, "parallel")) {
        char *end;
        long n = strtol(v, &end, 10);
        if (*end || n <= 0 || n > (1 << 24)) return err_out(err, errlen, "--load %s: bad %s '%s'", m->name, kv, v);
        if (kv[0] == 'c') m->ctx = (int)n;
        else m->parallel = (int)n;
    } else if (!strcmp(kv, "keep-alive")) {
        if (res_parse_duration(v, &m->keep_alive_ms))
            return err_out(err, errlen, "--load %s: keep-alive '%s' is not seconds or a duration like 10m, 1h or -1",
                           m->name, v);
    } else if (!strcmp(kv, "ctk") || !strcmp(kv, "ctv")) {
        if (ggml_type_from_name(v) < 0 || strlen(v) >= sizeof m->ctk)
            return err_out(err, errlen, "--load %s: unknown cache type '%s' (f16, bf16, q8_0, q4_0, ...)", m->name, v);
        snprintf(kv[2] == 'k' ? m->ctk : m->ctv, sizeof m->ctk, "%s", v);
    } else if (!strcmp(kv, "fa")) {
        if (strcmp(v, "on") && strcmp(v, "off")) return err_out(err, errlen, "--load %s: fa is on or off", m->name);
        m->flash_attn = !strcmp(v, "on");
    } else {
        return err_out(err, errlen, "--load %s: unknown option '%s' (%s)", m->name, kv, LOAD_USAGE);
    }
    return 0;
}

/* The planner's figure for this model, file and settings. */
static int estimate(managed_spec *m, char *err, size_t errlen)
{
    char perr[256];
    plan_model *pm = plan_model_open(m->gguf, perr, sizeof perr);
    if (!pm) return err_out(err, errlen, "--load %s: %s: %s", m->name, m->gguf, perr);
    plan_settings s;
    plan_settings_init(&s);
    s.ctx = (uint32_t)m->ctx;
    s.parallel = (uint32_t)m->parallel;
    s.type_k = (uint32_t)ggml_type_from_name(m->ctk);
    s.type_v = (uint32_t)ggml_type_from_name(m->ctv);
    s.flash_attn = m->flash_attn != 0;
    s.margin_pct = m->defaults.margin_pct;
    s.margin_bytes = m->defaults.margin_bytes;
    s.overhead = m->defaults.overhead_bytes;
    plan_result r;
    int rc = plan_compute(pm, &s, &r, perr, sizeof perr);
    plan_model_free(pm);
    if (rc < 0) return err_out(err, errlen, "--load %s: %s", m->name, perr);
    m->estimate_bytes = r.gpu[0].total;
    return 0;
}

int managed_parse(const char *spec, const managed_defaults *d, engine *e, char *err, size_t errlen)
{
    memset(e, 0, sizeof *e);
    managed_spec *m = calloc(1, sizeof *m);
    if (!m) return err_out(err, errlen, "out of memory");
    m->defaults = *d;
    m->ctx = 4096;
    m->parallel = 1;
    m->keep_alive_ms = 300000;
    snprintf(m->ctk, sizeof m->ctk, "f16");
    snprintf(m->ctv, sizeof m->ctv, "f16");
    char copy[1024];
    snprintf(copy, sizeof copy, "%s", spec);
    char *eq = strchr(copy, '=');
    if (!eq || eq == copy || eq - copy >= (long)sizeof m->name) { err_out(err, errlen, "%s", LOAD_USAGE); goto bad; }
    *eq = 0;
    snprintf(m->name, sizeof m->name, "%.127s", copy);
    char *save = NULL;
    char *path = strtok_r(eq + 1, ",", &save);
    if (!path) { err_out(err, errlen, "--load %s: no GGUF file given", m->name); goto bad; }
    snprintf(m->gguf, sizeof m->gguf, "%.511s", path);
    for (char *kv = strtok_r(NULL, ",", &save); kv; kv = strtok_r(NULL, ",", &save))
        if (parse_option(m, kv, err, errlen)) goto bad;
    char file[160];
    safe_name(m->name, file, sizeof file);
    snprintf(m->log_path, sizeof m->log_path, "%s/logs/%s.log", d->data_dir, file);
    snprintf(m->measured_path, sizeof m->measured_path, "%s/measured.json", d->data_dir);
    /* A missing file with a known digest comes from a peer; it is sized
     * when it is here. */
    if (m->pinned_sha256[0] && access(m->gguf, F_OK) != 0 && errno == ENOENT) m->fetching = 1;
    else if (managed_size(m, err, errlen)) goto bad;
    m->keep_alive_cur_ms = m->keep_alive_ms;
    e->kind = ENGINE_MANAGED;
    e->default_slots = m->parallel;
    e->managed = m;
    snprintf(e->error, sizeof e->error, "stopped");
    return 0;
bad:
    free(m);
    return -1;
}

int managed_size(managed_spec *m, char *err, size_t errlen)
{
    if (estimate(m, err, errlen)) return -1;
    m->need_bytes = m->estimate_bytes;
    measured_key k;
    char why[300];
    if (measured_key_for(m->gguf, m->ctx, m->parallel, m->ctk, m->ctv, m->flash_attn, &k, why, sizeof why) == 0 &&
        measured_lookup(m->measured_path, &k, &m->meas, why, sizeof why) == 1) {
        m->measured = 1;
        m->need_bytes = managed_measured_need(&m->defaults, &m->meas);
    }
    return 0;
}

int managed_argv(const char *tmpl, const managed_spec *m, int port, const char *self, char *out, size_t outlen,
                 char **argv, int maxargs)
{
    char num[5][32];
    snprintf(num[0], sizeof num[0], "%d", port);
    snprintf(num[1], sizeof num[1], "%d", m->ctx);
    snprintf(num[2], sizeof num[2], "%d", m->ctx * m->parallel);
    snprintf(num[3], sizeof num[3], "%d", m->parallel);
    const struct { const char *key, *value; } subst[] = {
        {"{model}", m->gguf}, {"{name}", m->name}, {"{port}", num[0]}, {"{ctx}", num[1]},
        {"{ctx_total}", num[2]}, {"{parallel}", num[3]}, {"{self}", self}, {"{cache_type_k}", m->ctk},
        {"{cache_type_v}", m->ctv}, {"{flash_attn}", m->flash_attn ? "on" : "off"},
    };
    size_t o = 0;
    for (const char *p = tmpl; *p;) {
        size_t i, n = sizeof subst / sizeof subst[0];
        for (i = 0; i < n; i++)
            if (!strncmp(p, subst[i].key, strlen(subst[i].key))) break;
        const char *piece = i < n ? subst[i].value : p;
        size_t len = i < n ? strlen(piece) : 1;
        if (o + len + 1 >= outlen) return -1;
        memcpy(out + o, piece, len);
        o += len;
        p += i < n ? strlen(subst[i].key) : 1;
    }
    out[o] = 0;
    int argc = 0;
    char *save = NULL;
    for (char *t = strtok_r(out, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
        if (argc >= maxargs - 1) return -1; /* never run a command cut short */
        argv[argc++] = t;
    }
    argv[argc] = NULL;
    return argc ? argc : -1;
}

/* A free loopback port, for engines that need one named (llama-server). */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0) close(fd);
    return port;
}

static int answers(const char *url)
{
    char u[320];
    snprintf(u, sizeof u, "%s/v1/models", url);
    http_call_opts o = {.url = u, .timeout_ms = 1000, .connect_timeout_ms = 500};
    http_result r;
    int ok = http_call(&o, &r) == 0 && r.status == 200;
    http_result_free(&r);
    return ok;
}

/* The log of this start, the previous one kept beside it.  -1 when it
 * cannot be made: the engine then starts with the worker's own output. */
static int open_log(const managed_spec *m, const char *cmdline)
{
    char dir[700], old[720];
    snprintf(dir, sizeof dir, "%s", m->log_path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    if (slash && make_dirs(dir)) {
        log_warn("cannot make %s for the engine logs: %s", dir, strerror(errno));
        return -1;
    }
    snprintf(old, sizeof old, "%s.1", m->log_path);
    rename(m->log_path, old);
    int fd = open(m->log_path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0) {
        log_warn("cannot write the engine log %s: %s", m->log_path, strerror(errno));
        return -1;
    }
    time_t t = time(NULL);
    struct tm tm;
    char when[32];
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&t, &tm));
    dprintf(fd, "gpupool worker %s: starting the engine for %s: %s\n", when, m->name, cmdline);
    return fd;
}

/* Up to the last `max` bytes of a file (the caller frees), "" when unreadable. */
static char *read_tail(const char *path, size_t max, size_t *len)
{
    char *out = calloc(1, max + 1);
    *len = 0;
    int fd = out ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    if (fd < 0) return out;
    struct stat st;
    off_t from = fstat(fd, &st) == 0 && (size_t)st.st_size > max ? st.st_size - (off_t)max : 0;
    ssize_t n = pread(fd, out, max, from);
    close(fd);
    if (n > 0) *len = (size_t)n;
    out[*len] = 0;
    return out;
}

void managed_log_tail(const char *text, int lines, char *out, size_t outlen)
{
    if (!outlen) return;
    out[0] = 0;
    const char *starts[16];
    size_t lens[16];
    int n = 0;
    if (lines > 16) lines = 16;
    const char *end = text + strlen(text);
    while (end > text && n < lines) {
        const char *e = end;
        while (e > text && (e[-1] == '\n' || e[-1] == '\r' || e[-1] == ' ')) e--;
        const char *b = e;
        while (b > text && b[-1] != '\n') b--;
        if (e > b) {
            starts[n] = b;
            lens[n++] = (size_t)(e - b);
        }
        end = b;
    }
    size_t o = 0;
    for (int i = n - 1; i >= 0 && o + 1 < outlen; i--) {
        int w = snprintf(out + o, outlen - o, "%s%.*s", o ? " | " : "", (int)lens[i], starts[i]);
        if (w < 0) break;
        o += (size_t)w;
        if (o >= outlen) o = outlen - 1;
    }
}

/* "... ; its log (PATH) ends: a | b | c" */
static void explain(char *err, size_t errlen, const char *path)
{
    size_t len;
    char *tail = read_tail(path, 16384, &len);
    char last[400];
    managed_log_tail(tail ? tail : "", 4, last, sizeof last);
    free(tail);
    size_t have = strlen(err);
    if (last[0] && have + 1 < errlen) snprintf(err + have, errlen - have, "; its log (%s) ends: %s", path, last);
}

/* The buffer sizes in the log.  Once the engine answers llama.cpp may still
 * be writing the last of them from its logging thread, so a log that shows
 * the model's buffers but not yet the context's is read again a few times;
 * one with no buffer line at all is an engine that prints none. */
static void read_sizes(const char *path, memlog_figures *mem, int *have_mem)
{
    for (int i = 0; i < 10; i++) {
        size_t len;
        char *text = read_tail(path, 4 << 20, &len);
        *have_mem = text ? memlog_parse(text, len, mem) : 0;
        free(text);
        if (*have_mem || mem->lines == 0) return;
        sleep_ms(50);
    }
}

int managed_start(engine *e, const char *tmpl, int64_t timeout_ms, memlog_figures *mem, int *have_mem, char *err,
                  size_t errlen)
{
    managed_spec *m = e->managed;
    memset(mem, 0, sizeof *mem);
    *have_mem = 0;
    int port = free_port();
    if (port < 0) return err_out(err, errlen, "no free port for the engine");
    char line[2048], shown[2048], *argv[64];
    if (managed_argv(tmpl, m, port, "/proc/self/exe", line, sizeof line, argv, 64) < 0)
        return err_out(err, errlen, "the engine command is empty or too long");
    size_t o = 0;
    for (int i = 0; argv[i] && o + 1 < sizeof shown; i++)
        o += (size_t)snprintf(shown + o, sizeof shown - o, "%s%s", i ? " " : "", argv[i]);
    int logfd = open_log(m, shown);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        if (logfd >= 0) close(logfd);
        return err_out(err, errlen, "fork: %s", strerror(errno));
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM); /* never outlive the worker */
        if (getppid() != parent) _exit(1);
        if (logfd >= 0) {
            dup2(logfd, STDOUT_FILENO);
            dup2(logfd, STDERR_FILENO);
        }
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execvp(argv[0], argv);
        dprintf(STDERR_FILENO, "gpupool worker: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    if (logfd >= 0) close(logfd);
    e->child = pid;
    snprintf(e->url, sizeof e->url, "http://127.0.0.1:%d", port);
    log_info("starting %s for %s (pid %d), log %s: %s", argv[0], m->name, (int)pid, m->log_path, shown);
    int64_t deadline = mono_ms() + timeout_ms;
    while (mono_ms() < deadline) {
        if (answers(e->url)) {
            read_sizes(m->log_path, mem, have_mem);
            return 0;
        }
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            e->child = 0;
            if (WIFSIGNALED(st)) err_out(err, errlen, "the engine for %s was killed by signal %d during start", m->name, WTERMSIG(st));
            else err_out(err, errlen, "the engine for %s exited with status %d during start", m->name, WEXITSTATUS(st));
            explain(err, errlen, m->log_path);
            return -1;
        }
        sleep_ms(50);
    }
    /* The log's tail before the stop: where the load stood. */
    err_out(err, errlen, "the engine for %s did not answer within %lld ms (--load-timeout-ms)", m->name, (long long)timeout_ms);
    explain(err, errlen, m->log_path);
    engine_stop(e);
    return -1;
}

uint64_t managed_measured_need(const managed_defaults *d, const measured_entry *e)
{
    uint64_t need = measured_total(e) + d->overhead_bytes;
    return need + (uint64_t)((double)need * d->margin_pct / 100.0) + d->margin_bytes;
}

int managed_measurement(const managed_spec *m, const memlog_figures *f, int64_t wall_s, measured_entry *out,
                        char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (measured_key_for(m->gguf, m->ctx, m->parallel, m->ctk, m->ctv, m->flash_attn, &out->key, err, errlen)) return -1;
    out->model_bytes = f->model_bytes;
    out->kv_bytes = f->kv_bytes;
    out->compute_bytes = f->compute_bytes;
    out->host_bytes = f->host_bytes;
    out->measured_at = wall_s;
    return 0;
}

json_t *managed_json(const managed_spec *m, int running, int64_t now)
{
    const char *state = m->fetching ? "fetching" : m->loading ? "starting" : running ? "running" : "stopped";
    json_t *j = json_pack("{s:s, s:s, s:I, s:s, s:I, s:i, s:i, s:s, s:s, s:b, s:b, s:I, s:i, s:s}", "state", state,
                          "model", m->name, "need_bytes", (json_int_t)m->need_bytes, "need_source",
                          m->measured && m->meas.model_bytes ? "measured" : "estimate", "estimate_bytes", (json_int_t)m->estimate_bytes,
                          "ctx", m->ctx, "parallel", m->parallel, "cache_type_k", m->ctk, "cache_type_v", m->ctv,
                          "flash_attn", m->flash_attn, "pinned", m->pinned, "keep_alive_ms",
                          (json_int_t)(running ? m->keep_alive_cur_ms : m->keep_alive_ms), "starts", m->starts, "log",
                          m->log_path);
    if (m->measured) json_object_set_new(j, "measured", measured_json(&m->meas));
    if (running && !m->loading) {
        json_object_set_new(j, "idle_ms", json_integer((json_int_t)(now - m->last_used_ms)));
        json_object_set_new(j, "vram_bytes", json_integer((json_int_t)m->charged_bytes));
    }
    if (m->last_error[0]) json_object_set_new(j, "last_error", json_string(m->last_error));
    if (m->pinned_sha256[0]) json_object_set_new(j, "sha256", json_string(m->pinned_sha256));
    return j;
}
