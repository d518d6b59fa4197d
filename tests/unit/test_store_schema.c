/* Unit tests of the store's schema upgrades and of the tables added later
 * (app and pipeline runs, rollouts). */
#include "store_fixture.h"

static void test_upgrade_from_schema_1(void **state) {
    fx *f = *state;
    store_close(f->s);
    f->s = NULL;
    char db[128];
    snprintf(db, sizeof db, "%s/gpupool.db", f->dir);
    remove(db);
    sqlite3 *raw = NULL;
    assert_int_equal(sqlite3_open(db, &raw), SQLITE_OK);
    const char *v1 =
        "CREATE TABLE tasks(id TEXT PRIMARY KEY NOT NULL, type TEXT NOT NULL, model TEXT NOT NULL,"
        " priority INTEGER NOT NULL DEFAULT 0, status TEXT NOT NULL, node TEXT, attempts INTEGER NOT NULL DEFAULT 0,"
        " max_attempts INTEGER NOT NULL DEFAULT 1, input_json TEXT NOT NULL, result_json TEXT, error_code TEXT,"
        " error_message TEXT, idem_key TEXT UNIQUE, body_hash TEXT, created_ms INTEGER NOT NULL,"
        " started_ms INTEGER NOT NULL DEFAULT 0, finished_ms INTEGER NOT NULL DEFAULT 0);"
        "INSERT INTO tasks(id,type,model,status,input_json,created_ms) VALUES('task_old','chat','m','queued','{}',1);"
        "PRAGMA user_version=1;";
    assert_int_equal(sqlite3_exec(raw, v1, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(raw);
    char err[256] = "";
    f->s = store_open(f->dir, err, sizeof err);
    assert_non_null(f->s);
    queued_task q[2];
    assert_int_equal(store_task_queued(f->s, q, 2), 1);
    assert_string_equal(q[0].id, "task_old");
    assert_string_equal(q[0].owner, "");
    add(f->s, "task_new", 0, 2);
    /* The upgrade made the runs tables too. */
    char ids[1][64];
    assert_int_equal(store_run_active(f->s, ids, 1), 0);
}

/* Runs: one row and its stages, read back as JSON with the _json columns
 * parsed; only the named fields change; active runs are queued or running. */
static void test_runs_roundtrip(void **state) {
    fx *f = *state;
    const char *names[] = {"a", "b"}, *models[] = {"m1", "m2"};
    run_new r = {.id = "run_1", .kind = "pipeline", .name = "p", .def_json = "{\"stages\":[]}",
                 .input_json = "{\"text\":\"x\"}", .sensitivity = "private", .route_rule = "header", .owner = "k",
                 .priority = 7, .created_ms = 5, .stage_names = names, .stage_models = models, .n_stages = 2};
    assert_int_equal(store_run_insert(f->s, &r), STORE_OK);
    assert_int_not_equal(store_run_insert(f->s, &r), STORE_OK); /* the id is taken */
    json_t *j;
    assert_int_equal(store_run_get(f->s, "run_1", &j), STORE_OK);
    assert_string_equal(json_string_value(json_object_get(j, "status")), "queued");
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "input"), "text")), "x");
    assert_string_equal(json_string_value(json_object_get(j, "sensitivity")), "private");
    assert_int_equal(json_integer_value(json_object_get(j, "priority")), 7);
    json_t *st = json_object_get(j, "stages");
    assert_int_equal((int)json_array_size(st), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(st, 1), "model")), "m2");
    assert_string_equal(json_string_value(json_object_get(json_array_get(st, 1), "status")), "pending");
    assert_int_equal(json_integer_value(json_object_get(json_array_get(st, 1), "index")), 1);
    json_decref(j);

    json_t *set = json_pack("{s:s,s:s,s:i,s:{s:b},s:[i]}", "status", "running", "task_id", "task_x", "tries", 2,
                            "output", "ok", 1, "attempts", 1);
    assert_int_equal(store_run_stage_set(f->s, "run_1", 0, set), STORE_OK);
    json_decref(set);
    set = json_pack("{s:s,s:{s:s},s:s}", "status", "failed", "error", "code", "x", "name", "ignored");
    assert_int_equal(store_run_set(f->s, "run_1", set), STORE_OK);
    json_decref(set);
    assert_int_equal(store_run_get(f->s, "run_1", &j), STORE_OK);
    st = json_array_get(json_object_get(j, "stages"), 0);
    assert_string_equal(json_string_value(json_object_get(st, "task_id")), "task_x");
    assert_int_equal(json_integer_value(json_object_get(st, "tries")), 2);
    assert_true(json_is_true(json_object_get(json_object_get(st, "output"), "ok")));
    assert_int_equal((int)json_array_size(json_object_get(st, "attempts")), 1);
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "error"), "code")), "x");
    assert_string_equal(json_string_value(json_object_get(j, "name")), "p"); /* not a settable field */
    json_decref(j);

    char ids[4][64];
    assert_int_equal(store_run_active(f->s, ids, 4), 0);
    r.id = "run_2";
    assert_int_equal(store_run_insert(f->s, &r), STORE_OK);
    assert_int_equal(store_run_active(f->s, ids, 4), 1);
    assert_string_equal(ids[0], "run_2");
    assert_int_equal(store_run_get(f->s, "run_none", &j), STORE_NOT_FOUND);
    assert_null(j);

    /* A cancel ends the run and its unfinished stages, and nothing changes it after. */
    set = json_pack("{s:s,s:s}", "status", "running", "task_id", "task_y");
    assert_int_equal(store_run_stage_set(f->s, "run_2", 0, set), STORE_OK);
    json_decref(set);
    char task[64];
    assert_int_equal(store_run_cancel(f->s, "run_2", 9, task), STORE_OK);
    assert_string_equal(task, "task_y");
    assert_int_equal(store_run_cancel(f->s, "run_2", 9, task), STORE_STALE);
    assert_int_equal(store_run_cancel(f->s, "run_none", 9, task), STORE_NOT_FOUND);
    set = json_pack("{s:s}", "status", "succeeded");
    assert_int_equal(store_run_set(f->s, "run_2", set), STORE_STALE);
    assert_int_equal(store_run_stage_set(f->s, "run_2", 0, set), STORE_STALE);
    json_decref(set);
    assert_int_equal(store_run_get(f->s, "run_2", &j), STORE_OK);
    assert_string_equal(json_string_value(json_object_get(j, "status")), "canceled");
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "error"), "code")), "canceled");
    st = json_object_get(j, "stages");
    assert_string_equal(json_string_value(json_object_get(json_array_get(st, 0), "status")), "canceled");
    assert_string_equal(json_string_value(json_object_get(json_array_get(st, 1), "status")), "canceled");
    assert_int_equal(json_integer_value(json_object_get(j, "finished_ms")), 9);
    json_decref(j);
    assert_int_equal(store_run_active(f->s, ids, 4), 0);
}

/* A rollout is one row per name: a second write replaces the first, and
 * the rows come back whole after a reopen, oldest first. */
static void test_rollouts_kept_by_name(void **state) {
    fx *f = *state;
    json_t *none = store_rollout_all(f->s);
    assert_int_equal(json_array_size(none), 0);
    json_decref(none);
    assert_int_equal(store_rollout_put(f->s, "chat", "{\"name\":\"chat\",\"state\":\"running\"}", 10), STORE_OK);
    assert_int_equal(store_rollout_put(f->s, "embed", "{\"name\":\"embed\"}", 20), STORE_OK);
    assert_int_equal(store_rollout_put(f->s, "chat", "{\"name\":\"chat\",\"state\":\"rolled_back\"}", 30), STORE_OK);
    store_close(f->s);
    char err[256] = "";
    f->s = store_open(f->dir, err, sizeof err);
    assert_non_null(f->s);
    json_t *all = store_rollout_all(f->s);
    assert_int_equal(json_array_size(all), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(all, 0), "name")), "embed");
    assert_string_equal(json_string_value(json_object_get(json_array_get(all, 1), "state")), "rolled_back");
    json_decref(all);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void) {
    const struct CMUnitTest tests[] = {
        T(test_upgrade_from_schema_1),
        T(test_runs_roundtrip),
        T(test_rollouts_kept_by_name),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
