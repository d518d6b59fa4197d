/* e2e: `gpupool compare` over a real pool.  Two simulated models answer
 * 20 inputs from reply maps: "f16" with the reference JSON, "q4" with the
 * same except 3 fields of 3 known items (some of its answers in a ```json
 * fence or in prose, which must still parse).  The agreement is then
 * exactly 57/60: a 0.95 threshold passes, 0.96 fails; naming fields
 * narrows the comparison; usage errors exit 2. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define ITEMS 20

typedef struct fixture {
    h_pool *p;
    char input[400];
} fixture;

static char *reference(int k)
{
    char *s = NULL;
    if (asprintf(&s, "{\"id\":%d,\"label\":\"L%d\",\"score\":%d}", k, k % 4, k * 10) < 0) abort();
    return s;
}

/* q4's answer to item k: the same facts, except item 3's label, item 7's
 * score and item 12's label; item 5 in prose, item 15 fenced, item 9 with
 * its numbers as reals and its keys in another order. */
static char *trial(int k)
{
    char *s = NULL;
    int rc;
    if (k == 3 || k == 12) rc = asprintf(&s, "{\"id\":%d,\"label\":\"other\",\"score\":%d}", k, k * 10);
    else if (k == 7) rc = asprintf(&s, "{\"id\":%d,\"label\":\"L%d\",\"score\":-1}", k, k % 4);
    else if (k == 5) rc = asprintf(&s, "Sure! {\"id\":%d,\"label\":\"L%d\",\"score\":%d} Anything else?", k, k % 4, k * 10);
    else if (k == 15) rc = asprintf(&s, "```json\n{\"id\":%d,\"label\":\"L%d\",\"score\":%d}\n```", k, k % 4, k * 10);
    else if (k == 9) rc = asprintf(&s, "{\"score\":%d.0,\"label\":\"L%d\",\"id\":%d.0}", k * 10, k % 4, k);
    else return reference(k);
    if (rc < 0) abort();
    return s;
}

static void write_map(const char *path, char *(*reply)(int))
{
    json_t *map = json_array();
    for (int k = 0; k < ITEMS; k++) {
        char match[32];
        snprintf(match, sizeof match, "item-%02d", k);
        char *r = reply(k);
        json_array_append_new(map, json_pack("{s:s, s:s}", "match", match, "reply", r));
        free(r);
    }
    if (json_dump_file(map, path, 0)) fail_msg("cannot write %s", path);
    json_decref(map);
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    f->p = h_pool_new("compare");
    char map_a[400], map_b[400], sim[1200];
    snprintf(map_a, sizeof map_a, "%s/f16.json", f->p->dir);
    snprintf(map_b, sizeof map_b, "%s/q4.json", f->p->dir);
    write_map(map_a, reference);
    write_map(map_b, trial);
    snprintf(f->input, sizeof f->input, "%s/input.jsonl", f->p->dir);
    FILE *in = fopen(f->input, "w");
    for (int k = 0; k < ITEMS; k++)
        if (k % 2) fprintf(in, "{\"messages\":[{\"role\":\"user\",\"content\":\"Extract item-%02d as JSON.\"}]}\n", k);
        else fprintf(in, "{\"messages\":[{\"role\":\"system\",\"content\":\"JSON only\"},{\"role\":\"user\",\"content\":"
                         "\"item-%02d\"}],\"max_tokens\":64}\n\n", k);
    fclose(in);
    h_start_coordinator(f->p, NULL);
    snprintf(sim, sizeof sim, "--ttft-ms%%200%%20--tps%%200%%20--model%%20f16%%20--reply-map%%20%s", map_a);
    h_start_worker(f->p, "machine-a", sim, NULL);
    snprintf(sim, sizeof sim, "--ttft-ms%%205%%20--tps%%200%%20--model%%20q4%%20--reply-map%%20%s", map_b);
    h_start_worker(f->p, "machine-b", sim, NULL);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    void *p = f->p;
    free(f);
    return h_pool_teardown(&p);
}

/* Runs compare; returns its exit status and, with --json, its report. */
static int compare(fixture *f, const char *args, json_t **report)
{
    char full[1400];
    snprintf(full, sizeof full, "compare --coordinator %s %s", f->p->base, args);
    h_proc *c = h_run_cli(f->p, "compare", full);
    int rc = h_wait_exit(c, 30000);
    if (report) {
        *report = NULL;
        FILE *fp = fopen(c->log, "r");
        char text[65536];
        size_t n = fp ? fread(text, 1, sizeof text - 1, fp) : 0;
        if (fp) fclose(fp);
        text[n] = 0;
        char *open = strchr(text, '{'), *close = strrchr(text, '}');
        if (open && close) *report = json_loadb(open, (size_t)(close - open + 1), 0, NULL);
        if (!*report) fail_msg("no JSON report from '%s': %s", args, text);
    }
    return rc;
}

static json_t *field(json_t *report, const char *name)
{
    size_t i;
    json_t *f;
    json_array_foreach(json_object_get(report, "fields"), i, f)
        if (!strcmp(json_string_value(json_object_get(f, "name")), name)) return f;
    fail_msg("no field %s in the report", name);
    return NULL;
}

static void agreement_is_exact_and_the_threshold_decides(void **state)
{
    fixture *f = *state;
    char args[800];
    json_t *rep;
    snprintf(args, sizeof args, "--model-a f16 --model-b q4 --threshold 0.95 --concurrency 3 --json %s", f->input);
    assert_int_equal(compare(f, args, &rep), 0);
    assert_int_equal(json_integer_value(json_object_get(rep, "items")), ITEMS);
    assert_int_equal(json_integer_value(json_object_get(rep, "agreed")), 57);
    assert_int_equal(json_integer_value(json_object_get(rep, "compared")), 60);
    assert_true(json_real_value(json_object_get(rep, "agreement")) == 57.0 / 60);
    assert_true(json_is_true(json_object_get(rep, "pass")));
    assert_int_equal(json_integer_value(json_object_get(rep, "items_identical")), 17);
    json_t *models = json_object_get(rep, "models");
    assert_true(json_real_value(json_object_get(json_object_get(models, "a"), "parse_rate")) == 1.0);
    assert_true(json_real_value(json_object_get(json_object_get(models, "b"), "parse_rate")) == 1.0);
    assert_string_equal(json_string_value(json_object_get(json_object_get(models, "b"), "model")), "q4");
    assert_true(json_real_value(json_object_get(json_object_get(models, "b"), "p50_ms")) > 0);
    assert_int_equal(json_integer_value(json_object_get(field(rep, "id"), "agree")), 20);
    assert_int_equal(json_integer_value(json_object_get(field(rep, "label"), "agree")), 18);
    assert_int_equal(json_integer_value(json_object_get(field(rep, "score"), "agree")), 19);
    json_decref(rep);

    snprintf(args, sizeof args, "--model-a f16 --model-b q4 --threshold 0.96 %s", f->input);
    assert_int_equal(compare(f, args, NULL), 1);
    /* Only id and score: 39 of 40. */
    snprintf(args, sizeof args, "--model-a f16 --model-b q4 --fields id,score --threshold 0.975 --json %s", f->input);
    assert_int_equal(compare(f, args, &rep), 0);
    assert_int_equal(json_integer_value(json_object_get(rep, "compared")), 40);
    assert_int_equal(json_integer_value(json_object_get(rep, "agreed")), 39);
    json_decref(rep);
    /* A model against itself agrees entirely. */
    snprintf(args, sizeof args, "--model-a q4 --model-b q4 --threshold 1 %s", f->input);
    assert_int_equal(compare(f, args, NULL), 0);
}

static void usage_errors_exit_2(void **state)
{
    fixture *f = *state;
    char args[800], bad[500];
    snprintf(args, sizeof args, "--model-a f16 %s", f->input);
    assert_int_equal(compare(f, args, NULL), 2);
    snprintf(args, sizeof args, "--model-a f16 --model-b q4 --threshold 1.5 %s", f->input);
    assert_int_equal(compare(f, args, NULL), 2);
    snprintf(bad, sizeof bad, "%s/bad.jsonl", f->p->dir);
    FILE *fp = fopen(bad, "w");
    fprintf(fp, "{\"messages\":[]}\n{\"input\":\"no messages\"}\n");
    fclose(fp);
    snprintf(args, sizeof args, "compare --model-a f16 --model-b q4 %s", bad);
    h_proc *c = h_run_cli(f->p, "compare", args);
    assert_int_equal(h_wait_exit(c, 30000), 2);
    assert_true(h_log_contains(c, "bad.jsonl:2:"));
    snprintf(args, sizeof args, "--model-a f16 --model-b q4 %s/missing.jsonl", f->p->dir);
    assert_int_equal(compare(f, args, NULL), 2);
    /* An unknown model is not a usage error: its answers fail to parse. */
    snprintf(args, sizeof args, "--model-a f16 --model-b nope --json %s", f->input);
    json_t *rep;
    assert_int_equal(compare(f, args, &rep), 1);
    assert_true(json_real_value(json_object_get(json_object_get(json_object_get(rep, "models"), "b"), "parse_rate")) == 0);
    json_decref(rep);
}

int main(void)
{
    h_apply_filter();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(agreement_is_exact_and_the_threshold_decides),
        cmocka_unit_test(usage_errors_exit_2),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
