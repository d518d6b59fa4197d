/* test_apps: the pure parts of prompt apps and pipelines: JSON Schema
 * validation (apps/jschema), templates (apps/template), conditions
 * (apps/cond), the config (apps/appcfg) and a stage's requests and judging
 * (apps/stage). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "apps/appcfg.h"
#include "apps/cond.h"
#include "apps/jschema.h"
#include "apps/stage.h"
#include "apps/template.h"

static json_t *J(const char *text)
{
    json_error_t e;
    json_t *j = json_loads(text, JSON_DECODE_ANY, &e);
    if (!j) fail_msg("bad test JSON %s: %s", text, e.text);
    return j;
}

/* Validates doc against schema; returns the error's path, or NULL if valid. */
static const char *check(const char *schema, const char *doc, jschema_error *e)
{
    json_t *s = J(schema), *d = J(doc);
    int rc = jschema_validate(s, d, e);
    json_decref(s);
    json_decref(d);
    return rc ? e->path : NULL;
}

static void test_jschema_keywords(void **state)
{
    (void)state;
    jschema_error e;
    const char *obj = "{\"type\":\"object\",\"required\":[\"a\"],\"additionalProperties\":false,"
                      "\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":5},"
                      "\"b\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":2},\"maxItems\":2},"
                      "\"c\":{\"enum\":[\"x\",1,null]},\"d\":{\"type\":[\"string\",\"null\"],\"minLength\":2},"
                      "\"e\":{\"type\":\"object\",\"properties\":{\"f\":{\"type\":\"boolean\"}}}}}";
    assert_null(check(obj, "{\"a\":3,\"b\":[\"ab\",\"\"],\"c\":1.0,\"d\":null,\"e\":{\"f\":true,\"g\":0}}", &e));
    assert_null(check(obj, "{\"a\":2.0}", &e)); /* 2.0 is an integer */
    assert_string_equal(check(obj, "{}", &e), "a");
    assert_non_null(strstr(e.message, "'a' is required"));
    assert_string_equal(check(obj, "{\"a\":1.5}", &e), "a");
    assert_non_null(strstr(e.message, "type integer"));
    assert_string_equal(check(obj, "{\"a\":0}", &e), "a");
    assert_string_equal(check(obj, "{\"a\":6}", &e), "a");
    assert_string_equal(check(obj, "{\"a\":1,\"z\":1}", &e), "z");
    assert_non_null(strstr(e.message, "not an allowed property"));
    assert_string_equal(check(obj, "{\"a\":1,\"b\":[\"abc\"]}", &e), "b[0]");
    assert_string_equal(check(obj, "{\"a\":1,\"b\":[\"a\",\"b\",\"c\"]}", &e), "b");
    assert_string_equal(check(obj, "{\"a\":1,\"c\":\"y\"}", &e), "c");
    assert_non_null(strstr(e.message, "one of"));
    assert_string_equal(check(obj, "{\"a\":1,\"d\":\"x\"}", &e), "d");
    assert_string_equal(check(obj, "{\"a\":1,\"d\":3}", &e), "d");
    assert_string_equal(check(obj, "{\"a\":1,\"e\":{\"f\":1}}", &e), "e.f");
    /* Characters, not bytes. */
    assert_null(check("{\"maxLength\":2}", "\"\xc3\xa9\xc3\xa9\"", &e));
    assert_non_null(check("{\"minLength\":3}", "\"\xc3\xa9\xc3\xa9\"", &e));
    /* Root-level failures name the value; boolean schemas. */
    assert_string_equal(check("{\"type\":\"object\"}", "[]", &e), "");
    assert_non_null(strstr(e.message, "the value must be of type object"));
    assert_null(check("true", "1", &e));
    assert_non_null(check("false", "1", &e));
    assert_null(check("{\"additionalProperties\":{\"type\":\"number\"}}", "{\"x\":1,\"y\":2.5}", &e));
    assert_string_equal(check("{\"additionalProperties\":{\"type\":\"number\"}}", "{\"x\":\"1\"}", &e), "x");
    assert_null(check("{\"const\":3}", "3.0", &e));
    assert_non_null(check("{\"const\":3}", "4", &e));
}

static void test_jschema_check(void **state)
{
    (void)state;
    static const char *const bad[] = {"[]", "1", "{\"type\":\"str\"}", "{\"type\":[]}", "{\"properties\":[]}",
                                      "{\"properties\":{\"a\":3}}", "{\"required\":\"a\"}", "{\"enum\":[]}",
                                      "{\"minLength\":-1}", "{\"maximum\":\"3\"}", "{\"items\":{\"type\":1}}",
                                      "{\"additionalProperties\":\"no\"}"};
    jschema_error e;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *s = J(bad[i]);
        if (jschema_check(s, &e) != -1) fail_msg("accepted %s", bad[i]);
        json_decref(s);
    }
    json_t *ok = J("{\"$schema\":\"x\",\"title\":\"t\",\"type\":[\"object\",\"null\"],\"properties\":{\"a\":"
                   "{\"items\":true,\"minItems\":1}},\"required\":[\"a\"],\"additionalProperties\":false}");
    assert_int_equal(jschema_check(ok, &e), 0);
    json_decref(ok);
    /* A schema nested past the limit is refused, not recursed into. */
    char deep_s[1200] = "", deep_d[200] = "";
    for (int i = 0; i < 70; i++) strcat(deep_s, "{\"items\":");
    strcat(deep_s, "{}");
    for (int i = 0; i < 70; i++) strcat(deep_s, "}");
    for (int i = 0; i < 70; i++) strcat(deep_d, "[");
    for (int i = 0; i < 70; i++) strcat(deep_d, "]");
    json_t *s = J(deep_s), *d = J(deep_d);
    assert_int_equal(jschema_check(s, &e), -1);
    assert_int_equal(jschema_validate(s, d, &e), -1);
    assert_non_null(strstr(e.message, "nested too deeply"));
    json_decref(s);
    json_decref(d);
    /* An unchecked schema whose type list holds a non-name (found by
     * fuzz_apps): the non-name matches nothing, the names still count. */
    assert_non_null(check("{\"type\":[true]}", "\"x\"", &e));
    assert_null(check("{\"type\":[true,\"string\"]}", "\"x\"", &e));
    assert_non_null(check("{\"type\":[1,\"integer\"]}", "\"x\"", &e));
    assert_non_null(strstr(e.message, "must be of type integer, not string"));
}

static char *render(const char *t, const char *ctx)
{
    json_t *c = J(ctx);
    char err[200];
    char *out = tmpl_render(t, c, err, sizeof err);
    json_decref(c);
    return out;
}

static void test_template(void **state)
{
    (void)state;
    const char *ctx = "{\"text\":\"hi \\\"you\\\"\",\"n\":3,\"o\":{\"k\":[1,{\"z\":\"deep\"}]},\"t\":true,"
                      "\"stages\":{\"intent\":{\"output\":{\"label\":\"question\"}}}}";
    char *s = render("A {{text}} B {{ n }} C {{o.k.1.z}} D {{o.k}} E {{stages.intent.output.label}} F {{nope.x}}|",
                     ctx);
    assert_string_equal(s, "A hi \"you\" B 3 C deep D [1,{\"z\":\"deep\"}] E question F |");
    free(s);
    s = render("\\{{text}} and \\\\{{n}} and { single } and }}", ctx);
    assert_string_equal(s, "{{text}} and \\3 and { single } and }}");
    free(s);
    s = render("{{t}}{{o}}", ctx);
    assert_string_equal(s, "true{\"k\":[1,{\"z\":\"deep\"}]}");
    free(s);
    char err[200];
    assert_int_equal(tmpl_check("ok {{a}}", err, sizeof err), 0);
    assert_int_equal(tmpl_check("open {{a", err, sizeof err), -1);
    assert_non_null(strstr(err, "not closed"));
    assert_int_equal(tmpl_check("empty {{ }}", err, sizeof err), -1);
    assert_null(render("x {{", "{}"));
}

static int eval(const char *expr, const char *ctx)
{
    json_t *c = J(ctx);
    char err[200];
    int r = cond_eval(expr, c, err, sizeof err);
    json_decref(c);
    return r;
}

static void test_cond(void **state)
{
    (void)state;
    const char *ctx = "{\"stages\":{\"intent\":{\"output\":{\"label\":\"question\",\"score\":0.5,\"ok\":true}}},"
                      "\"empty\":\"\",\"zero\":0}";
    assert_int_equal(eval("stages.intent.output.label == 'question'", ctx), 1);
    assert_int_equal(eval("stages.intent.output.label == \"other\"", ctx), 0);
    assert_int_equal(eval("stages.intent.output.label != 'other'", ctx), 1);
    assert_int_equal(eval("  stages.intent.output.score==0.5 ", ctx), 1);
    assert_int_equal(eval("stages.intent.output.ok == true", ctx), 1);
    assert_int_equal(eval("stages.missing.output == null", ctx), 0); /* absent is not null */
    assert_int_equal(eval("stages.intent.output.ok", ctx), 1);
    assert_int_equal(eval("!stages.intent.output.ok", ctx), 0);
    assert_int_equal(eval("empty", ctx), 0);
    assert_int_equal(eval("zero", ctx), 0);
    assert_int_equal(eval("!missing", ctx), 1);
    static const char *const bad[] = {"", "== 'x'", "a = 'x'", "a == ", "a == 'x' extra", "a == 'unclosed",
                                      "!a == 1", "a == bare"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (eval(bad[i], ctx) != -1) fail_msg("accepted condition '%s'", bad[i]);
}

static apps_cfg *parse(const char *text, char *err, size_t len) { return apps_cfg_parse(text, strlen(text), err, len); }

static void test_appcfg(void **state)
{
    (void)state;
    char err[400];
    apps_cfg *c = parse("{\"apps\":{\"b\":{\"model\":\"m\",\"prompt\":\"{{x}}\",\"description\":\"d\"},"
                        "\"a\":{\"model\":\"m2\",\"prompt\":\"p\",\"max_retries\":0,\"output_schema\":{\"type\":\"object\"}}},"
                        "\"pipelines\":{\"p\":{\"stages\":[{\"name\":\"s1\",\"model\":\"m\",\"prompt\":\"x\"},"
                        "{\"name\":\"s2\",\"model\":\"n\",\"prompt\":\"{{stages.s1.output}}\",\"if\":\"stages.s1.output\"}]}}}",
                        err, sizeof err);
    if (!c) fail_msg("%s", err);
    const json_t *b = apps_cfg_app(c, "b");
    assert_string_equal(json_string_value(json_object_get(b, "kind")), "app");
    const json_t *st = json_array_get(json_object_get(b, "stages"), 0);
    assert_string_equal(json_string_value(json_object_get(st, "name")), "b");
    assert_int_equal(json_integer_value(json_object_get(st, "max_retries")), APPS_DEFAULT_RETRIES);
    assert_int_equal(json_integer_value(json_object_get(st, "max_attempts")), APPS_DEFAULT_ATTEMPTS);
    assert_non_null(json_object_get(b, "input_schema"));
    assert_null(apps_cfg_app(c, "p"));
    assert_non_null(apps_cfg_pipeline(c, "p"));
    json_t *l = apps_cfg_list(c, 0);
    assert_int_equal((int)json_array_size(l), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(l, 0), "name")), "a"); /* sorted */
    assert_true(json_is_null(json_object_get(json_array_get(l, 1), "output_schema")));
    json_decref(l);
    l = apps_cfg_list(c, 1);
    assert_int_equal((int)json_array_size(json_object_get(json_array_get(l, 0), "stages")), 2);
    json_decref(l);
    apps_cfg_free(c);

    static const struct { const char *text, *says; } bad[] = {
        {"[]", "JSON object"},
        {"{\"apps\":{\"x\":{\"prompt\":\"p\"}}}", "app 'x': 'model'"},
        {"{\"apps\":{\"x\":{\"model\":\"m\"}}}", "'prompt'"},
        {"{\"apps\":{\"x\":{\"model\":\"m\",\"prompt\":\"{{a\"}}}", "prompt"},
        {"{\"apps\":{\"x y\":{\"model\":\"m\",\"prompt\":\"p\"}}}", "name"},
        {"{\"apps\":{\"x\":{\"model\":\"m\",\"prompt\":\"p\",\"output_schema\":{\"type\":\"nope\"}}}}", "output_schema"},
        {"{\"apps\":{\"x\":{\"model\":\"m\",\"prompt\":\"p\",\"max_retries\":11}}}", "max_retries"},
        {"{\"pipelines\":{\"p\":{\"stages\":[]}}}", "stages"},
        {"{\"pipelines\":{\"p\":{\"stages\":[{\"name\":\"a\",\"model\":\"m\",\"prompt\":\"x\"},"
         "{\"name\":\"a\",\"model\":\"m\",\"prompt\":\"x\"}]}}}", "twice"},
        {"{\"pipelines\":{\"p\":{\"stages\":[{\"name\":\"a\",\"model\":\"m\",\"prompt\":\"x\",\"if\":\"a = 1\"}]}}}", "if"},
        {"{\"other\":{}}", "unknown top-level"},
        {"{\"apps\":{}, \"apps\":{}}", "JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        c = parse(bad[i].text, err, sizeof err);
        if (c) fail_msg("accepted %s", bad[i].text);
        if (!strstr(err, bad[i].says)) fail_msg("'%s' does not say '%s'", err, bad[i].says);
    }
}

static void test_stage(void **state)
{
    (void)state;
    json_t *def = J("{\"name\":\"s\",\"model\":\"m\",\"system\":\"You label {{lang}}.\",\"prompt\":\"Label: {{text}}\","
                    "\"max_tokens\":50,\"output_schema\":{\"type\":\"object\",\"required\":[\"label\"]}}");
    json_t *input = J("{\"text\":\"hello\",\"lang\":\"en\"}");
    json_t *ctx = stage_context(input, NULL);
    assert_string_equal(json_string_value(tmpl_lookup(ctx, "input.text", 10)), "hello");
    char err[200];
    json_t *req = stage_request(def, ctx, err, sizeof err);
    assert_non_null(req);
    json_t *msgs = json_object_get(req, "messages");
    assert_int_equal((int)json_array_size(msgs), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(msgs, 0), "content")), "You label en.");
    const char *user = json_string_value(json_object_get(json_array_get(msgs, 1), "content"));
    assert_int_equal(strncmp(user, "Label: hello\n\nReply with only a JSON value", 41), 0);
    assert_int_equal(json_integer_value(json_object_get(req, "max_tokens")), 50);
    assert_string_equal(json_string_value(json_object_get(req, "model")), "m");

    json_t *out;
    char why[300];
    assert_int_equal(stage_judge(def, "  ```json\n{\"label\": \"x\"}\n```  ", &out, why, sizeof why), 0);
    assert_string_equal(json_string_value(json_object_get(out, "label")), "x");
    json_decref(out);
    assert_int_equal(stage_judge(def, "{label: x}", &out, why, sizeof why), -1);
    assert_non_null(strstr(why, "not JSON"));
    assert_int_equal(stage_judge(def, "{\"other\": 1}", &out, why, sizeof why), -1);
    assert_non_null(strstr(why, "'label' is required"));

    json_t *retry = stage_retry_request(req, "{label: x}", why, json_object_get(def, "output_schema"));
    msgs = json_object_get(retry, "messages");
    assert_int_equal((int)json_array_size(msgs), 4);
    assert_string_equal(json_string_value(json_object_get(json_array_get(msgs, 2), "role")), "assistant");
    assert_string_equal(json_string_value(json_object_get(json_array_get(msgs, 2), "content")), "{label: x}");
    assert_non_null(strstr(json_string_value(json_object_get(json_array_get(msgs, 3), "content")),
                           "Your previous reply was not valid: 'label' is required"));
    json_decref(retry);
    assert_int_equal(stage_judge(def, NULL, &out, why, sizeof why), -1);

    /* Without a schema the output is the text itself. */
    json_t *plain = J("{\"name\":\"p\",\"model\":\"m\",\"prompt\":\"x\"}");
    assert_int_equal(stage_judge(plain, "just words", &out, why, sizeof why), 0);
    assert_string_equal(json_string_value(out), "just words");
    json_decref(out);
    json_t *result = J("{\"choices\":[{\"message\":{\"content\":\"c\"}}]}");
    assert_string_equal(stage_reply_text(result), "c");
    json_decref(result);
    json_decref(plain);
    json_decref(req);
    json_decref(ctx);
    json_decref(input);
    json_decref(def);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_jschema_keywords), cmocka_unit_test(test_jschema_check), cmocka_unit_test(test_template),
        cmocka_unit_test(test_cond),             cmocka_unit_test(test_appcfg),       cmocka_unit_test(test_stage),
    };
    return cmocka_run_group_tests_name("apps", tests, NULL, NULL);
}
