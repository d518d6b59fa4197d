/* policy/vecdot: the semantic cache's one hot loop, the dot products of one
 * query with many stored vectors.  Pure; no allocation. */
#ifndef GPUPOOL_VECDOT_H
#define GPUPOOL_VECDOT_H

#include <stdint.h>

/* out[i] = dot(rows + i * stride, q) for i in [0, n).  stride is a multiple
 * of 16 floats; rows and q may have any alignment. */
void vecdot_many(const float *rows, int stride, uint32_t n, const float *q, float *out);

#endif
