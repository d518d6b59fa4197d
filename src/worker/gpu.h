/* worker/gpu: discovers this machine's GPUs and reads their live state.
 *
 * Sources, in order: NVML loaded with dlopen (libnvidia-ml.so.1, no headers
 * needed), else the CSV output of `nvidia-smi --query-gpu=...`, else none.
 * Fake GPUs given on the command line (--fake-gpu NAME:TOTAL_GB:FREE_GB)
 * replace discovery, for tests and demos. */
#ifndef GPUPOOL_GPU_H
#define GPUPOOL_GPU_H

#include <jansson.h>
#include <stdint.h>

#define GPU_MAX 16

typedef struct gpu_info {
    int index;
    char name[96];
    char uuid[96];
    uint64_t total_bytes, free_bytes;
    int temp_c;          /* -1 unknown */
    int util_pct;        /* -1 unknown */
    int foreign_procs;   /* compute processes on this GPU, -1 unknown */
} gpu_info;

typedef enum gpu_source { GPU_SRC_NONE, GPU_SRC_FAKE, GPU_SRC_NVML, GPU_SRC_SMI } gpu_source;

typedef struct gpu_probe gpu_probe;

/* fakes: NULL-terminated list of "NAME:TOTAL_GB:FREE_GB" specs, or NULL. */
gpu_probe *gpu_probe_open(const char *const *fakes, char *err, size_t errlen);
void gpu_probe_close(gpu_probe *p);
gpu_source gpu_probe_source(const gpu_probe *p);
const char *gpu_source_name(gpu_source s);
/* Reads the current state of every GPU; returns the count (0..GPU_MAX) or -1. */
int gpu_probe_read(gpu_probe *p, gpu_info *out, int max);

/* Pure parsers, exposed for tests. */
int gpu_parse_fake(const char *spec, gpu_info *out, char *err, size_t errlen);
/* Parses `nvidia-smi --query-gpu=index,name,uuid,memory.total,memory.free,
 * temperature.gpu,utilization.gpu --format=csv,noheader,nounits` output. */
int gpu_parse_smi_csv(const char *text, gpu_info *out, int max);

json_t *gpu_info_json(const gpu_info *g);

#endif
