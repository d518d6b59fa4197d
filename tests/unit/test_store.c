/* Unit tests for store/sqlite.c: every test gets a fresh temporary directory. */
#include "store_fixture.h"

/* ---- open ---------------------------------------------------------------- */

static void test_open_creates_nested_dir(void **state) {
    fx *f = *state;
    char dir[128], db[160], err[256] = "";
    snprintf(dir, sizeof dir, "%s/a/b/c", f->dir);
    store *s = store_open(dir, err, sizeof err);
    assert_non_null(s);
    struct stat sb;
    assert_int_equal(stat(dir, &sb), 0);
    assert_true(S_ISDIR(sb.st_mode));
    assert_int_equal(sb.st_mode & 0777, 0700);
    snprintf(db, sizeof db, "%s/gpupool.db", dir);
    assert_int_equal(stat(db, &sb), 0);
    store_close(s);
}

static void test_open_fails_on_file(void **state) {
    fx *f = *state;
    char path[128], err[256] = "";
    snprintf(path, sizeof path, "%s/plainfile", f->dir);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fclose(fp);
    assert_null(store_open(path, err, sizeof err));
    assert_true(strlen(err) > 0);
    assert_null(strchr(err, '\n'));
    /* A directory below a file cannot be created either. */
    char below[160];
    snprintf(below, sizeof below, "%s/sub", path);
    err[0] = '\0';
    assert_null(store_open(below, err, sizeof err));
    assert_true(strlen(err) > 0);
    assert_null(store_open("", err, sizeof err));
    assert_null(store_open(NULL, NULL, 0));
}

static void test_open_fails_on_garbage_db(void **state) {
    fx *f = *state;
    char dir[128], db[160], err[256] = "";
    snprintf(dir, sizeof dir, "%s/bad", f->dir);
    assert_int_equal(mkdir(dir, 0700), 0);
    snprintf(db, sizeof db, "%s/gpupool.db", dir);
    FILE *fp = fopen(db, "w");
    assert_non_null(fp);
    for (int i = 0; i < 200; i++) fputs("this is not a sqlite database\n", fp);
    fclose(fp);
    assert_null(store_open(dir, err, sizeof err));
    assert_non_null(strstr(err, "not a database"));
    assert_null(strchr(err, '\n'));
}

static void test_reopen_and_wal(void **state) {
    fx *f = *state;
    task_new t = {.id = "task_keep", .type = "embedding", .model = "bge", .priority = 7,
                  .input_json = "{\"input\":\"x\"}", .idem_key = "k1", .body_hash = "h1",
                  .max_attempts = 2, .created_ms = 1234};
    assert_int_equal(store_task_insert(f->s, &t, NULL), STORE_OK);
    int attempt = 0;
    assert_int_equal(store_task_claim(f->s, "task_keep", "gpu-a", 2000, &attempt), STORE_OK);
    assert_int_equal(store_task_succeed(f->s, "task_keep", attempt, "{\"v\":1}", 2500), STORE_OK);
    store_close(f->s);
    f->s = NULL;

    char db[128];
    snprintf(db, sizeof db, "%s/gpupool.db", f->dir);
    sqlite3 *raw = NULL;
    assert_int_equal(sqlite3_open_v2(db, &raw, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(raw, "PRAGMA journal_mode", -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(st, 0), "wal");
    sqlite3_finalize(st);
    assert_int_equal(sqlite3_prepare_v2(raw, "PRAGMA user_version", -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(st, 0), 6);
    sqlite3_finalize(st);
    sqlite3_close(raw);

    char err[256] = "";
    f->s = store_open(f->dir, err, sizeof err);
    assert_non_null(f->s);
    task_rec r;
    assert_int_equal(store_task_get(f->s, "task_keep", &r), STORE_OK);
    assert_string_equal(r.type, "embedding");
    assert_string_equal(r.model, "bge");
    assert_string_equal(r.status, "succeeded");
    assert_string_equal(r.node, "gpu-a");
    assert_string_equal(r.input_json, "{\"input\":\"x\"}");
    assert_string_equal(r.result_json, "{\"v\":1}");
    assert_int_equal(r.priority, 7);
    assert_int_equal(r.attempts, 1);
    assert_int_equal(r.max_attempts, 2);
    assert_int_equal(r.created_ms, 1234);
    assert_int_equal(r.started_ms, 2000);
    assert_int_equal(r.finished_ms, 2500);
    task_rec_free(&r);
    /* The idempotency key survived too. */
    char existing[64] = "";
    assert_int_equal(store_task_insert(f->s, &(task_new){.id = "task_other", .type = "chat",
                                                         .model = "m", .input_json = "{}",
                                                         .idem_key = "k1", .body_hash = "h1"},
                                       existing),
                     STORE_DUPLICATE);
    assert_string_equal(existing, "task_keep");
}

/* ---- insert / get ---------------------------------------------------------- */

static void test_insert_get_roundtrip(void **state) {
    fx *f = *state;
    add(f->s, "task_1", 5, 100);
    task_rec r;
    assert_int_equal(store_task_get(f->s, "task_1", &r), STORE_OK);
    assert_string_equal(r.id, "task_1");
    assert_string_equal(r.type, "chat");
    assert_string_equal(r.status, "queued");
    assert_null(r.node);
    assert_null(r.result_json);
    assert_null(r.error_code);
    assert_int_equal(r.attempts, 0);
    assert_int_equal(r.started_ms, 0);
    assert_int_equal(r.finished_ms, 0);
    task_rec_free(&r);
    task_rec_free(&r); /* idempotent */
}

static void test_unknown_and_null_ids(void **state) {
    fx *f = *state;
    task_rec r;
    int attempt = 0;
    assert_int_equal(store_task_get(f->s, "task_nope", &r), STORE_NOT_FOUND);
    assert_null(r.id);
    assert_int_equal(store_task_get(f->s, NULL, &r), STORE_NOT_FOUND);
    assert_int_equal(store_task_claim(f->s, "task_nope", "n", 1, &attempt), STORE_NOT_FOUND);
    assert_int_equal(store_task_succeed(f->s, "task_nope", 1, "{}", 1), STORE_NOT_FOUND);
    assert_int_equal(store_task_fail(f->s, "task_nope", 1, "x", "y", 1), STORE_NOT_FOUND);
    assert_int_equal(store_task_requeue(f->s, "task_nope", 1, "x", "y"), STORE_NOT_FOUND);
    assert_int_equal(store_task_cancel(f->s, "task_nope", 1), STORE_NOT_FOUND);
    assert_int_equal(store_task_cancel(f->s, NULL, 1), STORE_NOT_FOUND);
    json_t *a = store_task_attempts(f->s, "task_nope");
    assert_non_null(a);
    assert_int_equal(json_array_size(a), 0);
    json_decref(a);
    a = store_task_attempts(f->s, NULL);
    assert_int_equal(json_array_size(a), 0);
    json_decref(a);
    assert_null(store_task_json(NULL));
    store_close(NULL);
}

static void test_db_error_reported(void **state) {
    fx *f = *state;
    add(f->s, "task_dup", 0, 1);
    task_new t = {.id = "task_dup", .type = "chat", .model = "m", .input_json = "{}"};
    assert_int_equal(store_task_insert(f->s, &t, NULL), STORE_ERR);
    assert_non_null(strstr(store_errmsg(f->s), "UNIQUE"));
    t.id = "task_nomodel";
    t.model = NULL;
    assert_int_equal(store_task_insert(f->s, &t, NULL), STORE_ERR);
    assert_true(strlen(store_errmsg(f->s)) > 0);
    /* A failed claim (node is required) leaves the task queued. */
    int attempt = 0;
    assert_int_equal(store_task_claim(f->s, "task_dup", NULL, 5, &attempt), STORE_ERR);
    assert_status(f->s, "task_dup", "queued");
    /* The connection is still usable after errors. */
    add(f->s, "task_after", 0, 2);
}

/* ---- idempotency ----------------------------------------------------------- */

static void test_idempotency(void **state) {
    fx *f = *state;
    task_new t = {.id = "task_a", .type = "chat", .model = "m", .input_json = "{}",
                  .idem_key = "key-1", .body_hash = "hash-1", .max_attempts = 1};
    char existing[64] = "";
    assert_int_equal(store_task_insert(f->s, &t, existing), STORE_OK);
    t.id = "task_b";
    assert_int_equal(store_task_insert(f->s, &t, existing), STORE_DUPLICATE);
    assert_string_equal(existing, "task_a");
    t.body_hash = "hash-2";
    assert_int_equal(store_task_insert(f->s, &t, existing), STORE_CONFLICT);
    task_rec r;
    assert_int_equal(store_task_get(f->s, "task_b", &r), STORE_NOT_FOUND);
    /* A different key, or no key at all, inserts normally. */
    t.idem_key = "key-2";
    assert_int_equal(store_task_insert(f->s, &t, existing), STORE_OK);
    t.idem_key = NULL;
    t.id = "task_c";
    assert_int_equal(store_task_insert(f->s, &t, NULL), STORE_OK);
    t.id = "task_d";
    assert_int_equal(store_task_insert(f->s, &t, NULL), STORE_OK);
    int64_t c[5];
    assert_int_equal(store_task_counts(f->s, c), STORE_OK);
    assert_int_equal(c[0], 4);
}

#define RACERS 8
typedef struct racer {
    store *s;
    int idx, rc;
    char existing[64];
} racer;

static void *race(void *arg) {
    racer *r = arg;
    char id[32];
    snprintf(id, sizeof id, "task_race%d", r->idx);
    task_new t = {.id = id, .type = "chat", .model = "m", .input_json = "{}",
                  .idem_key = "same-key", .body_hash = "same-hash", .max_attempts = 1};
    r->rc = store_task_insert(r->s, &t, r->existing);
    return NULL;
}

static void test_idempotency_race(void **state) {
    fx *f = *state;
    pthread_t th[RACERS];
    racer rs[RACERS];
    for (int i = 0; i < RACERS; i++) {
        rs[i] = (racer){.s = f->s, .idx = i};
        assert_int_equal(pthread_create(&th[i], NULL, race, &rs[i]), 0);
    }
    for (int i = 0; i < RACERS; i++) pthread_join(th[i], NULL);
    int winner = -1, dups = 0;
    for (int i = 0; i < RACERS; i++) {
        if (rs[i].rc == STORE_OK) {
            assert_int_equal(winner, -1);
            winner = i;
        } else {
            assert_int_equal(rs[i].rc, STORE_DUPLICATE);
            dups++;
        }
    }
    assert_int_not_equal(winner, -1);
    assert_int_equal(dups, RACERS - 1);
    char want[32];
    snprintf(want, sizeof want, "task_race%d", winner);
    for (int i = 0; i < RACERS; i++)
        if (i != winner) assert_string_equal(rs[i].existing, want);
}

/* ---- transitions ------------------------------------------------------------ */

static void test_claim(void **state) {
    fx *f = *state;
    add(f->s, "task_c", 0, 10);
    int attempt = 0;
    assert_int_equal(store_task_claim(f->s, "task_c", "gpu-a", 20, &attempt), STORE_OK);
    assert_int_equal(attempt, 1);
    task_rec r;
    assert_int_equal(store_task_get(f->s, "task_c", &r), STORE_OK);
    assert_string_equal(r.status, "running");
    assert_string_equal(r.node, "gpu-a");
    assert_int_equal(r.attempts, 1);
    assert_int_equal(r.started_ms, 20);
    task_rec_free(&r);
    /* Only from queued. */
    attempt = 99;
    assert_int_equal(store_task_claim(f->s, "task_c", "gpu-b", 30, &attempt), STORE_STALE);
    assert_int_equal(attempt, 99);
    assert_int_equal(store_task_requeue(f->s, "task_c", 1, "node_lost", "gone"), STORE_OK);
    assert_int_equal(store_task_claim(f->s, "task_c", "gpu-b", 40, &attempt), STORE_OK);
    assert_int_equal(attempt, 2);
    assert_int_equal(store_task_succeed(f->s, "task_c", 2, "{}", 50), STORE_OK);
    assert_int_equal(store_task_claim(f->s, "task_c", "gpu-b", 60, &attempt), STORE_STALE);
}

static void test_succeed_write_once(void **state) {
    fx *f = *state;
    add(f->s, "task_s", 0, 10);
    int attempt = 0;
    assert_int_equal(store_task_claim(f->s, "task_s", "gpu-a", 20, &attempt), STORE_OK);
    assert_int_equal(store_task_succeed(f->s, "task_s", attempt, "{\"first\":true}", 30), STORE_OK);
    assert_int_equal(store_task_succeed(f->s, "task_s", attempt, "{\"second\":true}", 40),
                     STORE_STALE);
    assert_int_equal(store_task_fail(f->s, "task_s", attempt, "oops", "late", 50), STORE_STALE);
    assert_int_equal(store_task_requeue(f->s, "task_s", attempt, "x", "y"), STORE_STALE);
    task_rec r;
    assert_int_equal(store_task_get(f->s, "task_s", &r), STORE_OK);
    assert_string_equal(r.status, "succeeded");
    assert_string_equal(r.result_json, "{\"first\":true}");
    assert_int_equal(r.finished_ms, 30);
    assert_null(r.error_code);
    task_rec_free(&r);
}

static void test_succeed_rejects_unmade_attempt(void **state) {
    fx *f = *state;
    add(f->s, "task_u", 0, 10);
    /* Never claimed: no attempt can have produced a result. */
    assert_int_equal(store_task_succeed(f->s, "task_u", 1, "{}", 20), STORE_STALE);
    int attempt = 0;
    assert_int_equal(store_task_claim(f->s, "task_u", "gpu-a", 20, &attempt), STORE_OK);
    assert_int_equal(store_task_succeed(f->s, "task_u", 2, "{}", 30), STORE_STALE);
    assert_int_equal(store_task_succeed(f->s, "task_u", 0, "{}", 30), STORE_STALE);
    assert_status(f->s, "task_u", "running");
}

static void test_late_result_from_earlier_attempt(void **state) {
    fx *f = *state;
    add(f->s, "task_l", 0, 10);
    int attempt = 0;
    assert_int_equal(store_task_claim(f->s, "task_l", "gpu-a", 20, &attempt), STORE_OK);
    assert_int_equal(store_task_requeue(f->s, "task_l", 1, "node_lost", "heartbeat missed"),
                     STORE_OK);
    /* Attempt 1's late result while the task is queued again: accepted, clears error. */
    assert_int_equal(store_task_succeed(f->s, "task_l", 1, "{\"late\":1}", 30), STORE_OK);
    task_rec r;
    assert_int_equal(store_task_get(f->s, "task_l", &r), STORE_OK);
    assert_string_equal(r.status, "succeeded");
    assert_string_equal(r.node, "gpu-a");
    assert_null(r.error_code);
    assert_null(r.error_message);
    task_rec_free(&r);

    /* Same while attempt 2 runs elsewhere: attempt 1 wins, attempt 2 is superseded. */
    add(f->s, "task_m", 0, 10);
    assert_int_equal(store_task_claim(f->s, "task_m", "gpu-a", 20, &attempt), STORE_OK);
    assert_int_equal(store_task_requeue(f->s, "task_m", 1, "node_lost", "gone"), STORE_OK);
    assert_int_equal(store_task_claim(f->s, "task_m", "gpu-b", 25, &attempt), STORE_OK);
    assert_int_equal(attempt, 2);
    assert_int_equal(store_task_succeed(f->s, "task_m", 1, "{\"a\":1}", 30), STORE_OK);
    assert_int_equal(store_task_succeed(f->s, "task_m", 2, "{\"b\":2}", 35), STORE_STALE);
    assert_int_equal(store_task_get(f->s, "task_m", &r), STORE_OK);
    assert_string_equal(r.result_json, "{\"a\":1}");
    assert_string_equal(r.node, "gpu-a");
    task_rec_free(&r);
    json_t *a = store_task_attempts(f->s, "task_m");
    assert_int_equal(json_array_size(a), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(a, 0), "outcome")),
                        "succeeded");
    assert_string_equal(json_string_value(json_object_get(json_array_get(a, 1), "outcome")),
                        "superseded");
    assert_int_equal(json_integer_value(json_object_get(json_array_get(a, 1), "ended_at")), 30);
    json_decref(a);
}

static void test_fail_write_once(void **state) {
    fx *f = *state;
    add(f->s, "task_f", 0, 10);
    int attempt = 0;
    assert_int_equal(store_task_claim(f->s, "task_f", "gpu-a", 20, &attempt), STORE_OK);
    assert_int_equal(store_task_fail(f->s, "task_f", attempt, "model_error", "CUDA OOM", 30),
                     STORE_OK);
    assert_int_equal(store_task_fail(f->s, "task_f", attempt, "other", "again", 40), STORE_STALE);
    assert_int_equal(store_task_succeed(f->s, "task_f", attempt, "{}", 50), STORE_STALE);
    assert_int_equal(store_task_cancel(f->s, "task_f", 60), STORE_STALE);
    task_rec r;
    assert_int_equal(store_task_get(f->s, "task_f", &r), STORE_OK);
    assert_string_equal(r.status, "failed");
    assert_string_equal(r.error_code, "model_error");
    assert_string_equal(r.error_message, "CUDA OOM");
    assert_null(r.result_json);
    assert_int_equal(r.finished_ms, 30);
    task_rec_free(&r);
    json_t *a = store_task_attempts(f->s, "task_f");
    json_t *a0 = json_array_get(a, 0);
    assert_string_equal(json_string_value(json_object_get(a0, "outcome")), "model_error");
    assert_string_equal(json_string_value(json_object_get(a0, "message")), "CUDA OOM");
    json_decref(a);
}

static void test_requeue(void **state) {
    fx *f = *state;
    add(f->s, "task_r", 0, 10);
    int attempt = 0;
    /* Not running yet. */
    assert_int_equal(store_task_requeue(f->s, "task_r", 0, "x", "y"), STORE_STALE);
    assert_int_equal(store_task_claim(f->s, "task_r", "gpu-a", 20, &attempt), STORE_OK);
    assert_int_equal(store_task_requeue(f->s, "task_r", 2, "x", "y"), STORE_STALE);
    assert_int_equal(store_task_requeue(f->s, "task_r", 1, "node_lost", "no heartbeat"), STORE_OK);
    task_rec r;
    assert_int_equal(store_task_get(f->s, "task_r", &r), STORE_OK);
    assert_string_equal(r.status, "queued");
    assert_null(r.node);
    assert_string_equal(r.error_code, "node_lost");
    assert_string_equal(r.error_message, "no heartbeat");
    task_rec_free(&r);
    /* A second requeue of the same attempt is stale, as is one of an older attempt. */
    assert_int_equal(store_task_requeue(f->s, "task_r", 1, "x", "y"), STORE_STALE);
    assert_int_equal(store_task_claim(f->s, "task_r", "gpu-b", 30, &attempt), STORE_OK);
    assert_int_equal(store_task_requeue(f->s, "task_r", 1, "x", "y"), STORE_STALE);
    assert_status(f->s, "task_r", "running");
}

static void test_cancel(void **state) {
    fx *f = *state;
    add(f->s, "task_q", 0, 10);
    add(f->s, "task_run", 0, 10);
    int attempt = 0;
    assert_int_equal(store_task_claim(f->s, "task_run", "gpu-a", 20, &attempt), STORE_OK);
    assert_int_equal(store_task_cancel(f->s, "task_q", 30), STORE_OK);
    assert_int_equal(store_task_cancel(f->s, "task_run", 40), STORE_OK);
    assert_int_equal(store_task_cancel(f->s, "task_run", 50), STORE_STALE);
    task_rec r;
    assert_int_equal(store_task_get(f->s, "task_run", &r), STORE_OK);
    assert_string_equal(r.status, "canceled");
    assert_int_equal(r.finished_ms, 40);
    task_rec_free(&r);
    assert_int_equal(store_task_succeed(f->s, "task_run", 1, "{}", 60), STORE_STALE);
    assert_int_equal(store_task_claim(f->s, "task_q", "gpu-a", 60, &attempt), STORE_STALE);
    json_t *a = store_task_attempts(f->s, "task_run");
    assert_string_equal(json_string_value(json_object_get(json_array_get(a, 0), "outcome")),
                        "canceled");
    json_decref(a);
}

static void test_requeue_running(void **state) {
    fx *f = *state;
    add(f->s, "task_1", 0, 1);
    add(f->s, "task_2", 0, 2);
    add(f->s, "task_3", 0, 3);
    int attempt = 0;
    assert_int_equal(store_task_claim(f->s, "task_1", "gpu-a", 10, &attempt), STORE_OK);
    assert_int_equal(store_task_claim(f->s, "task_2", "gpu-b", 10, &attempt), STORE_OK);
    assert_int_equal(store_requeue_running(f->s), 2);
    assert_int_equal(store_requeue_running(f->s), 0);
    int64_t c[5];
    assert_int_equal(store_task_counts(f->s, c), STORE_OK);
    assert_int_equal(c[0], 3);
    assert_int_equal(c[1], 0);
    task_rec r;
    assert_int_equal(store_task_get(f->s, "task_2", &r), STORE_OK);
    assert_null(r.node);
    assert_int_equal(r.attempts, 1);
    assert_string_equal(r.error_code, "coordinator_restart");
    task_rec_free(&r);
    json_t *a = store_task_attempts(f->s, "task_1");
    json_t *a0 = json_array_get(a, 0);
    assert_string_equal(json_string_value(json_object_get(a0, "outcome")), "coordinator_restart");
    assert_true(json_integer_value(json_object_get(a0, "ended_at")) > 0);
    json_decref(a);
    /* The requeued task can run again as attempt 2. */
    assert_int_equal(store_task_claim(f->s, "task_1", "gpu-c", 20, &attempt), STORE_OK);
    assert_int_equal(attempt, 2);
}

/* ---- queries ------------------------------------------------------------- */

static void test_next_queued_order(void **state) {
    fx *f = *state;
    add(f->s, "task_low_old", 1, 100);
    add(f->s, "task_high_new", 9, 300);
    add(f->s, "task_high_old", 9, 200);
    add(f->s, "task_mid_tie_a", 5, 150);
    add(f->s, "task_mid_tie_b", 5, 150); /* same time: insertion order */
    add(f->s, "task_running", 9, 50);
    int attempt = 0;
    assert_int_equal(store_task_claim(f->s, "task_running", "gpu-a", 60, &attempt), STORE_OK);
    queued_task q[10];
    assert_int_equal(store_task_queued(f->s, q, 10), 5);
    assert_string_equal(q[0].id, "task_high_old");
    assert_string_equal(q[1].id, "task_high_new");
    assert_string_equal(q[2].id, "task_mid_tie_a");
    assert_string_equal(q[3].id, "task_mid_tie_b");
    assert_string_equal(q[4].id, "task_low_old");
    assert_int_equal(store_task_queued(f->s, q, 2), 2);
    assert_string_equal(q[1].id, "task_high_new");
    assert_int_equal(store_task_queued(f->s, q, 0), 0);
    /* The queue position agrees with the dispatch order. */
    const char *order[] = {"task_high_old", "task_high_new", "task_mid_tie_a", "task_mid_tie_b", "task_low_old"};
    for (int i = 0; i < 5; i++) {
        int64_t ahead = -1;
        assert_int_equal(store_task_queue_position(f->s, order[i], &ahead), STORE_OK);
        assert_int_equal(ahead, i);
    }
}

static void test_counts(void **state) {
    fx *f = *state;
    int64_t c[5];
    assert_int_equal(store_task_counts(f->s, c), STORE_OK);
    for (int i = 0; i < 5; i++) assert_int_equal(c[i], 0);
    const char *ids[] = {"t0", "t1", "t2", "t3", "t4", "t5", "t6"};
    for (int i = 0; i < 7; i++) add(f->s, ids[i], 0, i);
    int a = 0;
    for (int i = 1; i < 7; i++) assert_int_equal(store_task_claim(f->s, ids[i], "n", 10, &a), STORE_OK);
    assert_int_equal(store_task_succeed(f->s, "t2", 1, "{}", 20), STORE_OK);
    assert_int_equal(store_task_succeed(f->s, "t3", 1, "{}", 20), STORE_OK);
    assert_int_equal(store_task_fail(f->s, "t4", 1, "e", "m", 20), STORE_OK);
    assert_int_equal(store_task_cancel(f->s, "t5", 20), STORE_OK);
    assert_int_equal(store_task_cancel(f->s, "t6", 20), STORE_OK);
    assert_int_equal(store_task_counts(f->s, c), STORE_OK);
    assert_int_equal(c[0], 1);
    assert_int_equal(c[1], 1);
    assert_int_equal(c[2], 2);
    assert_int_equal(c[3], 1);
    assert_int_equal(c[4], 2);
}

static void test_task_json_shape(void **state) {
    fx *f = *state;
    add(f->s, "task_j", 4, 1000);
    task_rec r;
    assert_int_equal(store_task_get(f->s, "task_j", &r), STORE_OK);
    json_t *j = store_task_json(&r);
    task_rec_free(&r);
    assert_string_equal(json_string_value(json_object_get(j, "id")), "task_j");
    assert_string_equal(json_string_value(json_object_get(j, "object")), "task");
    assert_string_equal(json_string_value(json_object_get(j, "type")), "chat");
    assert_string_equal(json_string_value(json_object_get(j, "model")), "llama3");
    assert_int_equal(json_integer_value(json_object_get(j, "priority")), 4);
    assert_string_equal(json_string_value(json_object_get(j, "status")), "queued");
    assert_int_equal(json_integer_value(json_object_get(j, "attempts")), 0);
    assert_int_equal(json_integer_value(json_object_get(j, "max_attempts")), 3);
    assert_true(json_is_null(json_object_get(j, "node")));
    assert_int_equal(json_integer_value(json_object_get(j, "created_at")), 1000);
    const char *nulls[] = {"started_at", "finished_at", "queued_ms", "run_ms", "result", "error"};
    for (size_t i = 0; i < sizeof nulls / sizeof *nulls; i++)
        assert_true(json_is_null(json_object_get(j, nulls[i])));
    json_decref(j);

    int attempt = 0;
    assert_int_equal(store_task_claim(f->s, "task_j", "gpu-a", 1500, &attempt), STORE_OK);
    assert_int_equal(store_task_succeed(f->s, "task_j", attempt,
                                        "{\"choices\":[{\"text\":\"hi\"}]}", 1800),
                     STORE_OK);
    assert_int_equal(store_task_get(f->s, "task_j", &r), STORE_OK);
    j = store_task_json(&r);
    task_rec_free(&r);
    assert_string_equal(json_string_value(json_object_get(j, "node")), "gpu-a");
    assert_int_equal(json_integer_value(json_object_get(j, "started_at")), 1500);
    assert_int_equal(json_integer_value(json_object_get(j, "finished_at")), 1800);
    assert_int_equal(json_integer_value(json_object_get(j, "queued_ms")), 500);
    assert_int_equal(json_integer_value(json_object_get(j, "run_ms")), 300);
    json_t *res = json_object_get(j, "result");
    assert_true(json_is_object(res));
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(json_object_get(res, "choices"), 0), "text")),
                        "hi");
    assert_true(json_is_null(json_object_get(j, "error")));
    json_decref(j);

    add(f->s, "task_e", 0, 1000);
    assert_int_equal(store_task_claim(f->s, "task_e", "gpu-a", 1100, &attempt), STORE_OK);
    assert_int_equal(store_task_fail(f->s, "task_e", attempt, "timeout", "took too long", 1200),
                     STORE_OK);
    assert_int_equal(store_task_get(f->s, "task_e", &r), STORE_OK);
    j = store_task_json(&r);
    task_rec_free(&r);
    json_t *e = json_object_get(j, "error");
    assert_string_equal(json_string_value(json_object_get(e, "code")), "timeout");
    assert_string_equal(json_string_value(json_object_get(e, "message")), "took too long");
    assert_true(json_is_null(json_object_get(j, "result")));
    json_decref(j);

    /* A canceled-while-queued task has no run time. */
    add(f->s, "task_x", 0, 1000);
    assert_int_equal(store_task_cancel(f->s, "task_x", 1300), STORE_OK);
    assert_int_equal(store_task_get(f->s, "task_x", &r), STORE_OK);
    j = store_task_json(&r);
    task_rec_free(&r);
    assert_int_equal(json_integer_value(json_object_get(j, "finished_at")), 1300);
    assert_true(json_is_null(json_object_get(j, "queued_ms")));
    assert_true(json_is_null(json_object_get(j, "run_ms")));
    json_decref(j);
}

static void test_list(void **state) {
    fx *f = *state;
    add(f->s, "task_a", 0, 100);
    add(f->s, "task_b", 9, 300);
    add(f->s, "task_c", 0, 200);
    add(f->s, "task_d", 0, 300); /* same time as task_b, inserted later: newer */
    int attempt = 0;
    assert_int_equal(store_task_claim(f->s, "task_c", "gpu-a", 400, &attempt), STORE_OK);
    json_t *l = store_task_list(f->s, NULL, 100);
    assert_int_equal(json_array_size(l), 4);
    const char *want[] = {"task_d", "task_b", "task_c", "task_a"};
    for (int i = 0; i < 4; i++)
        assert_string_equal(json_string_value(json_object_get(json_array_get(l, i), "id")),
                            want[i]);
    assert_string_equal(json_string_value(json_object_get(json_array_get(l, 0), "object")),
                        "task");
    json_decref(l);

    l = store_task_list(f->s, "running", 100);
    assert_int_equal(json_array_size(l), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(l, 0), "id")), "task_c");
    json_decref(l);
    l = store_task_list(f->s, "bogus", 100);
    assert_int_equal(json_array_size(l), 0);
    json_decref(l);
    /* limit is clamped to 1..1000 */
    l = store_task_list(f->s, NULL, 0);
    assert_int_equal(json_array_size(l), 1);
    json_decref(l);
    l = store_task_list(f->s, "queued", -5);
    assert_int_equal(json_array_size(l), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(l, 0), "id")), "task_d");
    json_decref(l);
    l = store_task_list(f->s, NULL, 2);
    assert_int_equal(json_array_size(l), 2);
    json_decref(l);
}

static void test_list_limit_upper_clamp(void **state) {
    fx *f = *state;
    char id[32];
    for (int i = 0; i < 1005; i++) {
        snprintf(id, sizeof id, "task_%04d", i);
        add(f->s, id, 0, i);
    }
    json_t *l = store_task_list(f->s, NULL, 5000);
    assert_int_equal(json_array_size(l), 1000);
    assert_string_equal(json_string_value(json_object_get(json_array_get(l, 0), "id")),
                        "task_1004");
    json_decref(l);
}

static void test_attempts_json(void **state) {
    fx *f = *state;
    add(f->s, "task_h", 0, 10);
    int attempt = 0;
    assert_int_equal(store_task_claim(f->s, "task_h", "gpu-a", 20, &attempt), STORE_OK);
    assert_int_equal(store_task_requeue(f->s, "task_h", 1, "node_lost", "no heartbeat"), STORE_OK);
    assert_int_equal(store_task_claim(f->s, "task_h", "gpu-b", 40, &attempt), STORE_OK);
    json_t *a = store_task_attempts(f->s, "task_h");
    assert_int_equal(json_array_size(a), 2);
    json_t *a0 = json_array_get(a, 0), *a1 = json_array_get(a, 1);
    assert_int_equal(json_integer_value(json_object_get(a0, "attempt")), 1);
    assert_string_equal(json_string_value(json_object_get(a0, "node")), "gpu-a");
    assert_int_equal(json_integer_value(json_object_get(a0, "started_at")), 20);
    assert_true(json_integer_value(json_object_get(a0, "ended_at")) > 0);
    assert_string_equal(json_string_value(json_object_get(a0, "outcome")), "node_lost");
    assert_string_equal(json_string_value(json_object_get(a0, "message")), "no heartbeat");
    assert_int_equal(json_integer_value(json_object_get(a1, "attempt")), 2);
    assert_string_equal(json_string_value(json_object_get(a1, "node")), "gpu-b");
    assert_true(json_is_null(json_object_get(a1, "ended_at")));
    assert_true(json_is_null(json_object_get(a1, "outcome")));
    assert_true(json_is_null(json_object_get(a1, "message")));
    json_decref(a);
    assert_int_equal(store_task_succeed(f->s, "task_h", 2, "{}", 60), STORE_OK);
    a = store_task_attempts(f->s, "task_h");
    a1 = json_array_get(a, 1);
    assert_int_equal(json_integer_value(json_object_get(a1, "ended_at")), 60);
    assert_string_equal(json_string_value(json_object_get(a1, "outcome")), "succeeded");
    /* attempt 1's recorded outcome is untouched */
    assert_string_equal(json_string_value(json_object_get(json_array_get(a, 0), "outcome")),
                        "node_lost");
    json_decref(a);
}


/* ---- queue rows, hedged attempts, upgrades ------------------------------ */

static void test_queued_rows_carry_what_the_queue_orders_by(void **state) {
    fx *f = *state;
    task_new t = {.id = "task_e", .type = "embedding", .model = "bge", .priority = 7,
                  .input_json = "{\"input\":\"x\"}", .max_attempts = 4, .created_ms = 5, .owner = "key-abc",
                  .prompt_tokens = 12.5, .max_tokens = 0};
    assert_int_equal(store_task_insert(f->s, &t, NULL), STORE_OK);
    add(f->s, "task_p", 1, 1);
    queued_task q[4];
    assert_int_equal(store_task_queued(f->s, q, 4), 2);
    assert_string_equal(q[0].id, "task_e");
    assert_string_equal(q[0].type, "embedding");
    assert_string_equal(q[0].owner, "key-abc");
    assert_true(q[0].prompt_tokens == 12.5);
    assert_int_equal(q[0].max_attempts, 4);
    assert_string_equal(q[1].owner, "");
    int attempt;
    assert_int_equal(store_task_claim(f->s, "task_e", "gpu-a", 10, &attempt), STORE_OK);
    assert_int_equal(store_task_queued(f->s, q, 4), 1);
}

static void test_hedged_attempt_first_result_wins(void **state) {
    fx *f = *state;
    add(f->s, "task_h", 0, 1);
    int a1 = 0, a2 = 0;
    /* only a running task can be hedged */
    assert_int_equal(store_task_hedge(f->s, "task_h", "gpu-b", 15, &a2), STORE_STALE);
    assert_int_equal(store_task_claim(f->s, "task_h", "gpu-a", 10, &a1), STORE_OK);
    assert_int_equal(store_task_hedge(f->s, "task_h", "gpu-b", 20, &a2), STORE_OK);
    assert_int_equal(a2, 2);
    assert_status(f->s, "task_h", "running");
    /* the slow first attempt finishes first after all: it wins, the hedge is superseded */
    assert_int_equal(store_task_succeed(f->s, "task_h", a1, "{\"v\":1}", 30), STORE_OK);
    assert_int_equal(store_task_succeed(f->s, "task_h", a2, "{\"v\":2}", 31), STORE_STALE);
    task_rec r;
    assert_int_equal(store_task_get(f->s, "task_h", &r), STORE_OK);
    assert_string_equal(r.result_json, "{\"v\":1}");
    assert_string_equal(r.node, "gpu-a");
    task_rec_free(&r);
    json_t *h = store_task_attempts(f->s, "task_h");
    assert_string_equal(json_string_value(json_object_get(json_array_get(h, 1), "outcome")), "superseded");
    json_decref(h);
}

static void test_hedged_attempt_failures(void **state) {
    fx *f = *state;
    add(f->s, "task_f", 0, 1);
    int a1 = 0, a2 = 0;
    assert_int_equal(store_task_claim(f->s, "task_f", "gpu-a", 10, &a1), STORE_OK);
    assert_int_equal(store_task_hedge(f->s, "task_f", "gpu-b", 20, &a2), STORE_OK);
    /* the hedge fails while the first still runs: only its attempt ends */
    assert_int_equal(store_task_end_attempt(f->s, "task_f", a2, "node_unreachable", "gone", 25), STORE_OK);
    assert_status(f->s, "task_f", "running");
    /* then the first fails too: the task goes back to the queue */
    assert_int_equal(store_task_requeue(f->s, "task_f", a1, "engine_error", "500"), STORE_OK);
    assert_status(f->s, "task_f", "queued");
    /* a late report of the ended hedge cannot requeue or undo anything */
    int a3 = 0;
    assert_int_equal(store_task_claim(f->s, "task_f", "gpu-c", 40, &a3), STORE_OK);
    assert_int_equal(a3, 3);
    assert_int_equal(store_task_requeue(f->s, "task_f", a2, "x", "y"), STORE_STALE);
    assert_status(f->s, "task_f", "running");
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void) {
    const struct CMUnitTest tests[] = {
        T(test_open_creates_nested_dir),
        T(test_open_fails_on_file),
        T(test_open_fails_on_garbage_db),
        T(test_reopen_and_wal),
        T(test_insert_get_roundtrip),
        T(test_unknown_and_null_ids),
        T(test_db_error_reported),
        T(test_idempotency),
        T(test_idempotency_race),
        T(test_claim),
        T(test_succeed_write_once),
        T(test_succeed_rejects_unmade_attempt),
        T(test_late_result_from_earlier_attempt),
        T(test_fail_write_once),
        T(test_requeue),
        T(test_cancel),
        T(test_requeue_running),
        T(test_next_queued_order),
        T(test_counts),
        T(test_task_json_shape),
        T(test_list),
        T(test_list_limit_upper_clamp),
        T(test_attempts_json),
        T(test_queued_rows_carry_what_the_queue_orders_by),
        T(test_hedged_attempt_first_result_wins),
        T(test_hedged_attempt_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
