/* worker/gpu: see gpu.h.  Owns the NVML binding (loaded at run time so the
 * worker builds and runs on machines without the NVIDIA driver), the
 * nvidia-smi fallback and the fake-GPU specs used by tests and demos. */
#include "worker/gpu.h"

#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/buf.h"
#include "util/log.h"

#define GIB 1073741824.0
#define MIB 1048576ULL

/* ---- NVML, declared by hand so no NVIDIA headers are needed to build ---- */

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;

enum { NVML_SUCCESS = 0, NVML_ERROR_INSUFFICIENT_SIZE = 7 };
enum { NVML_TEMPERATURE_GPU = 0 };

typedef struct nvml_api {
    void *dl;
    nvmlReturn_t (*init)(void);
    nvmlReturn_t (*shutdown)(void);
    nvmlReturn_t (*count)(unsigned int *);
    nvmlReturn_t (*handle)(unsigned int, nvmlDevice_t *);
    nvmlReturn_t (*name)(nvmlDevice_t, char *, unsigned int);
    nvmlReturn_t (*uuid)(nvmlDevice_t, char *, unsigned int);
    nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t *);
    nvmlReturn_t (*temperature)(nvmlDevice_t, int, unsigned int *);
    nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t *);
    /* Only the count is used, so the process-info struct layout (which
     * differs between _v2 and _v3) never matters: infos is always NULL. */
    nvmlReturn_t (*procs)(nvmlDevice_t, unsigned int *, void *);
} nvml_api;

struct gpu_probe {
    gpu_source src;
    int nfake;
    gpu_info fakes[GPU_MAX];
    nvml_api nvml;
    char smi_path[4096];
};

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* Copying the bytes avoids the object-to-function pointer cast that ISO C
 * leaves undefined (POSIX guarantees the representations match). */
static int nvml_sym(void *dl, const char *name, void *fnptr)
{
    void *s = dlsym(dl, name);
    if (!s) return -1;
    memcpy(fnptr, &s, sizeof s);
    return 0;
}

static int nvml_load(nvml_api *n)
{
    memset(n, 0, sizeof *n);
    n->dl = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!n->dl) n->dl = dlopen("libnvidia-ml.so", RTLD_NOW | RTLD_LOCAL);
    if (!n->dl) return -1;
    int bad = 0;
    bad |= nvml_sym(n->dl, "nvmlInit_v2", &n->init);
    bad |= nvml_sym(n->dl, "nvmlShutdown", &n->shutdown);
    bad |= nvml_sym(n->dl, "nvmlDeviceGetCount_v2", &n->count);
    bad |= nvml_sym(n->dl, "nvmlDeviceGetHandleByIndex_v2", &n->handle);
    bad |= nvml_sym(n->dl, "nvmlDeviceGetName", &n->name);
    bad |= nvml_sym(n->dl, "nvmlDeviceGetUUID", &n->uuid);
    bad |= nvml_sym(n->dl, "nvmlDeviceGetMemoryInfo", &n->memory);
    bad |= nvml_sym(n->dl, "nvmlDeviceGetTemperature", &n->temperature);
    bad |= nvml_sym(n->dl, "nvmlDeviceGetUtilizationRates", &n->utilization);
    if (nvml_sym(n->dl, "nvmlDeviceGetComputeRunningProcesses_v3", &n->procs) != 0)
        nvml_sym(n->dl, "nvmlDeviceGetComputeRunningProcesses_v2", &n->procs);
    if (bad) {
        log_debug("gpu: libnvidia-ml lacks a required symbol");
    } else {
        nvmlReturn_t rc = n->init();
        if (rc == NVML_SUCCESS) return 0;
        log_debug("gpu: nvmlInit_v2 failed (%d)", rc);
    }
    dlclose(n->dl);
    memset(n, 0, sizeof *n);
    return -1;
}

static void nvml_unload(nvml_api *n)
{
    if (!n->dl) return;
    n->shutdown();
    dlclose(n->dl);
    memset(n, 0, sizeof *n);
}

static int nvml_read(nvml_api *n, gpu_info *out, int max)
{
    unsigned int cnt = 0;
    if (n->count(&cnt) != NVML_SUCCESS) return -1;
    int got = 0;
    for (unsigned int i = 0; i < cnt && got < max; i++) {
        nvmlDevice_t d;
        if (n->handle(i, &d) != NVML_SUCCESS) continue;
        gpu_info *g = &out[got];
        memset(g, 0, sizeof *g);
        g->index = (int)i;
        if (n->name(d, g->name, sizeof g->name) != NVML_SUCCESS)
            snprintf(g->name, sizeof g->name, "unknown");
        g->name[sizeof g->name - 1] = 0;
        if (n->uuid(d, g->uuid, sizeof g->uuid) != NVML_SUCCESS)
            snprintf(g->uuid, sizeof g->uuid, "GPU-unknown-%u", i);
        g->uuid[sizeof g->uuid - 1] = 0;
        nvmlMemory_t m;
        if (n->memory(d, &m) == NVML_SUCCESS) {
            g->total_bytes = m.total;
            g->free_bytes = m.free;
        }
        unsigned int t;
        g->temp_c = n->temperature(d, NVML_TEMPERATURE_GPU, &t) == NVML_SUCCESS ? (int)t : -1;
        nvmlUtilization_t u;
        g->util_pct = n->utilization(d, &u) == NVML_SUCCESS ? (int)u.gpu : -1;
        g->foreign_procs = -1;
        if (n->procs) {
            unsigned int pc = 0;
            nvmlReturn_t rc = n->procs(d, &pc, NULL);
            if (rc == NVML_SUCCESS) g->foreign_procs = 0;
            else if (rc == NVML_ERROR_INSUFFICIENT_SIZE) g->foreign_procs = (int)pc;
        }
        got++;
    }
    return got;
}

/* ---- nvidia-smi ---- */

/* Looking on PATH ourselves rather than letting popen's shell fail keeps
 * "sh: nvidia-smi: not found" off the worker's stderr on GPU-less hosts. */
static int find_on_path(const char *prog, char *out, size_t outlen)
{
    const char *path = getenv("PATH");
    if (!path || !*path) return -1;
    const char *p = path;
    for (;;) {
        const char *end = strchr(p, ':');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        /* An empty PATH entry means the current directory. */
        int n = len ? snprintf(out, outlen, "%.*s/%s", (int)len, p, prog)
                    : snprintf(out, outlen, "./%s", prog);
        if (n > 0 && (size_t)n < outlen && access(out, X_OK) == 0) return 0;
        if (!end) break;
        p = end + 1;
    }
    return -1;
}

static int smi_read(const char *path, gpu_info *out, int max)
{
    /* Single quotes make the found path safe for the shell unless it
     * contains a quote itself, in which case we give up on it. */
    if (strchr(path, '\'')) return -1;
    char cmd[4352];
    int n = snprintf(cmd, sizeof cmd,
                     "'%s' --query-gpu=index,name,uuid,memory.total,memory.free,"
                     "temperature.gpu,utilization.gpu --format=csv,noheader,nounits"
                     " 2>/dev/null",
                     path);
    if (n < 0 || (size_t)n >= sizeof cmd) return -1;
    FILE *f = popen(cmd, "r");
    if (!f) return -1;
    buf text = {0};
    char chunk[4096];
    size_t r;
    int ok = 1;
    while ((r = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (text.len + r > (1u << 20) || buf_append(&text, chunk, r) != 0) { ok = 0; break; }
    }
    int status = pclose(f);
    /* The exit status alone is not trusted: with SIGCHLD ignored pclose
     * reports -1 even on success, and a failing nvidia-smi prints prose that
     * parses to zero GPUs anyway. */
    int got = ok && text.data ? gpu_parse_smi_csv(text.data, out, max) : 0;
    buf_free(&text);
    if (!ok || (got == 0 && status != 0)) return -1;
    return got;
}

static char *trim(char *s)
{
    while (*s && isspace((unsigned char)*s)) s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = 0;
    return s;
}

/* nvidia-smi writes "[N/A]", "[Not Supported]", "[Unknown Error]" and, in
 * some versions, a bare "N/A" for values it cannot read. */
static int smi_unknown(const char *s)
{
    return *s == '[' || strcmp(s, "N/A") == 0 || *s == 0;
}

/* 0 = number, 1 = unknown, -1 = malformed. */
static int smi_num(const char *s, double *v)
{
    if (smi_unknown(s)) return 1;
    char *end;
    errno = 0;
    double d = strtod(s, &end);
    if (end == s || *end || errno || !isfinite(d) || d < 0) return -1;
    *v = d;
    return 0;
}

static int smi_line(char *line, gpu_info *g)
{
    char *f[7];
    int nf = 0;
    char *p = line;
    for (;;) {
        if (nf == 7) return -1;
        f[nf++] = p;
        char *c = strchr(p, ',');
        if (!c) break;
        *c = 0;
        p = c + 1;
    }
    if (nf != 7) return -1;
    for (int i = 0; i < 7; i++) f[i] = trim(f[i]);

    memset(g, 0, sizeof *g);
    char *end;
    errno = 0;
    long idx = strtol(f[0], &end, 10);
    if (end == f[0] || *end || errno || idx < 0 || idx > 1000000) return -1;
    g->index = (int)idx;
    if (!*f[1] || !*f[2]) return -1;
    snprintf(g->name, sizeof g->name, "%s", f[1]);
    snprintf(g->uuid, sizeof g->uuid, "%s", f[2]);

    double v;
    int k;
    if ((k = smi_num(f[3], &v)) < 0) return -1;
    g->total_bytes = k == 0 ? (uint64_t)llround(v * (double)MIB) : 0;
    if ((k = smi_num(f[4], &v)) < 0) return -1;
    g->free_bytes = k == 0 ? (uint64_t)llround(v * (double)MIB) : 0;
    if ((k = smi_num(f[5], &v)) < 0) return -1;
    g->temp_c = k == 0 ? (int)lround(v) : -1;
    if ((k = smi_num(f[6], &v)) < 0) return -1;
    g->util_pct = k == 0 ? (int)lround(v) : -1;
    /* nvidia-smi's GPU query has no per-GPU process count. */
    g->foreign_procs = -1;
    return 0;
}

int gpu_parse_smi_csv(const char *text, gpu_info *out, int max)
{
    if (!text || !out || max <= 0) return 0;
    int got = 0;
    const char *p = text;
    while (*p && got < max) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        char line[1024];
        if (len < sizeof line) {
            memcpy(line, p, len);
            line[len] = 0;
            char *t = trim(line);
            if (*t && smi_line(t, &out[got]) == 0) got++;
        }
        if (!nl) break;
        p = nl + 1;
    }
    return got;
}

/* ---- fakes ---- */

static int parse_gib(const char *s, const char *what, double *v, char *err, size_t errlen)
{
    char *end;
    errno = 0;
    double d = strtod(s, &end);
    if (!*s || isspace((unsigned char)*s) || end == s || *end || errno || !isfinite(d)) {
        set_err(err, errlen, "fake GPU %s \"%s\" is not a number", what, s);
        return -1;
    }
    if (d < 0) {
        set_err(err, errlen, "fake GPU %s %s is negative", what, s);
        return -1;
    }
    /* 1 PiB: far beyond any GPU, and keeps the byte count well inside int64. */
    if (d > 1048576.0) {
        set_err(err, errlen, "fake GPU %s %s GB is too large", what, s);
        return -1;
    }
    *v = d;
    return 0;
}

static int parse_fake_at(const char *spec, int index, gpu_info *out, char *err, size_t errlen)
{
    if (!spec || !out) {
        set_err(err, errlen, "fake GPU spec missing");
        return -1;
    }
    /* Split from the right so a name may itself contain ':'. */
    const char *c2 = strrchr(spec, ':');
    const char *c1 = NULL;
    if (c2)
        for (const char *q = c2; q > spec;)
            if (*--q == ':') { c1 = q; break; }
    if (!c1) {
        set_err(err, errlen, "fake GPU \"%s\": expected NAME:TOTAL_GB:FREE_GB", spec);
        return -1;
    }
    size_t nlen = (size_t)(c1 - spec);
    if (nlen == 0) {
        set_err(err, errlen, "fake GPU \"%s\": name is empty", spec);
        return -1;
    }
    if (nlen >= sizeof out->name) {
        set_err(err, errlen, "fake GPU name is longer than %zu characters", sizeof out->name - 1);
        return -1;
    }
    for (size_t i = 0; i < nlen; i++)
        if ((unsigned char)spec[i] < 0x20 || spec[i] == 0x7f) {
            set_err(err, errlen, "fake GPU name contains a control character");
            return -1;
        }
    char tot[64], fr[64];
    size_t tlen = (size_t)(c2 - c1 - 1), flen = strlen(c2 + 1);
    if (tlen == 0 || flen == 0) {
        set_err(err, errlen, "fake GPU \"%s\": expected NAME:TOTAL_GB:FREE_GB", spec);
        return -1;
    }
    if (tlen >= sizeof tot || flen >= sizeof fr) {
        set_err(err, errlen, "fake GPU \"%s\": size is not a number", spec);
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
        set_err(err, errlen, "fake GPU \"%s\": total must be above zero", spec);
        return -1;
    }
    if (freeg > total) {
        set_err(err, errlen, "fake GPU \"%s\": free %s GB exceeds total %s GB", spec, fr, tot);
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

/* ---- probe ---- */

gpu_probe *gpu_probe_open(const char *const *fakes, char *err, size_t errlen)
{
    if (err && errlen) err[0] = 0;
    gpu_probe *p = calloc(1, sizeof *p);
    if (!p) {
        set_err(err, errlen, "out of memory");
        return NULL;
    }
    if (fakes && fakes[0]) {
        for (int i = 0; fakes[i]; i++) {
            if (i >= GPU_MAX) {
                set_err(err, errlen, "at most %d fake GPUs", GPU_MAX);
                free(p);
                return NULL;
            }
            if (parse_fake_at(fakes[i], i, &p->fakes[i], err, errlen) != 0) {
                free(p);
                return NULL;
            }
            p->nfake = i + 1;
        }
        p->src = GPU_SRC_FAKE;
        return p;
    }
    if (nvml_load(&p->nvml) == 0) {
        p->src = GPU_SRC_NVML;
        return p;
    }
    if (find_on_path("nvidia-smi", p->smi_path, sizeof p->smi_path) == 0) {
        /* nvidia-smi can be installed while the driver is not loaded; only
         * trust it if it actually reports a GPU. */
        gpu_info tmp[GPU_MAX];
        if (smi_read(p->smi_path, tmp, GPU_MAX) > 0) {
            p->src = GPU_SRC_SMI;
            return p;
        }
    }
    p->src = GPU_SRC_NONE;
    return p;
}

void gpu_probe_close(gpu_probe *p)
{
    if (!p) return;
    if (p->src == GPU_SRC_NVML) nvml_unload(&p->nvml);
    free(p);
}

gpu_source gpu_probe_source(const gpu_probe *p)
{
    return p ? p->src : GPU_SRC_NONE;
}

const char *gpu_source_name(gpu_source s)
{
    switch (s) {
    case GPU_SRC_FAKE: return "fake";
    case GPU_SRC_NVML: return "nvml";
    case GPU_SRC_SMI: return "nvidia-smi";
    case GPU_SRC_NONE: break;
    }
    return "none";
}

int gpu_probe_read(gpu_probe *p, gpu_info *out, int max)
{
    if (!p || !out || max < 0) return -1;
    if (max > GPU_MAX) max = GPU_MAX;
    switch (p->src) {
    case GPU_SRC_FAKE: {
        int n = p->nfake < max ? p->nfake : max;
        memcpy(out, p->fakes, (size_t)n * sizeof *out);
        return n;
    }
    case GPU_SRC_NVML: return nvml_read(&p->nvml, out, max);
    case GPU_SRC_SMI: return smi_read(p->smi_path, out, max);
    case GPU_SRC_NONE: break;
    }
    return 0;
}

static json_t *int_or_null(int v)
{
    return v < 0 ? json_null() : json_integer(v);
}

json_t *gpu_info_json(const gpu_info *g)
{
    if (!g) return NULL;
    return json_pack("{s:i, s:s, s:s, s:I, s:I, s:o, s:o, s:o}",
                     "index", g->index,
                     "name", g->name,
                     "uuid", g->uuid,
                     "total_bytes", (json_int_t)g->total_bytes,
                     "free_bytes", (json_int_t)g->free_bytes,
                     "temperature_c", int_or_null(g->temp_c),
                     "utilization_pct", int_or_null(g->util_pct),
                     "foreign_processes", int_or_null(g->foreign_procs));
}
