/* Unit tests: the rollout state machine, its windows and verdicts, and the
 * choice of version per request, with an injected clock. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api/rollout_table.h"
#include "sched/rollout.h"
#include "store/store.h"

static rollout *start(const char *extra)
{
    char text[1024];
    snprintf(text, sizeof text, "{\"name\":\"chat\",\"stable\":\"v1\",\"canary\":\"v2\"%s}", extra ? extra : "");
    json_t *body = json_loads(text, 0, NULL);
    assert_non_null(body);
    ro_spec spec;
    char param[64], msg[256];
    if (ro_spec_parse(body, &spec, param, sizeof param, msg, sizeof msg)) fail_msg("%s: %s", param, msg);
    json_decref(body);
    rollout *r = malloc(sizeof *r);
    ro_start(r, &spec, 1000, 5000);
    return r;
}

static const char *parse_error(const char *text)
{
    static char param[64];
    char msg[256];
    ro_spec spec;
    json_t *body = json_loads(text, 0, NULL);
    int rc = ro_spec_parse(body, &spec, param, sizeof param, msg, sizeof msg);
    json_decref(body);
    return rc ? param : NULL;
}

static void spec_defaults_and_errors(void **state)
{
    (void)state;
    rollout *r = start(NULL);
    assert_int_equal(r->spec.nsteps, 4);
    assert_int_equal(r->spec.steps[0], 5);
    assert_int_equal(r->spec.steps[3], 100);
    assert_int_equal(r->spec.window, 100);
    assert_int_equal(r->spec.min_samples, 20);
    assert_int_equal(r->state, RO_RUNNING);
    assert_int_equal(ro_share(r), 5);
    free(r);
    assert_string_equal(parse_error("{\"stable\":\"a\",\"canary\":\"b\"}"), "name");
    assert_string_equal(parse_error("{\"name\":\"n\",\"stable\":\"a\",\"canary\":\"a\"}"), "canary");
    assert_string_equal(parse_error("{\"name\":\"n/x\",\"stable\":\"a\",\"canary\":\"b\"}"), "name");
    assert_string_equal(parse_error("{\"name\":\"n\",\"stable\":\"a\",\"canary\":\"b\",\"steps\":[50,25]}"), "steps");
    assert_string_equal(parse_error("{\"name\":\"n\",\"stable\":\"a\",\"canary\":\"b\",\"steps\":[0]}"), "steps");
    assert_string_equal(parse_error("{\"name\":\"n\",\"stable\":\"a\",\"canary\":\"b\",\"max_error_rate\":2}"),
                        "max_error_rate");
    assert_string_equal(parse_error("{\"name\":\"n\",\"stable\":\"a\",\"canary\":\"b\",\"window\":10,\"min_samples\":11}"),
                        "min_samples");
    assert_string_equal(parse_error("{\"name\":\"n\",\"stable\":\"a\",\"canary\":\"b\",\"window\":1001}"), "window");
    assert_null(parse_error("{\"name\":\"n\",\"stable\":\"a\",\"canary\":\"b\",\"steps\":[10,100],\"window\":5}"));
}

/* Without a key the split is exact over every prefix of the requests. */
static void unkeyed_split_is_exact(void **state)
{
    (void)state;
    rollout *r = start(",\"steps\":[15,50,100]");
    int canary = 0;
    for (int i = 0; i < 20; i++) canary += ro_choose(r, NULL);
    assert_int_equal(canary, 3);
    for (int i = 0; i < 80; i++) canary += ro_choose(r, NULL);
    assert_int_equal(canary, 15);
    char why[200];
    assert_int_equal(ro_advance(r, 2000, 6000, why, sizeof why), 0);
    canary = 0;
    for (int i = 0; i < 10; i++) canary += ro_choose(r, NULL);
    assert_int_equal(canary, 5);
    assert_string_equal(ro_model(r, RO_CANARY), "v2");
    assert_string_equal(ro_model(r, RO_STABLE), "v1");
    free(r);
}

/* A key keeps its version, and the keyed split is near the share. */
static void keyed_choice_is_sticky(void **state)
{
    (void)state;
    rollout *r = start(",\"steps\":[25,100]");
    int canary = 0;
    char key[32];
    for (int i = 0; i < 4000; i++) {
        snprintf(key, sizeof key, "session-%d", i);
        int v = ro_choose(r, key);
        assert_int_equal(ro_choose(r, key), v);
        canary += v;
    }
    assert_in_range(canary, 900, 1100);
    /* Raising the share only moves keys to the canary, never back. */
    int before = ro_choose(r, "session-7");
    char why[200];
    ro_advance(r, 2000, 6000, why, sizeof why);
    assert_int_equal(ro_share(r), 100);
    if (before == RO_CANARY) assert_int_equal(ro_choose(r, "session-7"), RO_CANARY);
    free(r);
}

static void states_and_refusals(void **state)
{
    (void)state;
    rollout *r = start(",\"steps\":[10,100]");
    char why[200];
    assert_int_equal(ro_resume(r, 1000, 5000, why, sizeof why), -1);
    assert_non_null(strstr(why, "running"));
    assert_int_equal(ro_pause(r, 5000, why, sizeof why), 0);
    assert_int_equal(r->state, RO_PAUSED);
    assert_int_equal(ro_share(r), 10);
    assert_int_equal(ro_pause(r, 5000, why, sizeof why), -1);
    assert_int_equal(ro_resume(r, 1500, 5500, why, sizeof why), 0);
    assert_int_equal(ro_advance(r, 1600, 5600, why, sizeof why), 0);
    assert_int_equal(r->state, RO_RUNNING);
    assert_int_equal(ro_share(r), 100);
    assert_int_equal(ro_advance(r, 1700, 5700, why, sizeof why), 0);
    assert_int_equal(r->state, RO_COMPLETED);
    assert_int_equal(ro_share(r), 100);
    assert_int_equal(ro_choose(r, NULL), RO_CANARY);
    assert_int_equal(ro_advance(r, 1800, 5800, why, sizeof why), -1);
    assert_int_equal(ro_abort(r, 5800, why, sizeof why), -1);
    free(r);

    r = start(NULL);
    assert_int_equal(ro_abort(r, 5800, why, sizeof why), 0);
    assert_int_equal(r->state, RO_ABORTED);
    assert_int_equal(ro_share(r), 0);
    assert_int_equal(ro_choose(r, "any"), RO_STABLE);
    assert_non_null(strstr(r->reason, "aborted"));
    free(r);
}

/* Errors past the threshold roll back, but only once enough outcomes are in. */
static void rollback_on_error_rate(void **state)
{
    (void)state;
    rollout *r = start(",\"max_error_rate\":0.2,\"window\":10,\"min_samples\":5");
    for (int i = 0; i < 4; i++) assert_int_equal(ro_record(r, RO_CANARY, 1, 10, 1000 + i, 5000), 0);
    assert_int_equal(r->state, RO_RUNNING);
    /* Stable's errors are not the canary's. */
    for (int i = 0; i < 20; i++) assert_int_equal(ro_record(r, RO_STABLE, 1, 10, 1000, 5000), 0);
    assert_int_equal(ro_record(r, RO_CANARY, 1, 10, 1010, 5000), 1);
    assert_int_equal(r->state, RO_ROLLED_BACK);
    assert_non_null(strstr(r->reason, "error rate"));
    assert_int_equal(ro_share(r), 0);
    assert_int_equal(ro_choose(r, NULL), RO_STABLE);
    /* Once over, nothing moves it. */
    assert_int_equal(ro_record(r, RO_CANARY, 1, 10, 1020, 5000), 0);
    free(r);

    /* 1 error in 10 is within 0.2; the window slides past old errors. */
    r = start(",\"max_error_rate\":0.2,\"window\":10,\"min_samples\":5");
    for (int i = 0; i < 9; i++) ro_record(r, RO_CANARY, 0, 10, 1000, 5000);
    assert_int_equal(ro_record(r, RO_CANARY, 1, 10, 1000, 5000), 0);
    ro_stats st;
    ro_window_stats(r, RO_CANARY, 1000, &st);
    assert_int_equal(st.n, 10);
    assert_int_equal(st.errors, 1);
    for (int i = 0; i < 10; i++) ro_record(r, RO_CANARY, 0, 10, 1000, 5000);
    ro_window_stats(r, RO_CANARY, 1000, &st);
    assert_int_equal(st.errors, 0);
    assert_int_equal(r->win[RO_CANARY].errors, 1);
    assert_int_equal(r->state, RO_RUNNING);
    free(r);
}

static void rollback_on_p95_and_time_window(void **state)
{
    (void)state;
    rollout *r = start(",\"max_p95_ms\":100,\"window\":100,\"window_s\":10,\"min_samples\":20");
    /* 19 fast and 1 slow: the p95 (nearest rank 19 of 20) is fast. */
    for (int i = 0; i < 19; i++) ro_record(r, RO_CANARY, 0, 50, 1000, 5000);
    assert_int_equal(ro_record(r, RO_CANARY, 0, 500, 1000, 5000), 0);
    ro_stats st;
    ro_window_stats(r, RO_CANARY, 1000, &st);
    assert_true(st.p95_ms == 50);
    /* Eleven seconds on, those have left the window: no verdict yet. */
    char why[200];
    assert_int_equal(ro_judge(r, 12001, why, sizeof why), RO_WAIT);
    for (int i = 0; i < 19; i++) assert_int_equal(ro_record(r, RO_CANARY, 0, 150, 12001, 5000), 0);
    assert_int_equal(ro_record(r, RO_CANARY, 0, 150, 12001, 5000), 1);
    assert_non_null(strstr(r->reason, "p95"));
    free(r);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The p95 by selection equals the nearest rank of the sorted window, with
 * duplicates and in every size. */
static void p95_matches_a_sort(void **state)
{
    (void)state;
    unsigned seed = 7;
    for (int n = 1; n <= 300; n += 7) {
        char extra[64];
        snprintf(extra, sizeof extra, ",\"window\":%d,\"min_samples\":1", n);
        rollout *r = start(extra);
        double v[300];
        for (int i = 0; i < n; i++) {
            seed = seed * 1103515245u + 12345u;
            v[i] = (double)((seed >> 16) % (n % 3 ? 50 : 1000));
            ro_record(r, RO_STABLE, 0, v[i], 1000, 5000);
        }
        qsort(v, (size_t)n, sizeof v[0], cmp_double);
        int rank = (int)ceil(0.95 * n);
        ro_stats st;
        ro_window_stats(r, RO_STABLE, 1000, &st);
        assert_int_equal(st.n, n);
        assert_true(st.p95_ms == v[rank - 1]);
        free(r);
    }
}

/* Auto-advance waits for its time and for a healthy window; a pause stops
 * the clock; a rollback still happens while paused. */
static void auto_advance(void **state)
{
    (void)state;
    rollout *r = start(",\"steps\":[10,50,100],\"auto_advance_s\":2,\"window\":10,\"min_samples\":3");
    assert_int_equal(ro_tick(r, 2999, 5000), 0);
    assert_int_equal(ro_tick(r, 3000, 5000), 0); /* time is up, but no outcomes yet */
    for (int i = 0; i < 3; i++) ro_record(r, RO_CANARY, 0, 10, 3000, 5000);
    assert_int_equal(ro_tick(r, 3001, 5000), 1);
    assert_int_equal(ro_share(r), 50);
    assert_int_equal(ro_tick(r, 4000, 5000), 0);
    char why[200];
    assert_int_equal(ro_pause(r, 5000, why, sizeof why), 0);
    assert_int_equal(ro_tick(r, 9000, 5000), 0);
    assert_int_equal(ro_resume(r, 9000, 5000, why, sizeof why), 0);
    assert_int_equal(ro_tick(r, 10999, 5000), 0);
    assert_int_equal(ro_tick(r, 11000, 5000), 1);
    assert_int_equal(ro_share(r), 100);
    assert_int_equal(ro_pause(r, 5000, why, sizeof why), 0);
    for (int i = 0; i < 3; i++) ro_record(r, RO_CANARY, 1, 10, 11000, 5000);
    assert_int_equal(r->state, RO_ROLLED_BACK);
    free(r);
}

static void json_round_trip(void **state)
{
    (void)state;
    rollout *r = start(",\"steps\":[10,50,100],\"window\":10,\"min_samples\":3,\"auto_advance_s\":1.5");
    char why[200];
    ro_advance(r, 2000, 7000, why, sizeof why);
    ro_pause(r, 8000, why, sizeof why);
    ro_record(r, RO_CANARY, 1, 10, 2000, 8000);
    json_t *j = ro_to_json(r, 2000);
    assert_string_equal(json_string_value(json_object_get(j, "state")), "paused");
    assert_int_equal(json_integer_value(json_object_get(j, "share")), 50);
    json_t *canary = json_object_get(json_object_get(j, "versions"), "canary");
    assert_int_equal(json_integer_value(json_object_get(canary, "errors")), 1);
    char *text = json_dumps(j, 0);
    json_decref(j);
    rollout *back = malloc(sizeof *back);
    j = json_loads(text, 0, NULL);
    assert_int_equal(ro_from_json(j, back, 50), 0);
    json_decref(j);
    free(text);
    assert_int_equal(back->state, RO_PAUSED);
    assert_int_equal(back->step, 1);
    assert_int_equal(back->spec.auto_advance_ms, 1500);
    assert_int_equal(back->created_wall_ms, 5000);
    assert_int_equal(back->updated_wall_ms, 8000);
    assert_string_equal(back->reason, r->reason);
    assert_int_equal(back->step_started_ms, 50);
    free(back);
    free(r);
}

/* The table: routing by name, outcomes that roll back, refusals, and the
 * state written to the store and read back by a new table. */
static void table_routes_records_and_keeps(void **state)
{
    (void)state;
    char dir[] = "/tmp/gpupool-rollout-XXXXXX", err[256];
    assert_non_null(mkdtemp(dir));
    store *st = store_open(dir, err, sizeof err);
    assert_non_null(st);
    rollout_table *t = rollout_table_open(st, err, sizeof err);
    assert_non_null(t);
    rollout *r = start(",\"steps\":[50,100],\"window\":10,\"min_samples\":2,\"max_error_rate\":0.5");
    json_t *view;
    char why[300];
    assert_int_equal(rollout_table_create(t, &r->spec, &view, why, sizeof why), ROLLOUT_OK);
    json_decref(view);
    assert_int_equal(rollout_table_create(t, &r->spec, &view, why, sizeof why), ROLLOUT_REFUSED);
    assert_null(view);
    /* A second rollout may not use this one's name as a version. */
    ro_spec loop = r->spec;
    snprintf(loop.name, sizeof loop.name, "chat2");
    snprintf(loop.canary, sizeof loop.canary, "chat");
    assert_int_equal(rollout_table_create(t, &loop, &view, why, sizeof why), ROLLOUT_REFUSED);

    rollout_pick pk;
    assert_int_equal(rollout_table_route(t, "v1", NULL, &pk), 0);
    assert_true(rollout_table_mentioned(t, "{\"model\":\"chat\"}", 16));
    assert_false(rollout_table_mentioned(t, "{\"model\":\"v1\"}", 14));
    assert_int_equal(rollout_table_route(t, "chat", NULL, &pk), 1);
    assert_int_equal(pk.version, RO_STABLE);
    assert_string_equal(pk.model, "v1");
    assert_int_equal(rollout_table_route(t, "chat", NULL, &pk), 1);
    assert_int_equal(pk.version, RO_CANARY);
    assert_string_equal(pk.model, "v2");
    /* A task's outcome counts by model; one error in two is within 0.5... */
    rollout_table_model_outcome(t, "v2", 0, 5);
    rollout_table_outcome(t, "chat", RO_CANARY, 1, 5);
    json_t *j = rollout_table_get(t, "chat");
    assert_string_equal(json_string_value(json_object_get(j, "state")), "running");
    json_decref(j);
    /* ...two in three are not. */
    rollout_table_outcome(t, "chat", RO_CANARY, 1, 5);
    assert_int_equal(rollout_table_act(t, "chat", "pause", &view, why, sizeof why), ROLLOUT_REFUSED);
    assert_string_equal(json_string_value(json_object_get(view, "state")), "rolled_back");
    json_decref(view);
    assert_int_equal(rollout_table_act(t, "nope", "pause", &view, why, sizeof why), ROLLOUT_NOT_FOUND);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(rollout_table_route(t, "chat", NULL, &pk), 1);
        assert_int_equal(pk.version, RO_STABLE);
    }
    buf m = {0};
    rollout_table_metrics(t, &m);
    assert_non_null(strstr(m.data, "gpupool_rollout_errors_total{rollout=\"chat\",version=\"canary\",model=\"v2\"} 2"));
    buf_free(&m);
    rollout_table_close(t);

    t = rollout_table_open(st, err, sizeof err);
    assert_non_null(t);
    j = rollout_table_list(t);
    assert_int_equal(json_array_size(j), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(j, 0), "state")), "rolled_back");
    assert_non_null(strstr(json_string_value(json_object_get(json_array_get(j, 0), "reason")), "error rate"));
    json_decref(j);
    /* A finished rollout's name may be used again. */
    assert_int_equal(rollout_table_create(t, &r->spec, &view, why, sizeof why), ROLLOUT_OK);
    json_decref(view);
    rollout_table_close(t);
    store_close(st);
    free(r);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(spec_defaults_and_errors), cmocka_unit_test(unkeyed_split_is_exact),
        cmocka_unit_test(keyed_choice_is_sticky),   cmocka_unit_test(states_and_refusals),
        cmocka_unit_test(rollback_on_error_rate),   cmocka_unit_test(rollback_on_p95_and_time_window),
        cmocka_unit_test(auto_advance),             cmocka_unit_test(json_round_trip),
        cmocka_unit_test(table_routes_records_and_keeps), cmocka_unit_test(p95_matches_a_sort),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
