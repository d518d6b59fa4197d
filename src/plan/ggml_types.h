/* plan/ggml_types: the ggml tensor types a GGUF file may name, with the
 * block size and bytes per block that decide how much memory a tensor takes.
 * The numbering is the on-disk one (enum ggml_type in ggml.h); the sizes are
 * those of ggml's type_traits table. */
#ifndef GPUPOOL_PLAN_GGML_TYPES_H
#define GPUPOOL_PLAN_GGML_TYPES_H

#include <stdbool.h>
#include <stdint.h>

enum ggml_type {
    GGML_TYPE_F32 = 0,
    GGML_TYPE_F16 = 1,
    GGML_TYPE_Q4_0 = 2,
    GGML_TYPE_Q4_1 = 3,
    /* 4 and 5 (Q4_2, Q4_3) were removed from ggml and never appear in GGUF. */
    GGML_TYPE_Q5_0 = 6,
    GGML_TYPE_Q5_1 = 7,
    GGML_TYPE_Q8_0 = 8,
    GGML_TYPE_Q8_1 = 9,
    GGML_TYPE_Q2_K = 10,
    GGML_TYPE_Q3_K = 11,
    GGML_TYPE_Q4_K = 12,
    GGML_TYPE_Q5_K = 13,
    GGML_TYPE_Q6_K = 14,
    GGML_TYPE_Q8_K = 15,
    GGML_TYPE_IQ2_XXS = 16,
    GGML_TYPE_IQ2_XS = 17,
    GGML_TYPE_IQ3_XXS = 18,
    GGML_TYPE_IQ1_S = 19,
    GGML_TYPE_IQ4_NL = 20,
    GGML_TYPE_IQ3_S = 21,
    GGML_TYPE_IQ2_S = 22,
    GGML_TYPE_IQ4_XS = 23,
    GGML_TYPE_I8 = 24,
    GGML_TYPE_I16 = 25,
    GGML_TYPE_I32 = 26,
    GGML_TYPE_I64 = 27,
    GGML_TYPE_F64 = 28,
    GGML_TYPE_IQ1_M = 29,
    GGML_TYPE_BF16 = 30,
    /* 31..33 (Q4_0_4_4 etc.) and 36..38 (IQ4_NL_4_4 etc.) were runtime
     * repackings; ggml no longer accepts them in files. */
    GGML_TYPE_TQ1_0 = 34,
    GGML_TYPE_TQ2_0 = 35,
    GGML_TYPE_MXFP4 = 39,
    GGML_TYPE_COUNT = 40,
};

typedef struct ggml_type_info {
    const char *name;   /* ggml's spelling, e.g. "q4_K" */
    uint32_t blck;      /* elements per block */
    uint32_t size;      /* bytes per block */
} ggml_type_info;

/* The entry for a type id, or NULL when ggml has no such type in files. */
const ggml_type_info *ggml_type_get(uint32_t type);

/* Type id by name, case-insensitive ("Q8_0", "q4_k", "bf16"); -1 if unknown. */
int ggml_type_from_name(const char *name);

/* Bytes taken by n elements stored as one run of blocks: n/blck*size.  False
 * when n is not a whole number of blocks or the result overflows. */
bool ggml_type_nbytes(uint32_t type, uint64_t n, uint64_t *out);

#endif
