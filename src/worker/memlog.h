/* worker/memlog: what an engine says it allocated, read from its log.
 *
 * llama.cpp's llama-server prints one line per buffer while it loads:
 *
 *   load_tensors:        CUDA0 model buffer size =  4403.49 MiB
 *   load_tensors:   CPU_Mapped model buffer size =   281.81 MiB
 *   llama_kv_cache:      CUDA0 KV buffer size =   512.00 MiB
 *   llama_context:      CUDA0 compute buffer size =   560.00 MiB
 *
 * The part before the first colon is the printing function, which changed
 * across versions (llm_load_tensors, llama_kv_cache_init,
 * llama_kv_cache_unified, llama_new_context_with_model, sched_reserve, ...),
 * and some builds put a timestamp or colour codes in front; so a line is
 * known by "NAME [KIND ]buffer size = X MiB" wherever it stands.  KIND is
 * model, KV, RS (a recurrent state, counted with the KV cache) or compute;
 * the oldest builds wrote "NAME buffer size" for model buffers.  Host
 * buffers (CPU, CPU_Mapped, CUDA_Host, ...) are RAM and counted apart.
 *
 * Newer builds size a model once without allocating (their fitting pass)
 * and print the same lines again for the real load; a model line after
 * KV or compute lines therefore starts over, so the last load counts.
 * Pure: text in, figures out. */
#ifndef GPUPOOL_MEMLOG_H
#define GPUPOOL_MEMLOG_H

#include <stddef.h>
#include <stdint.h>

typedef struct memlog_figures {
    uint64_t model_bytes, kv_bytes, compute_bytes;  /* summed over GPU buffers */
    uint64_t host_bytes;                            /* every host buffer */
    int gpu_buffers;                                /* GPU buffer lines counted */
    int lines;                                      /* buffer lines counted, host ones too */
} memlog_figures;

/* 1 when the text shows a whole load (a model buffer line and a KV or
 * compute line), 0 when it does not (yet).  `out` gets what was found
 * either way. */
int memlog_parse(const char *text, size_t len, memlog_figures *out);
/* model + KV + compute on the GPUs. */
uint64_t memlog_gpu_total(const memlog_figures *f);
/* Whether a buffer name is host memory (CPU, CPU_Mapped, CPU_REPACK,
 * CUDA_Host, Vulkan_Host, ...). */
int memlog_is_host(const char *name);

#endif
