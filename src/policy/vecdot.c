/* policy/vecdot: see vecdot.h. */
#include "policy/vecdot.h"

#include <string.h>

/* GCC/clang vector extension: four floats, so the loops below compile to
 * packed multiplies and adds on any x86-64 or ARM64 without -march flags. */
typedef float v4 __attribute__((vector_size(16)));

static inline v4 ld(const float *p)
{
    v4 v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline float hsum(v4 v) { return (v[0] + v[1]) + (v[2] + v[3]); }

/* One row at a time, four independent accumulators (16 floats a step), so
 * neither add latency nor the loads of q (which stay in L1) limit it.  Why
 * not several rows at once, sharing each load of q: measured on this class
 * of machine, interleaving 2 or 4 rows read DRAM at less than half the speed
 * of one sequential stream, while one row at a time runs at the speed of a
 * plain sum over the same bytes. */
void vecdot_many(const float *rows, int stride, uint32_t n, const float *q, float *out)
{
    for (uint32_t i = 0; i < n; i++) {
        const float *r = rows + (size_t)i * (size_t)stride;
        v4 a = {0}, b = {0}, c = {0}, d = {0};
        for (int k = 0; k < stride; k += 16) {
            a += ld(r + k) * ld(q + k);
            b += ld(r + k + 4) * ld(q + k + 4);
            c += ld(r + k + 8) * ld(q + k + 8);
            d += ld(r + k + 12) * ld(q + k + 12);
        }
        out[i] = hsum((a + b) + (c + d));
    }
}
