/* worker/engine: the inference engines a worker fronts, behind one small
 * interface.  Every engine speaks OpenAI's HTTP API for inference; they differ
 * in how they list models (/v1/models or Ollama's /api/tags) and report load
 * (llama-server's /slots).  The simulator is an engine the worker starts
 * itself; the others are adopted as they run and never stopped by gpupool. */
#ifndef GPUPOOL_ENGINE_H
#define GPUPOOL_ENGINE_H

#include <jansson.h>
#include <sys/types.h>

#define ENGINE_MAX_MODELS 32

typedef enum engine_kind { ENGINE_OPENAI, ENGINE_OLLAMA, ENGINE_SIM, ENGINE_MANAGED } engine_kind;

typedef struct engine {
    engine_kind kind;
    char url[256];          /* base URL, no trailing slash */
    pid_t child;            /* the simulator process we started, else 0 */
    int healthy;
    char error[200];
    char models[ENGINE_MAX_MODELS][128];
    int nmodels;
    int slots, slots_busy;  /* slots from /slots when the engine has it */
    int queued;             /* requests the engine holds waiting (its /metrics) */
    int default_slots;
    int inflight;
    /* ENGINE_MANAGED: started for one model on first use, stopped when idle
     * (worker/managed.c); healthy only while running. */
    struct managed_spec *managed;
} engine;

const char *engine_kind_name(engine_kind k);
/* "openai=URL", "ollama=URL" or "sim".  Returns 0, or -1 with a reason. */
int engine_parse_spec(const char *spec, engine *e, char *err, size_t errlen);
/* Starts the simulator as a child process on an ephemeral loopback port.
 * extra_args are passed to `gpupool sim-engine` (space separated). */
int engine_start_sim(engine *e, const char *extra_args, char *err, size_t errlen);
void engine_stop(engine *e);
/* Asks the engine what it serves and how busy it is.  Fills a copy so the
 * caller can swap it in under its own lock. */
void engine_refresh(const engine *e, engine *out);
int engine_has_model(const engine *e, const char *model);
json_t *engine_json(const engine *e);

/* Pure parsers, for tests. */
int engine_parse_models(engine_kind k, const char *json, char (*models)[128], int max);
/* llama-server /slots: an array of {"is_processing":bool} (or "state"). */
int engine_parse_slots(const char *json, int *total, int *busy);
/* Prometheus text from /metrics: llama-server's llamacpp:requests_processing
 * and llamacpp:requests_deferred, or vLLM's vllm:num_requests_running and
 * vllm:num_requests_waiting (summed over their labels).  Returns 0 when it
 * found either pair, -1 otherwise. */
int engine_parse_metrics(const char *text, int *running, int *waiting);

/* Looks for a running engine on this machine's usual ports (llama-server
 * 8080, vLLM 8000, Ollama 11434).  Returns 0 and fills e when one answers. */
int engine_autodetect(engine *e);

#endif
