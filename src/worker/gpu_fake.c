/* worker/gpu, fake GPUs: the NAME:TOTAL_GB:FREE_GB specs of --fake-gpu and
 * the file of --fake-gpu-file, which tests change while a worker runs to make
 * processes appear or the GPU get lost.  Part of the gpu module; its API is
 * in gpu.h. */
#include "worker/gpu.h"
#include "util/err.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/opts.h"

#define GIB 1073741824.0


static char *trim(char *s)
{
    while (*s && isspace((unsigned char)*s)) s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = 0;
    return s;
}

static int parse_gib(const char *s, const char *what, double *v, char *err, size_t errlen)
{
    char *end;
    errno = 0;
    double d = strtod(s, &end);
    if (!*s || isspace((unsigned char)*s) || end == s || *end || errno || !isfinite(d)) {
        err_out(err, errlen, "fake GPU %s \"%s\" is not a number", what, s);
        return -1;
    }
    if (d < 0) {
        err_out(err, errlen, "fake GPU %s %s is negative", what, s);
        return -1;
    }
    /* 1 PiB: far beyond any GPU, and keeps the byte count well inside int64. */
    if (d > 1048576.0) {
        err_out(err, errlen, "fake GPU %s %s GB is too large", what, s);
        return -1;
    }
    *v = d;
    return 0;
}

static int parse_fake_at(const char *spec, int index, gpu_info *out, char *err, size_t errlen)
{
    if (!spec || !out) {
        err_out(err, errlen, "fake GPU spec missing");
        return -1;
    }
    /* Split from the right so a name may itself contain ':'. */
    const char *c2 = strrchr(spec, ':');
    const char *c1 = NULL;
    if (c2)
        for (const char *q = c2; q > spec;)
            if (*--q == ':') { c1 = q; break; }
    if (!c1) {
        err_out(err, errlen, "fake GPU \"%s\": expected NAME:TOTAL_GB:FREE_GB", spec);
        return -1;
    }
    size_t nlen = (size_t)(c1 - spec);
    if (nlen == 0) {
        err_out(err, errlen, "fake GPU \"%s\": name is empty", spec);
        return -1;
    }
    if (nlen >= sizeof out->name) {
        err_out(err, errlen, "fake GPU name is longer than %zu characters", sizeof out->name - 1);
        return -1;
    }
    for (size_t i = 0; i < nlen; i++)
        if ((unsigned char)spec[i] < 0x20 || spec[i] == 0x7f) {
            err_out(err, errlen, "fake GPU name contains a control character");
            return -1;
        }
    char tot[64], fr[64];
    size_t tlen = (size_t)(c2 - c1 - 1), flen = strlen(c2 + 1);
    if (tlen == 0 || flen == 0) {
        err_out(err, errlen, "fake GPU \"%s\": expected NAME:TOTAL_GB:FREE_GB", spec);
        return -1;
    }
    if (tlen >= sizeof tot || flen >= sizeof fr) {
        err_out(err, errlen, "fake GPU \"%s\": size is not a number", spec);
        return -1;
    }
    memcpy(tot, c1 + 1, tlen);
    tot[tlen] = 0;
    memcpy(fr, c2 + 1, flen);
    fr[flen] = 0;

    double total, freeg;
    if (parse_gib(tot, "total", &total, err, errlen) != 0) return -1;
    if (parse_gib(fr, "free", &freeg, err, errlen) != 0) return -1;
    if (total <= 0) {
        err_out(err, errlen, "fake GPU \"%s\": total must be above zero", spec);
        return -1;
    }
    if (freeg > total) {
        err_out(err, errlen, "fake GPU \"%s\": free %s GB exceeds total %s GB", spec, fr, tot);
        return -1;
    }

    memset(out, 0, sizeof *out);
    out->index = index;
    memcpy(out->name, spec, nlen);
    out->name[nlen] = 0;
    out->total_bytes = (uint64_t)llround(total * GIB);
    out->free_bytes = (uint64_t)llround(freeg * GIB);
    out->temp_c = 40;
    out->util_pct = 0;
    out->throttled = 0;
    out->foreign_procs = 0;

    /* The uuid feeds the machine fingerprint, so it must be stable for a
     * given spec and position, and plain ASCII. */
    char san[64];
    size_t k = 0;
    for (size_t i = 0; i < nlen && k < sizeof san - 1; i++) {
        unsigned char ch = (unsigned char)out->name[i];
        if (isalnum(ch)) san[k++] = (char)tolower(ch);
        else if (k > 0 && san[k - 1] != '-') san[k++] = '-';
    }
    while (k > 0 && san[k - 1] == '-') k--;
    san[k] = 0;
    snprintf(out->uuid, sizeof out->uuid, "GPU-fake-%d-%s", index, k ? san : "gpu");
    return 0;
}

int gpu_parse_fake(const char *spec, gpu_info *out, char *err, size_t errlen)
{
    return parse_fake_at(spec, 0, out, err, errlen);
}

/* One of the words after the GPU: proc=PID[:USED_GB], temp=C, throttled. */
static int parse_fake_word(const char *tok, gpu_info *g, char *err, size_t errlen)
{
    if (!strcmp(tok, "throttled")) {
        g->throttled = 1;
        return 0;
    }
    if (!strncmp(tok, "temp=", 5)) {
        char *tend;
        errno = 0;
        long c = strtol(tok + 5, &tend, 10);
        if (tend == tok + 5 || *tend || errno || c < 0 || c > 150) {
            err_out(err, errlen, "fake GPU line: \"%s\" wants a temperature of 0..150 C", tok);
            return -1;
        }
        g->temp_c = (int)c;
        return 0;
    }
    if (strncmp(tok, "proc=", 5)) {
        err_out(err, errlen, "fake GPU line: \"%s\" is not proc=PID[:USED_GB], temp=C or throttled", tok);
        return -1;
    }
    if (g->nprocs >= GPU_MAX_PROCS) {
        err_out(err, errlen, "fake GPU line: at most %d processes", GPU_MAX_PROCS);
        return -1;
    }
    char *end;
    errno = 0;
    long pid = strtol(tok + 5, &end, 10);
    if (end == tok + 5 || errno || pid <= 0 || pid > 0x7fffffffL || (*end && *end != ':')) {
        err_out(err, errlen, "fake GPU line: \"%s\" has no valid pid", tok);
        return -1;
    }
    uint64_t used = GPU_USED_UNKNOWN;
    if (*end == ':') {
        double gb;
        if (parse_gib(end + 1, "process memory", &gb, err, errlen) != 0) return -1;
        used = (uint64_t)llround(gb * GIB);
    }
    g->procs[g->nprocs++] = (gpu_proc){(int)pid, used};
    return 0;
}

int gpu_parse_fake_line(const char *line, int index, gpu_info *out, char *err, size_t errlen)
{
    char copy[1024];
    if (!line || strlen(line) >= sizeof copy) {
        err_out(err, errlen, "fake GPU line missing or too long");
        return -1;
    }
    snprintf(copy, sizeof copy, "%s", line);
    char *t = trim(copy);
    if (!*t || *t == '#') return 0;
    if (!strcmp(t, "lost") || !strcmp(t, "fail")) return 2;
    /* The GPU's name may hold spaces; the words about it follow the first
     * " proc=", " temp=" or " throttled". */
    char *words = NULL;
    static const char *const starts[] = {" proc=", " temp=", " throttled"};
    for (size_t i = 0; i < sizeof starts / sizeof starts[0]; i++) {
        char *w = strstr(t, starts[i]);
        if (w && (!words || w < words)) words = w;
    }
    if (words) *words++ = 0;
    if (parse_fake_at(trim(t), index, out, err, errlen) != 0) return -1;
    char *save = NULL;
    for (char *tok = words ? strtok_r(words, " \t", &save) : NULL; tok; tok = strtok_r(NULL, " \t", &save))
        if (parse_fake_word(tok, out, err, errlen) != 0) return -1;
    out->foreign_procs = out->nprocs;
    return 1;
}

/* The whole file or nothing, so a half-written one is never half believed. */
int gpu_read_fake_file(const char *path, gpu_info *out, int max, char *err, size_t errlen)
{
    char *text = read_small_file(path, 1 << 16);
    if (!text) {
        err_out(err, errlen, "cannot read the fake GPU file %s: %s", path, strerror(errno));
        return -1;
    }
    int n = 0, rc = 0, lineno = 0;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line && rc == 0; line = strtok_r(NULL, "\n", &save)) {
        lineno++;
        gpu_info g;
        char why[200] = "";
        int k = gpu_parse_fake_line(line, n, &g, why, sizeof why);
        if (k == 2) {
            err_out(err, errlen, "the fake GPU file marks the GPU lost (%s)", path);
            rc = -1;
        } else if (k < 0) {
            err_out(err, errlen, "%s line %d: %s", path, lineno, why);
            rc = -1;
        } else if (k == 1) {
            if (n >= max) {
                err_out(err, errlen, "%s: at most %d GPUs", path, max);
                rc = -1;
            } else {
                out[n++] = g;
            }
        }
    }
    free(text);
    return rc ? -1 : n;
}


void gpu_fake_apply_charges(gpu_info *g, int n, const gpu_charge *c, int nc)
{
    for (int k = 0; k < nc; k++) {
        uint64_t left = c[k].bytes;
        for (int i = 0; i < n && left; i++) {
            /* More than every GPU holds leaves them all at zero free. */
            uint64_t take = left < g[i].free_bytes ? left : g[i].free_bytes;
            if (!take) continue;
            g[i].free_bytes -= take;
            left -= take;
            if (c[k].pid > 0 && g[i].nprocs >= 0 && g[i].nprocs < GPU_MAX_PROCS) g[i].procs[g[i].nprocs++] = (gpu_proc){c[k].pid, take};
        }
    }
}
