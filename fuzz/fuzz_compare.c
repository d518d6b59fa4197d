/* fuzz_compare: libFuzzer target for the parsers of outside text that
 * rollouts and `gpupool compare` read.  Any bytes as a model's answer must
 * extract to JSON or to nothing without a crash, and what they extract to
 * must equal itself and compare against a reference without a leak; as an
 * input line they become a request or a reason; as a rollout body they
 * parse to a spec that is within its bounds, or to an error.  Built and run
 * by fuzz/run_compare.sh. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "policy/compare.h"
#include "sched/rollout.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *t = malloc(size + 1);
    if (!t) abort();
    memcpy(t, data, size);
    t[size] = 0;
    json_t *j = cmp_extract_json(t, size);
    if (j && !cmp_values_equal(j, j)) abort();
    json_decref(j);

    cmp_report r;
    cmp_init(&r, NULL, 0);
    cmp_add(&r, t, "{\"a\":1,\"b\":[1,2]}");
    cmp_add(&r, t, t);
    if (r.agree > r.total || r.items != 2) abort();
    cmp_free(&r);

    char err[200], param[64];
    int chat;
    json_t *body = cmp_request(t, "m", &chat, err, sizeof err);
    json_decref(body);

    json_t *spec_json = json_loadb(t, size, 0, NULL);
    ro_spec spec;
    if (spec_json && !ro_spec_parse(spec_json, &spec, param, sizeof param, err, sizeof err)) {
        if (spec.nsteps < 1 || spec.nsteps > RO_MAX_STEPS || spec.window < 1 || spec.window > RO_WINDOW_MAX ||
            spec.min_samples < 1 || spec.min_samples > spec.window)
            abort();
        for (int i = 0; i < spec.nsteps; i++)
            if (spec.steps[i] < 1 || spec.steps[i] > 100 || (i && spec.steps[i] <= spec.steps[i - 1])) abort();
    }
    json_decref(spec_json);
    free(t);
    return 0;
}
