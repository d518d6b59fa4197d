/* fuzz_gguf: libFuzzer target for the GGUF reader and everything a parsed
 * file feeds (hyperparameters, the estimate, the searches).  Any input must
 * end in a parsed file or a one-line error: no crash, no sanitizer report,
 * no allocation far beyond the input size.  Built and run by fuzz/run.sh. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "plan/arch.h"
#include "plan/gguf.h"
#include "plan/vram.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256];
    gguf_file *f = gguf_read_mem(data, size, err, sizeof err);
    if (!f) {
        /* The error is one non-empty line. */
        if (!err[0] || strchr(err, '\n')) abort();
        return 0;
    }
    plan_model *m = malloc(sizeof *m);
    if (m && plan_model_from_gguf(f, m, err, sizeof err) == 0) {
        plan_settings s;
        plan_settings_init(&s);
        plan_result r;
        plan_compute(m, &s, &r, err, sizeof err);
        s.n_gpu = 2;
        s.gpu_free[0] = 8ull << 30;
        s.gpu_free[1] = 4ull << 30;
        s.flash_attn = true;
        s.type_v = 8; /* q8_0 */
        s.parallel = 3;
        if (plan_compute(m, &s, &r, err, sizeof err) == 0) {
            plan_max_ngl(m, &s);
            plan_max_parallel(m, &s);
        }
    }
    free(m);
    gguf_free(f);
    return 0;
}
