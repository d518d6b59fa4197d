/* e2e: pipelines.  Three workers each hold one model (a simulated engine
 * started with --model NAME); a pipeline classifies, answers (a stage that
 * runs only for questions, its twin for chitchat is skipped) and checks the
 * answer, each stage on its own model.  The answer's engine fails its first
 * request (--fail-first 1), so that stage is retried.  The run shows each
 * stage on the worker holding its model, its attempts and timings, and the
 * final output, built from the earlier stages' outputs.  A private input
 * makes every stage's task private; a run goes on after the coordinator is
 * killed, and a cancel stops the stage that runs. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static const char APPS[] =
    "{\"pipelines\":{\"support\":{\"description\":\"intent, answer, safety\","
    " \"input_schema\":{\"type\":\"object\",\"required\":[\"text\"],\"properties\":{\"text\":{\"type\":\"string\"}}},"
    " \"stages\":["
    "  {\"name\":\"intent\",\"model\":\"m-intent\",\"prompt\":\"Classify intent: {{text}}\","
    "   \"output_schema\":{\"type\":\"object\",\"required\":[\"label\"],"
    "    \"properties\":{\"label\":{\"enum\":[\"question\",\"chitchat\"]}}}},"
    "  {\"name\":\"answer\",\"model\":\"m-answer\",\"if\":\"stages.intent.output.label == 'question'\","
    "   \"prompt\":\"Answer the question: {{input.text}}\",\"max_attempts\":3},"
    "  {\"name\":\"smalltalk\",\"model\":\"m-answer\",\"if\":\"stages.intent.output.label == 'chitchat'\","
    "   \"prompt\":\"Chat back: {{text}}\"},"
    "  {\"name\":\"safety\",\"model\":\"m-safety\",\"prompt\":\"Check safety of: {{stages.answer.output}}\","
    "   \"output_schema\":{\"type\":\"object\",\"required\":[\"safe\"],\"properties\":{\"safe\":{\"type\":\"boolean\"}}}}"
    "]}}}";

static const char REPLIES[] =
    "[{\"match\":\"Classify intent\",\"reply\":\"{\\\"label\\\": \\\"question\\\"}\"},"
    "{\"match\":\"Answer the question: when do you open?\",\"reply\":\"We open at nine.\"},"
    "{\"match\":\"Check safety of: We open at nine.\",\"reply\":\"{\\\"safe\\\": true}\"}]";

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void worker(h_pool *p, const char *machine, const char *model, const char *replies, const char *extra)
{
    char sim[700];
    snprintf(sim, sizeof sim, "--tps%%200%%20--model%%20%s%%20--reply-map%%20%s%s", model, replies,
             extra ? extra : "%20--ttft-ms%200");
    h_start_worker(p, machine, sim, NULL);
}

static int setup_with(void **state, const char *safety_sim)
{
    h_pool *p = h_pool_new("pipelines");
    char apps[400], replies[400], args[600];
    snprintf(apps, sizeof apps, "%s/apps.json", p->dir);
    snprintf(replies, sizeof replies, "%s/replies.json", p->dir);
    write_file(apps, APPS);
    write_file(replies, REPLIES);
    snprintf(args, sizeof args, "--apps %s --retry-backoff-ms 50", apps);
    h_start_coordinator(p, args);
    worker(p, "machine-intent", "m-intent", replies, NULL);
    worker(p, "machine-answer", "m-answer", replies, "%20--ttft-ms%200%20--fail-first%201");
    worker(p, "machine-safety", "m-safety", replies, safety_sim);
    *state = p;
    return 0;
}

static int setup(void **state) { return setup_with(state, NULL); }
/* The last stage takes a while, so the coordinator can be killed during it. */
static int setup_slow_safety(void **state) { return setup_with(state, "%20--ttft-ms%201500"); }

typedef struct poll_ctx {
    h_pool *p;
    char path[160];
    json_t *last;
} poll_ctx;

static int run_ended(void *arg)
{
    poll_ctx *c = arg;
    h_resp r;
    h_request(c->p, "GET", c->path, NULL, NULL, &r);
    const char *st = json_string_value(json_object_get(r.json, "status"));
    int done = r.status == 200 && st && strcmp(st, "queued") && strcmp(st, "running");
    json_decref(c->last);
    c->last = json_incref(r.json);
    h_resp_free(&r);
    return done;
}

static void start(h_pool *p, const char *const *headers, poll_ctx *c)
{
    h_resp r;
    h_request(p, "POST", "/v1/pipelines/support", "{\"input\":{\"text\":\"when do you open?\"}}", headers, &r);
    assert_int_equal(r.status, 202);
    *c = (poll_ctx){.p = p};
    snprintf(c->path, sizeof c->path, "/v1/pipelines/runs/%s", json_string_value(json_object_get(r.json, "id")));
    h_resp_free(&r);
}

static json_t *run(h_pool *p, const char *const *headers)
{
    h_resp r;
    h_request(p, "POST", "/v1/pipelines/support", "{\"input\":{\"text\":\"when do you open?\"}}", headers, &r);
    assert_int_equal(r.status, 202);
    assert_string_equal(json_string_value(json_object_get(r.json, "status")), "queued");
    poll_ctx c = {.p = p};
    snprintf(c.path, sizeof c.path, "/v1/pipelines/runs/%s", json_string_value(json_object_get(r.json, "id")));
    h_resp_free(&r);
    if (!h_wait_until(run_ended, &c, 20000)) {
        char *s = json_dumps(c.last, JSON_INDENT(1));
        fail_msg("the run did not end: %s", s ? s : "?");
    }
    return c.last;
}

static const json_t *stage(const json_t *run, const char *name)
{
    size_t i;
    const json_t *s;
    json_array_foreach(json_object_get(run, "stages"), i, s)
        if (!strcmp(json_string_value(json_object_get(s, "name")), name)) return s;
    fail_msg("no stage %s", name);
    return NULL;
}

static void assert_on(h_pool *p, const json_t *s, const char *machine)
{
    char id[64];
    h_node_field(p, "name", machine, "id", id, sizeof id);
    assert_string_equal(json_string_value(json_object_get(s, "node")), id);
    assert_string_equal(json_string_value(json_object_get(s, "status")), "succeeded");
    assert_true(json_integer_value(json_object_get(s, "started_ms")) > 0);
    assert_true(json_integer_value(json_object_get(s, "finished_ms")) >= json_integer_value(json_object_get(s, "started_ms")));
}

static void stages_run_where_their_models_are(void **state)
{
    h_pool *p = *state;
    json_t *j = run(p, NULL);
    assert_string_equal(json_string_value(json_object_get(j, "status")), "succeeded");
    assert_true(json_is_true(json_object_get(json_object_get(j, "output"), "safe")));
    assert_on(p, stage(j, "intent"), "machine-intent");
    assert_on(p, stage(j, "answer"), "machine-answer");
    assert_on(p, stage(j, "safety"), "machine-safety");
    assert_string_equal(json_string_value(json_object_get(stage(j, "smalltalk"), "status")), "skipped");
    assert_string_equal(json_string_value(json_object_get(stage(j, "answer"), "output")), "We open at nine.");
    /* The answer's engine failed once: two node attempts, the first an engine error. */
    const json_t *att = json_object_get(stage(j, "answer"), "attempts");
    assert_int_equal((int)json_array_size(att), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(att, 0), "outcome")), "engine_error");
    assert_int_equal((int)json_array_size(json_object_get(stage(j, "intent"), "attempts")), 1);
    json_decref(j);
}

static void private_input_makes_every_stage_private(void **state)
{
    h_pool *p = *state;
    const char *hdr[] = {"X-Gpupool-Sensitivity: private", NULL};
    json_t *j = run(p, hdr);
    assert_string_equal(json_string_value(json_object_get(j, "status")), "succeeded");
    assert_string_equal(json_string_value(json_object_get(j, "sensitivity")), "private");
    const char *ran[] = {"intent", "answer", "safety"};
    for (int i = 0; i < 3; i++) {
        char path[160];
        snprintf(path, sizeof path, "/v1/tasks/%s", json_string_value(json_object_get(stage(j, ran[i]), "task_id")));
        h_resp r;
        h_request(p, "GET", path, NULL, NULL, &r);
        assert_int_equal(r.status, 200);
        assert_string_equal(json_string_value(json_object_get(json_object_get(r.json, "route"), "sensitivity")),
                            "private");
        h_resp_free(&r);
    }
    json_decref(j);
}

static int safety_running(void *arg)
{
    poll_ctx *c = arg;
    run_ended(c);
    size_t i;
    const json_t *s;
    json_array_foreach(json_object_get(c->last, "stages"), i, s)
        if (!strcmp(json_string_value(json_object_get(s, "name")), "safety"))
            return !strcmp(json_string_value(json_object_get(s, "status")), "running");
    return 0;
}

static void run_resumes_after_a_coordinator_crash(void **state)
{
    h_pool *p = *state;
    poll_ctx c;
    start(p, NULL, &c);
    assert_true(h_wait_until(safety_running, &c, 20000));
    h_kill(p->coord, SIGKILL);
    assert_int_equal(h_wait_exit(p->coord, 5000), 128 + SIGKILL);
    h_restart_coordinator(p);
    assert_true(h_wait_until(run_ended, &c, 30000));
    assert_string_equal(json_string_value(json_object_get(c.last, "status")), "succeeded");
    assert_true(json_is_true(json_object_get(json_object_get(c.last, "output"), "safe")));
    /* The stages done before the crash were not run again. */
    assert_int_equal((int)json_array_size(json_object_get(stage(c.last, "intent"), "attempts")), 1);
    assert_int_equal((int)json_array_size(json_object_get(stage(c.last, "answer"), "attempts")), 2);
    json_decref(c.last);
}

static void cancel_stops_the_running_stage(void **state)
{
    h_pool *p = *state;
    poll_ctx c;
    start(p, NULL, &c);
    assert_true(h_wait_until(safety_running, &c, 20000));
    const char *task = json_string_value(json_object_get(stage(c.last, "safety"), "task_id"));
    char task_path[160];
    snprintf(task_path, sizeof task_path, "/v1/tasks/%s", task);
    h_resp r;
    h_request(p, "DELETE", c.path, NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(json_string_value(json_object_get(r.json, "status")), "canceled");
    assert_string_equal(json_string_value(json_object_get(stage(r.json, "safety"), "status")), "canceled");
    assert_string_equal(json_string_value(json_object_get(stage(r.json, "intent"), "status")), "succeeded");
    h_resp_free(&r);
    h_request(p, "GET", task_path, NULL, NULL, &r);
    assert_string_equal(json_string_value(json_object_get(r.json, "status")), "canceled");
    h_resp_free(&r);
    h_request(p, "DELETE", c.path, NULL, NULL, &r);
    assert_int_equal(r.status, 409);
    assert_string_equal(json_string_value(json_object_get(json_object_get(r.json, "error"), "code")), "run_finished");
    h_resp_free(&r);
    /* Still canceled after the runner's next passes. */
    assert_true(run_ended(&c));
    assert_string_equal(json_string_value(json_object_get(c.last, "status")), "canceled");
    json_decref(c.last);
}

int main(void)
{
    h_apply_filter();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(stages_run_where_their_models_are, setup, h_pool_teardown),
        cmocka_unit_test_setup_teardown(private_input_makes_every_stage_private, setup, h_pool_teardown),
        cmocka_unit_test_setup_teardown(run_resumes_after_a_coordinator_crash, setup_slow_safety, h_pool_teardown),
        cmocka_unit_test_setup_teardown(cancel_stops_the_running_stage, setup_slow_safety, h_pool_teardown),
    };
    return cmocka_run_group_tests_name("e2e_pipelines", tests, NULL, NULL);
}
