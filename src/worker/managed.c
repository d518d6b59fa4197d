/* worker/managed: see managed.h. */
#include "worker/managed.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "http/client.h"
#include "plan/plan.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/log.h"

int managed_parse(const char *spec, engine *e, char *err, size_t errlen)
{
    memset(e, 0, sizeof *e);
    managed_spec *m = calloc(1, sizeof *m);
    if (!m) return err_out(err, errlen, "out of memory");
    m->ctx = 4096;
    m->parallel = 1;
    m->keep_alive_ms = 300000;
    char copy[1024];
    snprintf(copy, sizeof copy, "%s", spec);
    char *eq = strchr(copy, '=');
    if (!eq || eq == copy) { err_out(err, errlen, "--load wants NAME=FILE.gguf[,ctx=N][,parallel=N][,keep-alive=S]"); goto bad; }
    *eq = 0;
    snprintf(m->name, sizeof m->name, "%.127s", copy);
    char *save = NULL;
    char *path = strtok_r(eq + 1, ",", &save);
    if (!path) { err_out(err, errlen, "--load %s: no GGUF file given", m->name); goto bad; }
    snprintf(m->gguf, sizeof m->gguf, "%.511s", path);
    for (char *kv = strtok_r(NULL, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *v = strchr(kv, '=');
        long n = v ? strtol(v + 1, NULL, 10) : -1;
        if (!v || n <= 0) { err_out(err, errlen, "--load %s: bad option '%s'", m->name, kv); goto bad; }
        *v = 0;
        if (!strcmp(kv, "ctx")) m->ctx = (int)n;
        else if (!strcmp(kv, "parallel")) m->parallel = (int)n;
        else if (!strcmp(kv, "keep-alive")) m->keep_alive_ms = n * 1000;
        else { err_out(err, errlen, "--load %s: unknown option '%s'", m->name, kv); goto bad; }
    }
    char perr[256];
    plan_model *pm = plan_model_open(m->gguf, perr, sizeof perr);
    if (!pm) { err_out(err, errlen, "--load %s: %s: %s", copy, m->gguf, perr); goto bad; }
    m->need_bytes = plan_need_bytes(pm, NULL, (uint32_t)m->ctx, (uint32_t)m->parallel);
    plan_model_free(pm);
    e->kind = ENGINE_MANAGED;
    e->default_slots = m->parallel;
    e->managed = m;
    snprintf(e->error, sizeof e->error, "stopped");
    return 0;
bad:
    free(m);
    return -1;
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
        {"{ctx_total}", num[2]}, {"{parallel}", num[3]}, {"{self}", self},
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

int managed_start(engine *e, const char *tmpl, int64_t timeout_ms, char *err, size_t errlen)
{
    managed_spec *m = e->managed;
    int port = free_port();
    if (port < 0) return err_out(err, errlen, "no free port for the engine");
    char line[2048], *argv[64];
    if (managed_argv(tmpl, m, port, "/proc/self/exe", line, sizeof line, argv, 64) < 0)
        return err_out(err, errlen, "the engine command is empty or too long");
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) return err_out(err, errlen, "fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM); /* never outlive the worker */
        if (getppid() != parent) _exit(1);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execvp(argv[0], argv);
        _exit(127);
    }
    e->child = pid;
    snprintf(e->url, sizeof e->url, "http://127.0.0.1:%d", port);
    log_info("starting %s for %s (pid %d): %s", argv[0], m->name, (int)pid, tmpl);
    int64_t deadline = mono_ms() + timeout_ms;
    while (mono_ms() < deadline) {
        if (answers(e->url)) return 0;
        if (waitpid(pid, NULL, WNOHANG) == pid) {
            e->child = 0;
            return err_out(err, errlen, "the engine for %s exited during start", m->name);
        }
        sleep_ms(50);
    }
    engine_stop(e);
    return err_out(err, errlen, "the engine for %s did not answer within %lld ms", m->name, (long long)timeout_ms);
}
