/* fuzz_json_skim: libFuzzer target for util/json_skim through
 * call_sample_parse_answer, the reader of every engine answer on the proxy's
 * hot path.  Any bytes must be skimmed without a crash or sanitizer report,
 * and a text that jansson parses must give exactly what the full parse gives
 * (completion_tokens, timings.prompt_ms, timings.predicted_ms).
 * Built and run by fuzz/run_json_skim.sh. */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sched/profile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *t = (const char *)data;
    call_sample got = {0};
    call_sample_parse_answer(&got, t, size);
    /* jansson reads a NUL byte between tokens as if it were not there; the
     * skim refuses such text (it is not JSON), so the two are not compared. */
    if (memchr(t, 0, size)) return 0;
    json_t *j = json_loadb(t, size, 0, NULL);
    if (!j) return 0; /* malformed: only the absence of a crash counts */
    call_sample want = {0};
    json_t *usage = json_object_get(j, "usage"), *timings = json_object_get(j, "timings");
    json_t *ct = json_object_get(usage, "completion_tokens");
    int ct_in_range = 1;
    if (json_is_integer(ct)) {
        json_int_t v = json_integer_value(ct);
        ct_in_range = v >= -2147483647 - 1 && v <= 2147483647;
        want.completion_tokens = ct_in_range ? (int)v : 0;
    }
    json_t *pm = json_object_get(timings, "prompt_ms"), *dm = json_object_get(timings, "predicted_ms");
    if (json_is_number(pm)) want.engine_prompt_ms = json_number_value(pm);
    if (json_is_number(dm)) want.engine_decode_ms = json_number_value(dm);
    json_decref(j);
    if (ct_in_range && got.completion_tokens != want.completion_tokens) abort();
    if (got.engine_prompt_ms != want.engine_prompt_ms || got.engine_decode_ms != want.engine_decode_ms) abort();
    return 0;
}
