/* worker/gpu: see gpu.h.  Owns the NVML binding (loaded at run time so the
 * worker builds and runs on machines without the NVIDIA driver), the
 * nvidia-smi fallback and the fake GPUs used by tests and demos. */
#include "worker/gpu.h"
#include "util/err.h"

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
#include "util/clock.h"
#include "util/log.h"

#define MIB 1048576ULL

/* ---- NVML, declared by hand so no NVIDIA headers are needed to build ---- */

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;

/* nvmlDeviceGetComputeRunningProcesses (v1) fills the short layout; _v2 and
 * _v3 both fill nvmlProcessInfo_t, which added the MIG instance ids. */
typedef struct { unsigned int pid; unsigned long long usedGpuMemory; } nvmlProcessInfo_v1_t;
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

enum { NVML_SUCCESS = 0, NVML_ERROR_INSUFFICIENT_SIZE = 7 };
enum { NVML_TEMPERATURE_GPU = 0 };
/* What usedGpuMemory holds when the driver cannot tell (WDDM, permissions). */
#define NVML_VALUE_NOT_AVAILABLE (~0ULL)

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
    nvmlReturn_t (*procs)(nvmlDevice_t, unsigned int *, void *);
    nvmlReturn_t (*clock_reasons)(nvmlDevice_t, unsigned long long *); /* optional */
    int procs_v1;                       /* procs fills nvmlProcessInfo_v1_t */
    const char *(*error_string)(nvmlReturn_t);
} nvml_api;

struct gpu_probe {
    gpu_source src;
    int nfake;
    gpu_info fakes[GPU_MAX];
    char fake_file[1024];   /* set: the fakes come from this file at every read */
    nvml_api nvml;
    int nvml_failed;        /* the last read failed: initialise NVML again first */
    char smi_path[4096];
    char error[256];
    gpu_charge charges[GPU_MAX_PROCS]; /* fake GPUs: the worker's engines */
    int64_t gone_at[GPU_MAX_PROCS];     /* monotonic ms the charge ends; 0 while it runs */
    int ncharges;
    int64_t release_ms;
};


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
    if (nvml_sym(n->dl, "nvmlDeviceGetComputeRunningProcesses_v3", &n->procs) != 0 &&
        nvml_sym(n->dl, "nvmlDeviceGetComputeRunningProcesses_v2", &n->procs) != 0 &&
        nvml_sym(n->dl, "nvmlDeviceGetComputeRunningProcesses", &n->procs) == 0)
        n->procs_v1 = 1;
    nvml_sym(n->dl, "nvmlErrorString", &n->error_string);
    /* Renamed "clocks event reasons" in newer drivers; same bits. */
    if (nvml_sym(n->dl, "nvmlDeviceGetCurrentClocksEventReasons", &n->clock_reasons) != 0)
        nvml_sym(n->dl, "nvmlDeviceGetCurrentClocksThrottleReasons", &n->clock_reasons);
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

static const char *nvml_why(const nvml_api *n, nvmlReturn_t rc, char *out, size_t len)
{
    const char *s = n->error_string ? n->error_string(rc) : NULL;
    if (s) snprintf(out, len, "%s (%d)", s, rc);
    else snprintf(out, len, "error %d", rc);
    return out;
}

static void nvml_procs(const nvml_api *n, nvmlDevice_t d, gpu_info *g)
{
    g->nprocs = -1;
    if (!n->procs) return;
    /* Room for more than we keep, so a busy GPU still lists its first ones.
     * With more still, the call fails and the list is unknown: the free-VRAM
     * rule then still sees what they use. */
    union {
        nvmlProcessInfo_t v2[GPU_MAX_PROCS * 2];
        nvmlProcessInfo_v1_t v1[GPU_MAX_PROCS * 2];
    } infos;
    unsigned int cnt = GPU_MAX_PROCS * 2;
    if (n->procs(d, &cnt, &infos) != NVML_SUCCESS) return;
    g->nprocs = 0;
    for (unsigned int k = 0; k < cnt && k < GPU_MAX_PROCS * 2 && g->nprocs < GPU_MAX_PROCS; k++) {
        unsigned int pid = n->procs_v1 ? infos.v1[k].pid : infos.v2[k].pid;
        unsigned long long used = n->procs_v1 ? infos.v1[k].usedGpuMemory : infos.v2[k].usedGpuMemory;
        g->procs[g->nprocs].pid = (int)pid;
        g->procs[g->nprocs].used_bytes = used == NVML_VALUE_NOT_AVAILABLE ? GPU_USED_UNKNOWN : used;
        g->nprocs++;
    }
}

/* A GPU that stops answering (its context gone after a suspend, a driver
 * reset) fails the whole read, so the worker stops taking work rather than
 * reporting a GPU that is not there. */
static int nvml_read(nvml_api *n, gpu_info *out, int max, char *err, size_t errlen)
{
    char why[96];
    unsigned int cnt = 0;
    nvmlReturn_t rc = n->count(&cnt);
    if (rc != NVML_SUCCESS) {
        err_out(err, errlen, "nvmlDeviceGetCount failed: %s", nvml_why(n, rc, why, sizeof why));
        return -1;
    }
    int got = 0;
    for (unsigned int i = 0; i < cnt && got < max; i++) {
        nvmlDevice_t d;
        if ((rc = n->handle(i, &d)) != NVML_SUCCESS) {
            err_out(err, errlen, "GPU %u does not answer: %s", i, nvml_why(n, rc, why, sizeof why));
            return -1;
        }
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
        if ((rc = n->memory(d, &m)) != NVML_SUCCESS) {
            err_out(err, errlen, "GPU %u memory cannot be read: %s", i, nvml_why(n, rc, why, sizeof why));
            return -1;
        }
        g->total_bytes = m.total;
        g->free_bytes = m.free;
        unsigned int t;
        g->temp_c = n->temperature(d, NVML_TEMPERATURE_GPU, &t) == NVML_SUCCESS ? (int)t : -1;
        nvmlUtilization_t u;
        g->util_pct = n->utilization(d, &u) == NVML_SUCCESS ? (int)u.gpu : -1;
        unsigned long long reasons;
        g->throttled = n->clock_reasons && n->clock_reasons(d, &reasons) == NVML_SUCCESS
                           ? gpu_reasons_throttled(reasons)
                           : -1;
        nvml_procs(n, d, g);
        g->foreign_procs = g->nprocs;
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

/* Runs nvidia-smi with a query and returns its output (caller frees), or
 * NULL.  *status is pclose's. */
static char *smi_run(const char *path, const char *query, int *status)
{
    /* Single quotes make the found path safe for the shell unless it
     * contains a quote itself, in which case we give up on it. */
    if (strchr(path, '\'')) return NULL;
    char cmd[4352];
    int n = snprintf(cmd, sizeof cmd, "'%s' %s --format=csv,noheader,nounits 2>/dev/null", path, query);
    if (n < 0 || (size_t)n >= sizeof cmd) return NULL;
    FILE *f = popen(cmd, "r");
    if (!f) return NULL;
    buf text = {0};
    char chunk[4096];
    size_t r;
    int ok = 1;
    while ((r = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (text.len + r > (1u << 20) || buf_append(&text, chunk, r) != 0) { ok = 0; break; }
    }
    *status = pclose(f);
    if (!ok) { buf_free(&text); return NULL; }
    if (!text.data) return strdup("");
    return text.data;
}

static int smi_read(const char *path, gpu_info *out, int max, char *err, size_t errlen)
{
    int status;
    /* The throttle reasons first; a version that does not know the field
     * refuses the whole query, so then without it. */
    char *text = smi_run(path,
                         "--query-gpu=index,name,uuid,memory.total,memory.free,temperature.gpu,utilization.gpu,"
                         "clocks_throttle_reasons.active",
                         &status);
    /* The exit status alone is not trusted: with SIGCHLD ignored pclose
     * reports -1 even on success, and a failing nvidia-smi prints prose that
     * parses to zero GPUs anyway. */
    int got = text ? gpu_parse_smi_csv(text, out, max) : 0;
    if (got == 0) {
        free(text);
        text = smi_run(path, "--query-gpu=index,name,uuid,memory.total,memory.free,temperature.gpu,utilization.gpu",
                       &status);
        got = text ? gpu_parse_smi_csv(text, out, max) : 0;
    }
    free(text);
    if (!text || (got == 0 && status != 0)) {
        err_out(err, errlen, "nvidia-smi failed (status %d)", status);
        return -1;
    }
    text = smi_run(path, "--query-compute-apps=pid,used_memory,gpu_uuid", &status);
    if (text) gpu_parse_smi_apps(text, out, got);
    else
        for (int i = 0; i < got; i++) out[i].nprocs = -1;
    for (int i = 0; i < got; i++) out[i].foreign_procs = out[i].nprocs;
    free(text);
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
    char *f[8];
    int nf = 0;
    char *p = line;
    for (;;) {
        if (nf == 8) return -1;
        f[nf++] = p;
        char *c = strchr(p, ',');
        if (!c) break;
        *c = 0;
        p = c + 1;
    }
    if (nf != 7 && nf != 8) return -1;
    for (int i = 0; i < nf; i++) f[i] = trim(f[i]);

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
    g->throttled = -1;
    if (nf == 8 && !smi_unknown(f[7])) {
        errno = 0;
        unsigned long long reasons = strtoull(f[7], &end, 16);
        if (end == f[7] || *end || errno) return -1;
        g->throttled = gpu_reasons_throttled(reasons);
    }
    /* The GPU query has no processes; the compute-apps query adds them. */
    g->foreign_procs = -1;
    g->nprocs = -1;
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

/* "PID, USED_MIB, GPU-UUID"; used may be "[N/A]" (Windows, other users'
 * processes without the right to see them). */
static int smi_app_line(char *line, int *pid, uint64_t *used, char **uuid)
{
    char *f[3];
    int nf = 0;
    char *p = line;
    for (;;) {
        if (nf == 3) return -1;
        f[nf++] = p;
        char *c = strchr(p, ',');
        if (!c) break;
        *c = 0;
        p = c + 1;
    }
    if (nf != 3) return -1;
    for (int i = 0; i < 3; i++) f[i] = trim(f[i]);
    char *end;
    errno = 0;
    long v = strtol(f[0], &end, 10);
    if (end == f[0] || *end || errno || v <= 0 || v > 0x7fffffffL) return -1;
    *pid = (int)v;
    double mib;
    int k = smi_num(f[1], &mib);
    if (k < 0) return -1;
    *used = k == 0 ? (uint64_t)llround(mib * (double)MIB) : GPU_USED_UNKNOWN;
    if (!*f[2]) return -1;
    *uuid = f[2];
    return 0;
}

int gpu_parse_smi_apps(const char *text, gpu_info *gpus, int n)
{
    if (!gpus || n <= 0) return 0;
    for (int i = 0; i < n; i++) gpus[i].nprocs = 0;
    int placed = 0;
    const char *p = text ? text : "";
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        char line[512];
        if (len < sizeof line) {
            memcpy(line, p, len);
            line[len] = 0;
            int pid;
            uint64_t used;
            char *uuid;
            char *t = trim(line);
            if (*t && smi_app_line(t, &pid, &used, &uuid) == 0)
                for (int i = 0; i < n; i++) {
                    if (strcmp(gpus[i].uuid, uuid) || gpus[i].nprocs >= GPU_MAX_PROCS) continue;
                    gpus[i].procs[gpus[i].nprocs++] = (gpu_proc){pid, used};
                    placed++;
                    break;
                }
        }
        if (!nl) break;
        p = nl + 1;
    }
    return placed;
}

/* ---- probe ---- */

gpu_probe *gpu_probe_open(const char *const *fakes, char *err, size_t errlen)
{
    if (err && errlen) err[0] = 0;
    gpu_probe *p = calloc(1, sizeof *p);
    if (!p) {
        err_out(err, errlen, "out of memory");
        return NULL;
    }
    if (fakes && fakes[0]) {
        for (int i = 0; fakes[i]; i++) {
            if (i >= GPU_MAX) {
                err_out(err, errlen, "at most %d fake GPUs", GPU_MAX);
                free(p);
                return NULL;
            }
            int k = gpu_parse_fake_line(fakes[i], i, &p->fakes[i], err, errlen);
            if (k != 1) {
                if (k == 0 || k == 2) err_out(err, errlen, "fake GPU \"%s\": expected NAME:TOTAL_GB:FREE_GB", fakes[i]);
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
        if (smi_read(p->smi_path, tmp, GPU_MAX, NULL, 0) > 0) {
            p->src = GPU_SRC_SMI;
            return p;
        }
    }
    p->src = GPU_SRC_NONE;
    return p;
}

gpu_probe *gpu_probe_open_file(const char *path, char *err, size_t errlen)
{
    if (err && errlen) err[0] = 0;
    gpu_probe *p = calloc(1, sizeof *p);
    if (!p) {
        err_out(err, errlen, "out of memory");
        return NULL;
    }
    if (!path || strlen(path) >= sizeof p->fake_file) {
        err_out(err, errlen, "fake GPU file name missing or too long");
        free(p);
        return NULL;
    }
    snprintf(p->fake_file, sizeof p->fake_file, "%s", path);
    /* A file that says "lost" is valid: the worker starts and reports it. */
    gpu_info tmp[GPU_MAX];
    if (gpu_read_fake_file(path, tmp, GPU_MAX, p->error, sizeof p->error) < 0 &&
        !strstr(p->error, "marks the GPU lost")) {
        err_out(err, errlen, "%s", p->error);
        free(p);
        return NULL;
    }
    p->error[0] = 0;
    p->src = GPU_SRC_FAKE;
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

/* After a failed read NVML is initialised again, which is what brings a GPU
 * back after a driver reset or a resume that lost its context. */
static int nvml_read_again(gpu_probe *p, gpu_info *out, int max)
{
    if (p->nvml_failed) {
        p->nvml.shutdown();
        nvmlReturn_t rc = p->nvml.init();
        if (rc != NVML_SUCCESS) {
            char why[96];
            err_out(p->error, sizeof p->error, "NVML cannot start again: %s", nvml_why(&p->nvml, rc, why, sizeof why));
            return -1;
        }
    }
    int n = nvml_read(&p->nvml, out, max, p->error, sizeof p->error);
    p->nvml_failed = n < 0;
    return n;
}

int gpu_probe_read(gpu_probe *p, gpu_info *out, int max)
{
    if (!p || !out || max < 0) return -1;
    if (max > GPU_MAX) max = GPU_MAX;
    p->error[0] = 0;
    switch (p->src) {
    case GPU_SRC_FAKE: {
        int n;
        if (p->fake_file[0]) {
            n = gpu_read_fake_file(p->fake_file, out, max, p->error, sizeof p->error);
        } else {
            n = p->nfake < max ? p->nfake : max;
            memcpy(out, p->fakes, (size_t)n * sizeof *out);
        }
        /* Stopped engines' memory comes back once its release time passed. */
        int64_t now = mono_ms();
        for (int i = 0; i < p->ncharges;)
            if (p->gone_at[i] && now >= p->gone_at[i]) {
                p->ncharges--;
                p->charges[i] = p->charges[p->ncharges];
                p->gone_at[i] = p->gone_at[p->ncharges];
            } else {
                i++;
            }
        gpu_charge held[GPU_MAX_PROCS];
        for (int i = 0; i < p->ncharges; i++) held[i] = (gpu_charge){p->gone_at[i] ? 0 : p->charges[i].pid, p->charges[i].bytes};
        if (n > 0) gpu_fake_apply_charges(out, n, held, p->ncharges);
        return n;
    }
    case GPU_SRC_NVML: return nvml_read_again(p, out, max);
    case GPU_SRC_SMI: return smi_read(p->smi_path, out, max, p->error, sizeof p->error);
    case GPU_SRC_NONE: break;
    }
    return 0;
}

static int charge_of(const gpu_probe *p, int pid)
{
    for (int i = 0; i < p->ncharges; i++)
        if (p->charges[i].pid == pid && !p->gone_at[i]) return i;
    return -1;
}

void gpu_probe_charge(gpu_probe *p, int pid, uint64_t bytes)
{
    if (!p || p->src != GPU_SRC_FAKE || pid <= 0) return;
    int i = charge_of(p, pid);
    if (i < 0 && p->ncharges < GPU_MAX_PROCS) i = p->ncharges++;
    if (i < 0) return;
    p->charges[i] = (gpu_charge){pid, bytes};
    p->gone_at[i] = 0;
}

void gpu_probe_uncharge(gpu_probe *p, int pid)
{
    if (!p) return;
    int i = charge_of(p, pid);
    if (i < 0) return;
    if (p->release_ms > 0) {
        p->gone_at[i] = mono_ms() + p->release_ms;
        return;
    }
    p->charges[i] = p->charges[--p->ncharges];
    p->gone_at[i] = p->gone_at[p->ncharges];
}

void gpu_probe_set_release_ms(gpu_probe *p, int64_t ms)
{
    if (p) p->release_ms = ms;
}

const char *gpu_probe_error(const gpu_probe *p)
{
    return p ? p->error : "no GPU probe";
}

int gpu_reasons_throttled(unsigned long long reasons)
{
    /* NVML's clock event reasons: SW thermal (0x20), HW slowdown (0x8), HW
     * thermal (0x40), HW power brake (0x80).  Idle (0x1), application clocks
     * (0x2) and the software power cap (0x4, normal at full load) are not
     * trouble. */
    return (reasons & (0x8ULL | 0x20ULL | 0x40ULL | 0x80ULL)) != 0;
}

static json_t *int_or_null(int v)
{
    return v < 0 ? json_null() : json_integer(v);
}

json_t *gpu_info_json(const gpu_info *g)
{
    if (!g) return NULL;
    return json_pack("{s:i, s:s, s:s, s:I, s:I, s:o, s:o, s:o, s:o}",
                     "index", g->index,
                     "name", g->name,
                     "uuid", g->uuid,
                     "total_bytes", (json_int_t)g->total_bytes,
                     "free_bytes", (json_int_t)g->free_bytes,
                     "temperature_c", int_or_null(g->temp_c),
                     "utilization_pct", int_or_null(g->util_pct),
                     "foreign_processes", int_or_null(g->foreign_procs),
                     "throttled", g->throttled < 0 ? json_null() : json_boolean(g->throttled));
}
