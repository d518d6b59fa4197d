/* plan/presets: popular architectures with their real layer and head
 * shapes, and quant tiers with their real average bits per weight, so the
 * planner can answer before a file is downloaded. */
#ifndef GPUPOOL_PLAN_PRESETS_H
#define GPUPOOL_PLAN_PRESETS_H

#include <stddef.h>
#include <stdint.h>

#include "plan/model.h"

typedef struct plan_quant {
    const char *name;   /* "Q4_K_M" */
    double bpw;         /* average bits per weight over a whole model */
} plan_quant;

/* Quant tier by name, case-insensitive ("q4_k_m", "fp16" = F16); NULL if unknown. */
const plan_quant *plan_quant_find(const char *name);
size_t plan_quant_count(void);
const plan_quant *plan_quant_at(size_t i);

/* llama.cpp's llama_ftype (general.file_type) as a name; NULL if unknown. */
const char *plan_ftype_name(uint64_t ftype);

size_t plan_preset_count(void);
const char *plan_preset_name(size_t i);
const char *plan_preset_desc(size_t i);

/* Build a model from a preset (case-insensitive; "7b" style aliases too)
 * and a quant tier.  0 on success; -1 with one line in err. */
int plan_model_from_preset(const char *preset, const char *quant, plan_model *m, char *err, size_t errlen);

#endif
