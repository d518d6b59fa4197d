/* plan/ggml_types: the ggml type table (block sizes and bytes per block).
 * Every size below is the sizeof() of the matching block_* struct in ggml's
 * ggml-common.h; the comments give the layout so the figure can be checked. */
#include "plan/ggml_types.h"

#include <stddef.h>
#include <strings.h>

static const ggml_type_info types[GGML_TYPE_COUNT] = {
    [GGML_TYPE_F32] = {"f32", 1, 4},
    [GGML_TYPE_F16] = {"f16", 1, 2},
    [GGML_TYPE_Q4_0] = {"q4_0", 32, 18},       /* d:f16 + 16 nibble bytes */
    [GGML_TYPE_Q4_1] = {"q4_1", 32, 20},       /* d,m:f16 + 16 */
    [GGML_TYPE_Q5_0] = {"q5_0", 32, 22},       /* d + qh[4] + 16 */
    [GGML_TYPE_Q5_1] = {"q5_1", 32, 24},       /* d,m + qh[4] + 16 */
    [GGML_TYPE_Q8_0] = {"q8_0", 32, 34},       /* d + 32 int8 */
    [GGML_TYPE_Q8_1] = {"q8_1", 32, 36},       /* d,s + 32 */
    [GGML_TYPE_Q2_K] = {"q2_K", 256, 84},      /* scales[16] + qs[64] + d,dmin */
    [GGML_TYPE_Q3_K] = {"q3_K", 256, 110},     /* hmask[32] + qs[64] + scales[12] + d */
    [GGML_TYPE_Q4_K] = {"q4_K", 256, 144},     /* d,dmin + scales[12] + qs[128] */
    [GGML_TYPE_Q5_K] = {"q5_K", 256, 176},     /* d,dmin + scales[12] + qh[32] + qs[128] */
    [GGML_TYPE_Q6_K] = {"q6_K", 256, 210},     /* ql[128] + qh[64] + scales[16] + d */
    [GGML_TYPE_Q8_K] = {"q8_K", 256, 292},     /* d:f32 + qs[256] + bsums[16]:i16 */
    [GGML_TYPE_IQ2_XXS] = {"iq2_xxs", 256, 66},/* d + qs[32]:u16 */
    [GGML_TYPE_IQ2_XS] = {"iq2_xs", 256, 74},  /* d + qs[32]:u16 + scales[8] */
    [GGML_TYPE_IQ3_XXS] = {"iq3_xxs", 256, 98},/* d + qs[96] */
    [GGML_TYPE_IQ1_S] = {"iq1_s", 256, 50},    /* d + qs[32] + qh[8]:u16 */
    [GGML_TYPE_IQ4_NL] = {"iq4_nl", 32, 18},   /* d + qs[16] */
    [GGML_TYPE_IQ3_S] = {"iq3_s", 256, 110},   /* d + qs[64] + qh[8] + signs[32] + scales[4] */
    [GGML_TYPE_IQ2_S] = {"iq2_s", 256, 82},    /* d + qs[64] + qh[8] + scales[8] */
    [GGML_TYPE_IQ4_XS] = {"iq4_xs", 256, 136}, /* d + scales_h:u16 + scales_l[4] + qs[128] */
    [GGML_TYPE_I8] = {"i8", 1, 1},
    [GGML_TYPE_I16] = {"i16", 1, 2},
    [GGML_TYPE_I32] = {"i32", 1, 4},
    [GGML_TYPE_I64] = {"i64", 1, 8},
    [GGML_TYPE_F64] = {"f64", 1, 8},
    [GGML_TYPE_IQ1_M] = {"iq1_m", 256, 56},    /* qs[32] + qh[16] + scales[8] */
    [GGML_TYPE_BF16] = {"bf16", 1, 2},
    [GGML_TYPE_TQ1_0] = {"tq1_0", 256, 54},    /* qs[48] + qh[4] + d */
    [GGML_TYPE_TQ2_0] = {"tq2_0", 256, 66},    /* qs[64] + d */
    [GGML_TYPE_MXFP4] = {"mxfp4", 32, 17},     /* e:u8 + qs[16] */
};

const ggml_type_info *ggml_type_get(uint32_t type)
{
    if (type >= GGML_TYPE_COUNT || !types[type].name) return NULL;
    return &types[type];
}

int ggml_type_from_name(const char *name)
{
    if (!name) return -1;
    for (int i = 0; i < GGML_TYPE_COUNT; i++)
        if (types[i].name && !strcasecmp(types[i].name, name)) return i;
    return -1;
}

bool ggml_type_nbytes(uint32_t type, uint64_t n, uint64_t *out)
{
    const ggml_type_info *t = ggml_type_get(type);
    if (!t || n % t->blck) return false;
    uint64_t blocks = n / t->blck;
    if (blocks && t->size > UINT64_MAX / blocks) return false;
    *out = blocks * t->size;
    return true;
}
