/* plan: the VRAM planner's whole API, for `gpupool plan`, POST /v1/plan and
 * the scheduler.
 *
 *   plan_model *m = plan_model_open("x.gguf", err, sizeof err);   // or plan_model_preset()
 *   plan_settings s; plan_settings_init(&s); s.ctx = 8192; ...
 *   plan_result r;  plan_compute(m, &s, &r, err, sizeof err);      // pure
 *   json_t *j = plan_to_json(m, &s, &r);                           // CLI --json and /v1/plan
 *   uint64_t need = plan_need_bytes(m, NULL, ctx, parallel);       // scheduler: one GPU, all layers
 *
 * A plan_model is immutable once built and may be shared between threads. */
#ifndef GPUPOOL_PLAN_PLAN_H
#define GPUPOOL_PLAN_PLAN_H

#include <jansson.h>
#include <stddef.h>

#include "plan/model.h"
#include "plan/presets.h"
#include "plan/vram.h"

/* From a GGUF file (header only).  NULL with one line in err. */
plan_model *plan_model_open(const char *path, char *err, size_t errlen);
/* From a preset and a quant tier (NULL = Q4_K_M). */
plan_model *plan_model_preset(const char *preset, const char *quant, char *err, size_t errlen);
void plan_model_free(plan_model *m);

/* Read settings from a JSON object, over whatever *s holds.  Fields, all
 * optional: ctx, parallel, cache_type_k, cache_type_v, flash_attn, ubatch,
 * ngl (-1 = all), gpus ([bytes...] or ["12G", ...]), overhead (bytes or
 * "384M"), margin ("5%" or "5" or 5 = percent, "512M" = bytes).  0, or -1 with err. */
int plan_settings_from_json(const json_t *j, plan_settings *s, char *err, size_t errlen);

/* The whole answer as JSON: model, settings, parts, devices, fits, the
 * largest context and the most slots, partial offload and a split.  The
 * caller owns the reference; dump it with JSON_REAL_PRECISION(6) so the
 * few reals (slowdown, margin_pct) print short, as the CLI does. */
json_t *plan_to_json(const plan_model *m, const plan_settings *s, const plan_result *r);

/* "12G", "12GB", "12GiB", "8192M", "1.5T", "123456" (bytes unless
 * bare_unit is given, e.g. 'G' for --gpu) -> bytes; -1 if malformed.
 * Units are binary: 12G = 12 GiB, the way cards are sized. */
int plan_parse_size(const char *s, char bare_unit, uint64_t *out);

#endif
