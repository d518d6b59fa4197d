/* worker/managed: engines the worker starts on demand for one model each.
 *
 * A model is declared with --load NAME=FILE.gguf[,ctx=N][,parallel=N]
 * [,keep-alive=D][,ctk=T][,ctv=T][,fa=on|off][,pin].  At start the planner
 * sizes it from the GGUF header (the bytes one GPU needs at that context,
 * slot count and cache types), unless an earlier start of the same file
 * and settings measured it (worker/measured): then the measurement counts.
 * Heartbeats offer it as loadable with that need.
 *
 * With sha256=HEX the file's digest is known: the worker checks its file
 * against it and offers the file to peers; when the file is missing it is
 * fetched from a peer that holds it (worker/peerfetch) and the model is
 * "fetching", not offered, until the verified file is in place.
 *
 * This file owns one engine's process: the command line from the template
 * (--engine-cmd), its log file (DATA/logs/NAME.log, the previous start's
 * kept as NAME.log.1), waiting until it answers or the load timeout, the
 * log's last lines when it fails, and the buffer sizes it printed
 * (worker/memlog) when it succeeds.  When to start and stop engines is the
 * agent's (worker/loader.c, worker/residency). */
#ifndef GPUPOOL_MANAGED_H
#define GPUPOOL_MANAGED_H

#include <jansson.h>
#include <stdint.h>

#include "worker/engine.h"
#include "worker/measured.h"
#include "worker/memlog.h"

/* What every --load model shares: where its files go and the margin kept
 * on top of what it needs. */
typedef struct managed_defaults {
    char data_dir[512];
    double margin_pct;
    uint64_t margin_bytes;
    uint64_t overhead_bytes;  /* CUDA context and the like, which no buffer line shows */
} managed_defaults;

typedef struct managed_spec {
    /* from --load, read-only once parsed */
    char name[128];
    char gguf[512];
    int ctx, parallel;
    char ctk[16], ctv[16];
    int flash_attn;
    int pinned;
    int64_t keep_alive_ms;     /* the default after a request; RES_FOREVER never */
    char log_path[700];
    char measured_path[600];
    managed_defaults defaults;
    uint64_t estimate_bytes;   /* the planner's figure */
    char engine_cmd[1024];     /* its own start template (a catalogue "command" engine); "" = the worker's */
    char pinned_sha256[65];    /* the file's expected digest, from the catalogue or --load sha256=; "" = none */
    /* live, under the worker's lock */
    uint64_t need_bytes;       /* what a start needs: the measurement's when there is one */
    int measured;              /* meas is valid */
    measured_entry meas;
    uint64_t charged_bytes;    /* VRAM the running engine holds (its need when it started) */
    int64_t keep_alive_cur_ms; /* after the last request: its keep_alive, or the default */
    int loading;               /* a start is under way */
    int fetching;              /* the file is being fetched from a peer: not offered, not sized yet */
    int64_t last_used_ms;      /* monotonic: the last request's end, or the start */
    int64_t started_ms;
    int starts;
    char last_error[600];      /* why the last start failed, with the log's last lines */
    char sha256[65];           /* the GGUF file's digest (worker/filehash); "" until hashed */
    int hash_state;            /* 0 not hashed yet, > 0 sha256 holds it, < 0 the file could not be read
                                * (worker/wcatalog: 2 and -2 while a re-check is due) */
} managed_spec;

/* The default command: llama.cpp's server. */
#define MANAGED_LOAD_USAGE \
    "--load wants NAME=FILE.gguf[,sha256=HEX][,ctx=N][,parallel=N][,keep-alive=D][,ctk=T][,ctv=T][,fa=on|off][,pin]"

#define MANAGED_DEFAULT_CMD \
    "llama-server -m {model} --alias {name} --host 127.0.0.1 --port {port} -c {ctx_total} -np {parallel} " \
    "--kv-unified -ngl 999 -ctk {cache_type_k} -ctv {cache_type_v} -fa {flash_attn}"

/* Parses a --load value, sizes the model with the planner and reads an
 * earlier measurement from d->data_dir.  0, or -1 with a one-line reason. */
int managed_parse(const char *spec, const managed_defaults *d, engine *e, char *err, size_t errlen);
/* Sizes a model whose file has just arrived (it was fetching): the
 * planner's figure and an earlier measurement, as managed_parse does.
 * Reads the file; call on a copy without the worker's lock. */
int managed_size(managed_spec *m, char *err, size_t errlen);
/* The command line for one start: {model} {name} {port} {ctx} {ctx_total}
 * {parallel} {cache_type_k} {cache_type_v} {flash_attn} {self} replaced.
 * Pure; for tests.  Returns argc or -1. */
int managed_argv(const char *tmpl, const managed_spec *m, int port, const char *self, char *out, size_t outlen,
                 char **argv, int maxargs);
/* Starts the engine with its output going to its log, and waits until it
 * answers (or timeout_ms passes).  Fills e->url and e->child, and *mem with
 * the buffer sizes its log shows (*have_mem 1 when it shows a whole load).
 * On failure the reason ends with the log's last lines.  Blocking; call
 * without the worker's lock. */
int managed_start(engine *e, const char *tmpl, int64_t timeout_ms, memlog_figures *mem, int *have_mem, char *err,
                  size_t errlen);
/* The need a measurement implies: the buffers, the engine's overhead, and
 * the margin, as the planner adds them. */
uint64_t managed_measured_need(const managed_defaults *d, const measured_entry *e);
/* A measurement of this model's settings from its log figures. */
int managed_measurement(const managed_spec *m, const memlog_figures *f, int64_t wall_s, measured_entry *out,
                        char *err, size_t errlen);
/* The last `lines` non-empty lines of text, joined by " | " into out.  Pure. */
void managed_log_tail(const char *text, int lines, char *out, size_t outlen);
/* The heartbeat's fields for a started model, at `now`. */
json_t *managed_json(const managed_spec *m, int running, int64_t now);

#endif
