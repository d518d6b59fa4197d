/* worker/gpu: discovers this machine's GPUs and reads their live state,
 * compute processes included.
 *
 * Sources, in order: NVML loaded with dlopen (libnvidia-ml.so.1, no headers
 * needed), else the CSV output of `nvidia-smi --query-gpu=...` and
 * `--query-compute-apps=...`, else none.  Fake GPUs replace discovery, for
 * tests and demos: fixed ones from the command line (--fake-gpu
 * NAME:TOTAL_GB:FREE_GB), or a file read again at every probe so a test can
 * change them while the worker runs (--fake-gpu-file).  Fake GPUs also
 * account for the engines the worker starts (gpu_probe_charge): while one
 * runs, their free memory is lower by its share and it is listed as a
 * compute process there, as a real GPU would show it. */
#ifndef GPUPOOL_GPU_H
#define GPUPOOL_GPU_H

#include <jansson.h>
#include <stdint.h>

#define GPU_MAX 16
#define GPU_MAX_PROCS 32
#define GPU_USED_UNKNOWN UINT64_MAX

/* A compute process holding memory on a GPU.  The pid is as the driver sees
 * it: in a container without the host's PID namespace it names no process
 * there. */
typedef struct gpu_proc {
    int pid;
    uint64_t used_bytes;   /* GPU_USED_UNKNOWN when the driver will not say */
} gpu_proc;

typedef struct gpu_info {
    int index;
    char name[96];
    char uuid[96];
    uint64_t total_bytes, free_bytes;
    int temp_c;          /* -1 unknown */
    int util_pct;        /* -1 unknown */
    int throttled;       /* clocks held down by heat or a hardware slowdown: 1, 0, or -1 unknown */
    int foreign_procs;   /* compute processes that are not this worker's, -1 unknown; the
                          * probe fills in all of them, the worker its own count */
    int nprocs;          /* entries in procs, -1 when the source cannot list them */
    gpu_proc procs[GPU_MAX_PROCS];
} gpu_info;

/* VRAM held by one engine process the worker started; pid 0: memory of an
 * engine that has stopped, not yet given back (no process holds it). */
typedef struct gpu_charge {
    int pid;
    uint64_t bytes;
} gpu_charge;

typedef enum gpu_source { GPU_SRC_NONE, GPU_SRC_FAKE, GPU_SRC_NVML, GPU_SRC_SMI } gpu_source;

typedef struct gpu_probe gpu_probe;

/* fakes: NULL-terminated list of "NAME:TOTAL_GB:FREE_GB" specs, or NULL. */
gpu_probe *gpu_probe_open(const char *const *fakes, char *err, size_t errlen);
/* Fake GPUs from a file read at every gpu_probe_read: one GPU a line as
 * "NAME:TOTAL_GB:FREE_GB [proc=PID[:USED_GB]]...", `#` comments, and a line
 * "lost" (or "fail") making reads fail, as a GPU whose context is gone after
 * a sleep does.  The file must parse when opened. */
gpu_probe *gpu_probe_open_file(const char *path, char *err, size_t errlen);
void gpu_probe_close(gpu_probe *p);
gpu_source gpu_probe_source(const gpu_probe *p);
const char *gpu_source_name(gpu_source s);
/* Reads the current state of every GPU; returns the count (0..GPU_MAX) or -1
 * (gpu_probe_error says why). */
int gpu_probe_read(gpu_probe *p, gpu_info *out, int max);
/* Why the last read failed, in one line ("" after a good one). */
const char *gpu_probe_error(const gpu_probe *p);
/* An engine the worker started holds `bytes` of VRAM (replacing what pid
 * held before) / has stopped.  Only fake GPUs take notice; real ones show
 * the memory themselves.  Not thread-safe: serialise with reads. */
void gpu_probe_charge(gpu_probe *p, int pid, uint64_t bytes);
void gpu_probe_uncharge(gpu_probe *p, int pid);
/* Fake GPUs give a stopped engine's memory back only `ms` after the stop,
 * as a driver tearing down a context does (tests of the wait for it). */
void gpu_probe_set_release_ms(gpu_probe *p, int64_t ms);

/* Pure parsers, exposed for tests. */
int gpu_parse_fake(const char *spec, gpu_info *out, char *err, size_t errlen);
/* Parses `nvidia-smi --query-gpu=index,name,uuid,memory.total,memory.free,
 * temperature.gpu,utilization.gpu --format=csv,noheader,nounits` output. */
int gpu_parse_smi_csv(const char *text, gpu_info *out, int max);
/* Parses `nvidia-smi --query-compute-apps=pid,used_memory,gpu_uuid
 * --format=csv,noheader,nounits` output into the process lists of the GPUs
 * given (matched by uuid); every GPU's list is set, empty when nothing runs
 * there.  Returns the processes placed. */
int gpu_parse_smi_apps(const char *text, gpu_info *gpus, int n);
/* Parses one line of a fake GPU file (see gpu_probe_open_file): 1 for a GPU,
 * 0 for a blank or comment line, 2 for "lost"/"fail", -1 when malformed. */
int gpu_parse_fake_line(const char *line, int index, gpu_info *out, char *err, size_t errlen);
/* Reads a whole fake GPU file: the count, or -1 (err set) when it is
 * unreadable, malformed or says "lost". */
int gpu_read_fake_file(const char *path, gpu_info *out, int max, char *err, size_t errlen);

/* Takes charges off fake GPUs' free memory, the first GPU first (as layers
 * fill them), and lists each (but pid 0) as a compute process holding its
 * part on every GPU it reaches.  Pure; for the probe and its tests. */
void gpu_fake_apply_charges(gpu_info *g, int n, const gpu_charge *c, int nc);

json_t *gpu_info_json(const gpu_info *g);

/* Whether NVML's clock event (throttle) reasons say heat or a hardware
 * slowdown holds the clocks down: 1 or 0. */
int gpu_reasons_throttled(unsigned long long reasons);

#endif
