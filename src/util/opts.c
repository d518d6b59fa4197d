/* util/opts: see opts.h. */
#include "util/opts.h"

#include <ctype.h>
#include <pthread.h>
#include <signal.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/buf.h"

static char *trim(char *s)
{
    while (isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1])) s[--n] = 0;
    return s;
}

char **opts_expand_config(int argc, char **argv, int *out_argc, char *err, size_t errlen)
{
    const char *file = NULL;
    int skip_at = -1, skip_n = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--config") && i + 1 < argc) { file = argv[i + 1]; skip_at = i; skip_n = 2; break; }
        if (!strncmp(argv[i], "--config=", 9)) { file = argv[i] + 9; skip_at = i; skip_n = 1; break; }
    }
    char **out = calloc((size_t)argc + 1, sizeof *out);
    int n = 0;
    if (!out) { snprintf(err, errlen, "out of memory"); return NULL; }
    out[n++] = strdup(argv[0]);
    if (file) {
        FILE *f = fopen(file, "r");
        if (!f) {
            snprintf(err, errlen, "cannot read config file %s: %s", file, strerror(errno));
            opts_free_argv(out);
            return NULL;
        }
        char line[4096];
        int lineno = 0;
        while (fgets(line, sizeof line, f)) {
            lineno++;
            char *s = trim(line);
            if (!*s || *s == '#') continue;
            char *sep = strpbrk(s, "= \t");
            if (!sep) {
                snprintf(err, errlen, "%s:%d: expected 'key = value'", file, lineno);
                fclose(f);
                opts_free_argv(out);
                return NULL;
            }
            *sep = 0;
            char *key = trim(s), *val = trim(sep + 1);
            if (*val == '=') val = trim(val + 1);
            size_t vl = strlen(val);
            if (vl >= 2 && val[0] == '"' && val[vl - 1] == '"') { val[vl - 1] = 0; val++; }
            char **grown = realloc(out, sizeof *out * ((size_t)argc + (size_t)n + 2));
            if (!grown) break;
            out = grown;
            buf b = {0};
            buf_printf(&b, "--%s=%s", key, val);
            out[n++] = buf_steal(&b);
        }
        fclose(f);
    }
    char **grown = realloc(out, sizeof *out * ((size_t)argc + (size_t)n + 1));
    if (!grown) { opts_free_argv(out); return NULL; }
    out = grown;
    for (int i = 1; i < argc; i++) {
        if (i >= skip_at && i < skip_at + skip_n) continue;
        out[n++] = strdup(argv[i]);
    }
    out[n] = NULL;
    *out_argc = n;
    return out;
}

void opts_free_argv(char **argv)
{
    if (!argv) return;
    for (char **p = argv; *p; p++) free(*p);
    free(argv);
}

int64_t opts_parse_size(const char *s)
{
    if (!s || !*s) return -1;
    char *e;
    errno = 0;
    double v = strtod(s, &e);
    if (errno || e == s || v < 0) return -1;
    double mult = 1;
    switch (tolower((unsigned char)*e)) {
    case 0: break;
    case 'k': mult = 1024.0; e++; break;
    case 'm': mult = 1024.0 * 1024; e++; break;
    case 'g': mult = 1024.0 * 1024 * 1024; e++; break;
    case 'b': break;
    default: return -1;
    }
    if (*e == 'i' || *e == 'I') e++;
    if (*e == 'b' || *e == 'B') e++;
    if (*e) return -1;
    double r = v * mult;
    if (r > 9e18) return -1;
    return (int64_t)r;
}

int opts_parse_int(const char *s, long min, long max, long *out)
{
    if (!s || !*s) return -1;
    char *e;
    errno = 0;
    long v = strtol(s, &e, 10);
    if (errno || *e || v < min || v > max) return -1;
    *out = v;
    return 0;
}

int write_file_atomic(const char *path, const char *content)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) return -1;
    size_t len = strlen(content), off = 0;
    while (off < len) {
        ssize_t w = write(fd, content + off, len - off);
        if (w <= 0) { close(fd); unlink(tmp); return -1; }
        off += (size_t)w;
    }
    if (close(fd) || rename(tmp, path)) { unlink(tmp); return -1; }
    return 0;
}

char *read_small_file(const char *path, size_t max)
{
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    char *p = malloc(max + 1);
    size_t n = p ? fread(p, 1, max, f) : 0;
    fclose(f);
    if (!p) return NULL;
    p[n] = 0;
    while (n && isspace((unsigned char)p[n - 1])) p[--n] = 0;
    return p;
}

int write_port_file(const char *path, int port)
{
    char text[32];
    snprintf(text, sizeof text, "%d\n", port);
    return write_file_atomic(path, text);
}

void block_stop_signals(sigset_t *set)
{
    sigemptyset(set);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, set, NULL);
    signal(SIGPIPE, SIG_IGN);
}

int make_dirs(const char *dir)
{
    char p[4096];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p) { errno = ENAMETOOLONG; return -1; }
    for (char *c = p + 1; *c; c++) {
        if (*c != '/') continue;
        *c = 0;
        if (mkdir(p, 0700) && errno != EEXIST) return -1;
        *c = '/';
    }
    if (mkdir(p, 0700) && errno != EEXIST) return -1;
    struct stat sb;
    if (stat(p, &sb)) return -1;
    if (!S_ISDIR(sb.st_mode)) { errno = ENOTDIR; return -1; }
    return 0;
}
