/* worker/managed: engines the worker starts on demand for one model each.
 *
 * A model is declared with --load NAME=FILE.gguf[,ctx=N][,parallel=N]
 * [,keep-alive=S].  At start the planner sizes it from the GGUF header (the
 * bytes one GPU needs at that context and slot count); heartbeats offer it as
 * loadable with that need, so the coordinator sends it only to nodes where it
 * fits the free VRAM.  The first request starts the engine from the command
 * template (--engine-cmd), later ones wait for that same start; an engine idle
 * past its keep-alive is stopped.  Before starting, the worker checks the need
 * against its GPUs' free memory right now. */
#ifndef GPUPOOL_MANAGED_H
#define GPUPOOL_MANAGED_H

#include <stdint.h>

#include "worker/engine.h"

typedef struct managed_spec {
    char name[128];
    char gguf[512];
    int ctx, parallel;
    int64_t keep_alive_ms;
    uint64_t need_bytes;   /* the planner's estimate for one GPU */
    int loading;           /* a start is under way */
    int64_t last_used_ms;  /* monotonic */
} managed_spec;

/* The default command: llama.cpp's server. */
#define MANAGED_DEFAULT_CMD \
    "llama-server -m {model} --alias {name} --host 127.0.0.1 --port {port} -c {ctx_total} -np {parallel} " \
    "--kv-unified -ngl 999"

/* Parses a --load value and sizes the model with the planner.  0, or -1 with
 * a one-line reason. */
int managed_parse(const char *spec, engine *e, char *err, size_t errlen);
/* The command line for one start: {model} {name} {port} {ctx} {ctx_total}
 * {parallel} {self} replaced.  Pure; for tests.  Returns argc or -1. */
int managed_argv(const char *tmpl, const managed_spec *m, int port, const char *self, char *out, size_t outlen,
                 char **argv, int maxargs);
/* Starts the engine and waits until it answers (or timeout_ms passes).
 * Fills e->url and e->child.  Blocking; call without the worker's lock. */
int managed_start(engine *e, const char *tmpl, int64_t timeout_ms, char *err, size_t errlen);

#endif
