/* unit: api/jsoncase, the camelCase <-> snake_case renaming of JSON keys:
 * names, whole request and answer trees, the subtrees left alone. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <jansson.h>

#include "api/jsoncase.h"

static void key_names(void **state)
{
    (void)state;
    static const char *const snake[][2] = {
        {"maxTokens", "max_tokens"}, {"max_tokens", "max_tokens"}, {"idempotencyKey", "idempotency_key"},
        {"userID", "user_id"}, {"HTTPServer", "http_server"}, {"topP", "top_p"}, {"n", "n"},
        {"X-Gpupool-Case", "X-Gpupool-Case"}, {"", ""}, {"toolCallId", "tool_call_id"}};
    char out[64];
    for (size_t i = 0; i < sizeof snake / sizeof snake[0]; i++) {
        assert_true(jsoncase_to_snake(snake[i][0], out, sizeof out) >= 0);
        assert_string_equal(out, snake[i][1]);
    }
    static const char *const camel[][2] = {
        {"max_tokens", "maxTokens"}, {"success_rate_1h", "successRate1h"}, {"id", "id"},
        {"queue_position", "queuePosition"}, {"sim-llama-8b", "sim-llama-8b"}, {"Already", "Already"},
        {"a__b", "a_B"}, {"trailing_", "trailing_"}};
    for (size_t i = 0; i < sizeof camel / sizeof camel[0]; i++) {
        assert_true(jsoncase_to_camel(camel[i][0], out, sizeof out) >= 0);
        assert_string_equal(out, camel[i][1]);
    }
    char tiny[4];
    assert_int_equal(jsoncase_to_snake("maxTokens", tiny, sizeof tiny), -1);
    assert_int_equal(jsoncase_to_camel("max_tokens", tiny, sizeof tiny), -1);
}

static void assert_json(json_t *j, const char *expect)
{
    char *s = json_dumps(j, JSON_COMPACT);
    assert_string_equal(s, expect);
    free(s);
}

static void trees_to_snake(void **state)
{
    (void)state;
    json_t *j = json_loads("{\"type\":\"chat\",\"maxAttempts\":2,\"idempotencyKey\":\"k\",\"input\":{\"messages\":"
                           "[{\"role\":\"user\",\"content\":\"keepThisValue\",\"toolCallId\":\"x\"}],\"maxTokens\":5,"
                           "\"responseFormat\":{\"type\":\"json_schema\",\"jsonSchema\":{\"name\":\"n\",\"schema\":"
                           "{\"properties\":{\"firstName\":{\"type\":\"string\"}}}}},"
                           "\"metadata\":{\"orderId\":\"7\"},\"logitBias\":{\"50256\":-100},"
                           "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":"
                           "{\"properties\":{\"cityName\":{}}}}}]}}",
                           0, NULL);
    assert_int_equal(jsoncase_keys_to_snake(j), 0);
    assert_json(j, "{\"type\":\"chat\",\"max_attempts\":2,\"idempotency_key\":\"k\",\"input\":{\"messages\":"
                   "[{\"role\":\"user\",\"content\":\"keepThisValue\",\"tool_call_id\":\"x\"}],\"max_tokens\":5,"
                   "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"n\",\"schema\":"
                   "{\"properties\":{\"firstName\":{\"type\":\"string\"}}}}},"
                   "\"metadata\":{\"orderId\":\"7\"},\"logit_bias\":{\"50256\":-100},"
                   "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":"
                   "{\"properties\":{\"cityName\":{}}}}}]}}");
    json_decref(j);
    /* The same field in both cases: the one already in snake_case wins,
     * whichever came first. */
    j = json_loads("{\"maxTokens\":1,\"max_tokens\":2}", 0, NULL);
    jsoncase_keys_to_snake(j);
    assert_json(j, "{\"max_tokens\":2}");
    json_decref(j);
    j = json_loads("{\"max_tokens\":2,\"maxTokens\":1}", 0, NULL);
    jsoncase_keys_to_snake(j);
    assert_json(j, "{\"max_tokens\":2}");
    json_decref(j);
}

static void trees_to_camel(void **state)
{
    (void)state;
    json_t *j = json_loads("{\"object\":\"list\",\"data\":[{\"id\":\"node-1\",\"free_vram_bytes\":1,\"profile\":"
                           "{\"models\":{\"qwen2_5_7b\":{\"ttft_ms\":1.5}},\"success_rate_1h\":null},"
                           "\"models\":[\"sim_model\"]}]}",
                           0, NULL);
    jsoncase_keys_to_camel(j);
    /* Model names as keys stay; the figures inside are renamed. */
    assert_json(j, "{\"object\":\"list\",\"data\":[{\"id\":\"node-1\",\"freeVramBytes\":1,\"profile\":"
                   "{\"models\":{\"qwen2_5_7b\":{\"ttftMs\":1.5}},\"successRate1h\":null},"
                   "\"models\":[\"sim_model\"]}]}");
    json_decref(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(key_names),
        cmocka_unit_test(trees_to_snake),
        cmocka_unit_test(trees_to_camel),
    };
    return cmocka_run_group_tests_name("jsoncase", tests, NULL, NULL);
}
