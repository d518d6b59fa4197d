/* Unit tests: request validation, engine answers, address ranges, options
 * and buffers — the parsers of outside data that need no sockets. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/validate.h"
#include "node/cidr.h"
#include "util/buf.h"
#include "util/ids.h"
#include "util/opts.h"
#include "util/str.h"
#include "worker/engine.h"
#include "worker/managed.h"

static int check(api_kind k, const char *text, api_invalid *why)
{
    json_t *j = json_loads(text, 0, NULL);
    assert_non_null(j);
    int rc = api_validate_body(k, j, why);
    json_decref(j);
    return rc;
}

static void validate_accepts_good_bodies(void **state)
{
    (void)state;
    api_invalid why;
    assert_int_equal(check(KIND_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", &why), 0);
    assert_int_equal(check(KIND_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"x\"}]}],\"stream\":true,\"max_tokens\":5,\"temperature\":0.2}", &why), 0);
    assert_int_equal(check(KIND_COMPLETION, "{\"model\":\"m\",\"prompt\":[\"a\",\"b\"]}", &why), 0);
    assert_int_equal(check(KIND_EMBEDDING, "{\"model\":\"m\",\"input\":\"a\"}", &why), 0);
}

static void validate_names_the_field(void **state)
{
    (void)state;
    api_invalid why;
    assert_int_equal(check(KIND_CHAT, "{\"messages\":[]}", &why), -1);
    assert_string_equal(why.code, "missing_field");
    assert_string_equal(why.param, "model");
    check(KIND_CHAT, "{\"model\":\"\",\"messages\":[]}", &why);
    assert_string_equal(why.code, "invalid_type");
    check(KIND_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\"},{\"role\":5}]}", &why);
    assert_string_equal(why.param, "messages[1]");
    check(KIND_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":3}]}", &why);
    assert_string_equal(why.code, "invalid_type");
    check(KIND_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\"}],\"max_tokens\":-1}", &why);
    assert_string_equal(why.code, "invalid_value");
    assert_string_equal(why.param, "max_tokens");
    check(KIND_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\"}],\"temperature\":\"hot\"}", &why);
    assert_string_equal(why.param, "temperature");
    check(KIND_EMBEDDING, "{\"model\":\"m\",\"input\":[1,2]}", &why);
    assert_string_equal(why.param, "input");
    check(KIND_EMBEDDING, "{\"model\":\"m\",\"input\":\"x\",\"stream\":true}", &why);
    assert_string_equal(why.param, "stream");
    check(KIND_COMPLETION, "{\"model\":\"m\",\"prompt\":[]}", &why);
    assert_string_equal(why.param, "prompt");
}

static void kinds_map_to_paths(void **state)
{
    (void)state;
    assert_int_equal(api_kind_from_task_type("chat"), KIND_CHAT);
    assert_int_equal(api_kind_from_task_type("video"), KIND_UNKNOWN);
    assert_int_equal(api_kind_from_task_type(NULL), KIND_UNKNOWN);
    assert_string_equal(api_kind_path(KIND_EMBEDDING), "/v1/embeddings");
    assert_string_equal(api_kind_task_type(KIND_COMPLETION), "completion");
}

static void engine_model_lists(void **state)
{
    (void)state;
    char models[4][128];
    assert_int_equal(engine_parse_models(ENGINE_OPENAI, "{\"object\":\"list\",\"data\":[{\"id\":\"llama\"},{\"id\":\"qwen\"}]}", models, 4), 2);
    assert_string_equal(models[1], "qwen");
    assert_int_equal(engine_parse_models(ENGINE_OLLAMA, "{\"models\":[{\"name\":\"llama3.1:8b\",\"model\":\"llama3.1:8b\"}]}", models, 4), 1);
    assert_string_equal(models[0], "llama3.1:8b");
    assert_int_equal(engine_parse_models(ENGINE_OPENAI, "not json", models, 4), -1);
    assert_int_equal(engine_parse_models(ENGINE_OPENAI, "{\"data\":{}}", models, 4), -1);
    assert_int_equal(engine_parse_models(ENGINE_OPENAI, "{\"data\":[{\"id\":1},{\"x\":2}]}", models, 4), 0);
    assert_int_equal(engine_parse_models(ENGINE_OPENAI, "{\"data\":[{\"id\":\"a\"},{\"id\":\"b\"},{\"id\":\"c\"}]}", models, 2), 2);
}

static void engine_slots(void **state)
{
    (void)state;
    int t, b;
    assert_int_equal(engine_parse_slots("[{\"id\":0,\"is_processing\":true},{\"id\":1,\"is_processing\":false},{\"id\":2,\"state\":1}]", &t, &b), 0);
    assert_int_equal(t, 3);
    assert_int_equal(b, 2);
    assert_int_equal(engine_parse_slots("{\"error\":\"slots disabled\"}", &t, &b), -1);
}

static void engine_metrics(void **state)
{
    (void)state;
    int run = -1, wait = -1;
    const char *llama = "# HELP llamacpp:requests_processing Number of requests processing.\n"
                        "# TYPE llamacpp:requests_processing gauge\n"
                        "llamacpp:requests_processing 3\n"
                        "llamacpp:requests_deferred 2\n";
    assert_int_equal(engine_parse_metrics(llama, &run, &wait), 0);
    assert_int_equal(run, 3);
    assert_int_equal(wait, 2);
    /* vLLM labels every sample; several models or engines add up */
    const char *vllm = "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
                       "vllm:num_requests_running{engine=\"0\",model_name=\"qwen\"} 4.0\n"
                       "vllm:num_requests_running{engine=\"1\",model_name=\"qwen\"} 1.0\n"
                       "vllm:num_requests_waiting{engine=\"0\",model_name=\"qwen\"} 7.0\n"
                       "vllm:num_requests_waiting_total 99\n";
    assert_int_equal(engine_parse_metrics(vllm, &run, &wait), 0);
    assert_int_equal(run, 5);
    assert_int_equal(wait, 7);
    assert_int_equal(engine_parse_metrics("go_goroutines 12\n", &run, &wait), -1);
    assert_int_equal(engine_parse_metrics("", &run, &wait), -1);
    assert_int_equal(engine_parse_metrics(NULL, &run, &wait), -1);
}

static void engine_specs(void **state)
{
    (void)state;
    engine e;
    char err[200];
    assert_int_equal(engine_parse_spec("openai=http://127.0.0.1:8080/v1/", &e, err, sizeof err), 0);
    assert_string_equal(e.url, "http://127.0.0.1:8080");
    assert_int_equal(e.kind, ENGINE_OPENAI);
    assert_int_equal(engine_parse_spec("ollama=http://h:11434", &e, err, sizeof err), 0);
    assert_int_equal(e.kind, ENGINE_OLLAMA);
    assert_int_equal(engine_parse_spec("sim", &e, err, sizeof err), 0);
    assert_int_equal(engine_parse_spec("openai=ftp://x", &e, err, sizeof err), -1);
    assert_int_equal(engine_parse_spec("tgi=http://x", &e, err, sizeof err), -1);
    assert_non_null(strstr(err, "unknown engine"));
}

static void managed_engine_command(void **state)
{
    (void)state;
    managed_spec m = {.name = "llama", .gguf = "/models/l.gguf", .ctx = 4096, .parallel = 2, .ctk = "f16",
                      .ctv = "q8_0", .flash_attn = 1};
    char line[512], *argv[32];
    int argc = managed_argv(MANAGED_DEFAULT_CMD, &m, 9123, "/proc/self/exe", line, sizeof line, argv, 32);
    assert_int_equal(argc, 22);
    assert_string_equal(argv[17], "f16");
    assert_string_equal(argv[19], "q8_0");
    assert_string_equal(argv[21], "on");
    assert_string_equal(argv[0], "llama-server");
    assert_string_equal(argv[2], "/models/l.gguf");
    assert_string_equal(argv[4], "llama");
    assert_string_equal(argv[8], "9123");
    assert_string_equal(argv[10], "8192"); /* -c is the total over slots */
    assert_string_equal(argv[12], "2");
    argc = managed_argv("{self} sim-engine --model {name} --listen 127.0.0.1:{port}", &m, 7, "/x", line, sizeof line, argv, 32);
    assert_int_equal(argc, 6);
    assert_string_equal(argv[0], "/x");
    assert_string_equal(argv[3], "llama");
    assert_string_equal(argv[5], "127.0.0.1:7");
    assert_int_equal(managed_argv("", &m, 7, "/x", line, sizeof line, argv, 32), -1);
    /* too many words for argv: refused, not cut */
    assert_int_equal(managed_argv(MANAGED_DEFAULT_CMD, &m, 1, "/x", line, sizeof line, argv, 8), -1);
    engine e;
    char err[400];
    managed_defaults d = {.data_dir = "/tmp", .margin_pct = 5};
    assert_int_equal(managed_parse("nofile", &d, &e, err, sizeof err), -1);
    assert_int_equal(managed_parse("x=/nonexistent.gguf", &d, &e, err, sizeof err), -1);
    assert_non_null(strstr(err, "nonexistent"));
    assert_int_equal(managed_parse("x=/a.gguf,ctx=zero", &d, &e, err, sizeof err), -1);
    assert_int_equal(managed_parse("x=/a.gguf,speed=3", &d, &e, err, sizeof err), -1);
}

static void cidr_ranges(void **state)
{
    (void)state;
    cidr_list l = {0};
    char err[200];
    assert_true(cidr_list_allows(&l, "8.8.8.8"));
    assert_int_equal(cidr_list_add(&l, "192.168.1.0/24", err, sizeof err), 0);
    assert_int_equal(cidr_list_add(&l, "10.1.2.3", err, sizeof err), 0);
    assert_int_equal(cidr_list_add(&l, "fd00::/8", err, sizeof err), 0);
    assert_true(cidr_list_allows(&l, "192.168.1.77"));
    assert_false(cidr_list_allows(&l, "192.168.2.1"));
    assert_true(cidr_list_allows(&l, "10.1.2.3"));
    assert_false(cidr_list_allows(&l, "10.1.2.4"));
    assert_true(cidr_list_allows(&l, "::ffff:192.168.1.5"));
    assert_true(cidr_list_allows(&l, "fd12::1"));
    assert_false(cidr_list_allows(&l, "fe80::1"));
    assert_false(cidr_list_allows(&l, "garbage"));
    assert_false(cidr_list_allows(&l, NULL));
    assert_int_equal(cidr_list_add(&l, "10.0.0.0/33", err, sizeof err), -1);
    assert_int_equal(cidr_list_add(&l, "10.0.0/8x", err, sizeof err), -1);
    assert_int_equal(cidr_list_add(&l, "/8", err, sizeof err), -1);
    cidr one;
    assert_int_equal(cidr_parse("172.16.0.0/12", &one, err, sizeof err), 0);
    assert_int_equal(one.bits, 12);
}

static void sizes_and_ints(void **state)
{
    (void)state;
    assert_int_equal(opts_parse_size("8M"), 8 << 20);
    assert_int_equal(opts_parse_size("64k"), 64 << 10);
    assert_int_equal(opts_parse_size("1GiB"), 1LL << 30);
    assert_int_equal(opts_parse_size("1.5K"), 1536);
    assert_int_equal(opts_parse_size("100"), 100);
    assert_int_equal(opts_parse_size("8X"), -1);
    assert_int_equal(opts_parse_size("-1"), -1);
    assert_int_equal(opts_parse_size(""), -1);
    long v;
    assert_int_equal(opts_parse_int("42", 0, 100, &v), 0);
    assert_int_equal(v, 42);
    assert_int_equal(opts_parse_int("420", 0, 100, &v), -1);
    assert_int_equal(opts_parse_int("4x", 0, 100, &v), -1);
}

static void config_file_expands_before_flags(void **state)
{
    (void)state;
    char path[] = "/tmp/gpupool-conf-XXXXXX";
    int fd = mkstemp(path);
    const char *text = "# a comment\nlisten = 127.0.0.1:9000\n\nqueue-max 12\napi-key = \"with space\"\n";
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    char *argv[] = {"serve", "--config", path, "--queue-max=3", NULL};
    int argc;
    char err[200];
    char **out = opts_expand_config(4, argv, &argc, err, sizeof err);
    assert_non_null(out);
    assert_int_equal(argc, 5);
    assert_string_equal(out[1], "--listen=127.0.0.1:9000");
    assert_string_equal(out[2], "--queue-max=12");
    assert_string_equal(out[3], "--api-key=with space");
    assert_string_equal(out[4], "--queue-max=3");
    assert_null(out[5]);
    opts_free_argv(out);
    unlink(path);
    char *missing[] = {"serve", "--config=/nonexistent/x.conf", NULL};
    assert_null(opts_expand_config(2, missing, &argc, err, sizeof err));
    assert_non_null(strstr(err, "/nonexistent/x.conf"));
}

/* A line longer than the room left makes the buffer grow and is written
 * whole; copies into fixed fields are cut, never overrun, and terminated. */
static void buffer_growth_and_bounded_copies(void **state)
{
    (void)state;
    buf b = {0};
    char big[1000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    for (int i = 0; i < 5; i++) assert_int_equal(buf_printf(&b, "%s|%d", big, i), 0);
    assert_int_equal(b.len, 5 * (999 + 2));
    assert_int_equal(b.data[999], '|');
    assert_string_equal(b.data + b.len - 2, "|4");
    buf_reset(&b);
    buf_put_uint(&b, 0);
    buf_puts(&b, " ");
    buf_put_uint(&b, 18446744073709551615ull);
    assert_string_equal(b.data, "0 18446744073709551615");
    buf_reset(&b);
    const char raw[] = "say \"hi\"\\\n\t\x01 \xe6\x9c\xba";
    assert_int_equal(buf_put_json_text(&b, raw, sizeof raw - 1), 0);
    assert_string_equal(b.data, "say \\\"hi\\\"\\\\\\n\\u0009\\u0001 \xe6\x9c\xba");
    buf_free(&b);
    char f[6];
    memset(f, '#', sizeof f);
    assert_int_equal(str_copy(f, sizeof f, "abcdefgh"), 5);
    assert_string_equal(f, "abcde");
    assert_int_equal(str_copy(f, sizeof f, NULL), 0);
    assert_string_equal(f, "");
    assert_int_equal(str_copy(f, sizeof f, "ab"), 2);
    assert_string_equal(f, "ab");
    assert_int_equal(str_copy_n(f, sizeof f, "xyz:rest", 3), 3);
    assert_string_equal(f, "xyz");
    assert_int_equal(str_copy_n(f, sizeof f, "0123456789", 10), 5);
    assert_string_equal(f, "01234");
    assert_int_equal(str_copy(f, 0, "abc"), 0);
}

static void buffers_and_ids(void **state)
{
    (void)state;
    buf b = {0};
    buf_puts(&b, "hello ");
    buf_printf(&b, "%d-%s", 42, "x");
    assert_string_equal(b.data, "hello 42-x");
    buf_consume(&b, 6);
    assert_string_equal(b.data, "42-x");
    char *s = buf_steal(&b);
    assert_string_equal(s, "42-x");
    assert_null(b.data);
    free(s);
    char id1[64], id2[64];
    make_id(id1, sizeof id1, "task");
    make_id(id2, sizeof id2, "task");
    assert_int_equal(strlen(id1), 29);
    assert_string_not_equal(id1, id2);
    char h[65];
    sha256_hex("abc", 3, h);
    assert_string_equal(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    assert_true(secret_equal("abc", "abc"));
    assert_false(secret_equal("abc", "abd"));
    assert_false(secret_equal("abc", "abcd"));
    /* RFC 4231 test case 2 */
    hmac_sha256_hex("Jefe", "what do ya want for nothing?", 28, h);
    assert_string_equal(h, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    char path[] = "/tmp/gpupool-sha-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "abc", 3), 3);
    close(fd);
    char fh[65];
    assert_int_equal(sha256_file_hex(path, fh), 0);
    assert_string_equal(fh, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    unlink(path);
    assert_int_equal(sha256_file_hex(path, fh), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(validate_accepts_good_bodies),
        cmocka_unit_test(validate_names_the_field),
        cmocka_unit_test(kinds_map_to_paths),
        cmocka_unit_test(engine_model_lists),
        cmocka_unit_test(engine_slots),
        cmocka_unit_test(engine_metrics),
        cmocka_unit_test(engine_specs),
        cmocka_unit_test(managed_engine_command),
        cmocka_unit_test(cidr_ranges),
        cmocka_unit_test(sizes_and_ints),
        cmocka_unit_test(config_file_expands_before_flags),
        cmocka_unit_test(buffers_and_ids),
        cmocka_unit_test(buffer_growth_and_bounded_copies),
    };
    return cmocka_run_group_tests_name("parsers", tests, NULL, NULL);
}
