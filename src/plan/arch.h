/* plan/arch: turn a parsed GGUF file into a plan_model.  The key names and
 * the defaults for missing keys follow llama.cpp's llama_model::load_hparams;
 * the weight grouping follows its tensor placement in load_tensors. */
#ifndef GPUPOOL_PLAN_ARCH_H
#define GPUPOOL_PLAN_ARCH_H

#include <stddef.h>

#include "plan/gguf.h"
#include "plan/model.h"

/* Fill *m from f.  0 on success; -1 with one line in err. */
int plan_model_from_gguf(const gguf_file *f, plan_model *m, char *err, size_t errlen);

#endif
