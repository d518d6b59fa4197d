/* Unit tests for store/batches.c: a batch and its items go in whole, their
 * progress and results are read back in input order, cancel is one
 * transaction, and a version-3 database gains batches on opening. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "store/store.h"
#include "store_fixture.h"


/* A batch "id" of n items, task ids id-0 .. id-(n-1); item 1 has a custom id. */
static int add_batch(store *s, const char *id, int n, const char *key, const char *hash, char existing[64])
{
    task_new items[8];
    char ids[8][32];
    const char *cids[8] = {0};
    for (int i = 0; i < n; i++) {
        snprintf(ids[i], sizeof ids[i], "%s-%d", id, i);
        items[i] = (task_new){.id = ids[i], .type = "chat", .model = "m", .priority = 1, .input_json = "{}",
                              .max_attempts = 2, .created_ms = 100};
    }
    cids[1] = "custom-1";
    batch_new b = {.id = id, .type = "chat", .model = "m", .priority = 1, .idem_key = key, .body_hash = hash,
                   .created_ms = 100, .items = items, .custom_ids = cids, .n = n};
    return store_batch_insert(s, &b, existing);
}

static void insert_progress_items(void **state)
{
    fx *f = *state;
    assert_int_equal(add_batch(f->s, "batch_a", 3, NULL, "h", NULL), STORE_OK);
    batch_rec b;
    assert_int_equal(store_batch_get(f->s, "batch_a", &b), STORE_OK);
    assert_int_equal(b.total, 3);
    assert_int_equal(b.counts[0], 3);
    assert_int_equal(b.first_started_ms, 0);
    /* Item 2 runs and succeeds, item 0 fails; item 1 stays queued. */
    int att;
    assert_int_equal(store_task_claim(f->s, "batch_a-2", "node-x", 200, &att), STORE_OK);
    assert_int_equal(store_task_succeed(f->s, "batch_a-2", att, "{\"ok\":1}", 300), STORE_OK);
    assert_int_equal(store_task_claim(f->s, "batch_a-0", "node-x", 150, &att), STORE_OK);
    assert_int_equal(store_task_fail(f->s, "batch_a-0", att, "node_error", "boom", 400), STORE_OK);
    assert_int_equal(store_batch_get(f->s, "batch_a", &b), STORE_OK);
    assert_int_equal(b.counts[0], 1);
    assert_int_equal(b.counts[2], 1);
    assert_int_equal(b.counts[3], 1);
    assert_int_equal(b.first_started_ms, 150);
    assert_int_equal(b.last_finished_ms, 400);
    json_t *items = store_batch_items(f->s, "batch_a");
    assert_int_equal(json_array_size(items), 3);
    for (int i = 0; i < 3; i++) assert_int_equal(json_integer_value(json_object_get(json_array_get(items, i), "index")), i);
    json_t *i0 = json_array_get(items, 0), *i1 = json_array_get(items, 1), *i2 = json_array_get(items, 2);
    assert_string_equal(json_string_value(json_object_get(json_object_get(i0, "error"), "code")), "node_error");
    assert_string_equal(json_string_value(json_object_get(i1, "custom_id")), "custom-1");
    assert_string_equal(json_string_value(json_object_get(i1, "status")), "queued");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(i2, "result"), "ok")), 1);
    assert_true(json_is_null(json_object_get(i2, "error")));
    json_decref(items);
    assert_int_equal(store_batch_get(f->s, "batch_nope", &b), STORE_NOT_FOUND);
    items = store_batch_items(f->s, "batch_nope");
    assert_int_equal(json_array_size(items), 0);
    json_decref(items);
}

static void idempotency_and_all_or_nothing(void **state)
{
    fx *f = *state;
    char existing[64] = "";
    assert_int_equal(add_batch(f->s, "batch_k", 2, "key", "h1", existing), STORE_OK);
    assert_int_equal(add_batch(f->s, "batch_k2", 2, "key", "h1", existing), STORE_DUPLICATE);
    assert_string_equal(existing, "batch_k");
    assert_int_equal(add_batch(f->s, "batch_k3", 2, "key", "h2", existing), STORE_CONFLICT);
    task_rec t;
    assert_int_equal(store_task_get(f->s, "batch_k2-0", &t), STORE_NOT_FOUND);
    /* An item id that clashes rolls the whole batch back. */
    assert_int_equal(add_batch(f->s, "batch_k", 2, NULL, "h3", NULL), STORE_ERR);
    batch_rec rows[4];
    assert_int_equal(store_batch_list(f->s, rows, 4), 1);
    assert_string_equal(rows[0].id, "batch_k");
}

static void cancel_is_one_transaction(void **state)
{
    fx *f = *state;
    assert_int_equal(add_batch(f->s, "batch_c", 4, NULL, "h", NULL), STORE_OK);
    int att;
    assert_int_equal(store_task_claim(f->s, "batch_c-0", "node-x", 200, &att), STORE_OK);
    assert_int_equal(store_task_succeed(f->s, "batch_c-0", att, "{}", 300), STORE_OK);
    assert_int_equal(store_task_claim(f->s, "batch_c-1", "node-x", 200, &att), STORE_OK);
    json_t *running = NULL;
    assert_int_equal(store_batch_cancel(f->s, "batch_c", 500, &running), STORE_OK);
    assert_int_equal(json_array_size(running), 1);
    assert_string_equal(json_string_value(json_array_get(running, 0)), "batch_c-1");
    json_decref(running);
    batch_rec b;
    assert_int_equal(store_batch_get(f->s, "batch_c", &b), STORE_OK);
    assert_int_equal(b.cancelled_ms, 500);
    assert_int_equal(b.counts[2], 1);
    assert_int_equal(b.counts[4], 3);
    /* The running attempt was closed; its late result is refused. */
    assert_int_equal(store_task_succeed(f->s, "batch_c-1", att, "{}", 600), STORE_STALE);
    json_t *hist = store_task_attempts(f->s, "batch_c-1");
    assert_string_equal(json_string_value(json_object_get(json_array_get(hist, 0), "outcome")), "canceled");
    json_decref(hist);
    assert_int_equal(store_batch_cancel(f->s, "batch_c", 700, &running), STORE_STALE);
    assert_null(running);
    assert_int_equal(store_batch_cancel(f->s, "batch_nope", 700, &running), STORE_NOT_FOUND);
}

static void upgrade_from_schema_3(void **state)
{
    fx *f = *state;
    store_close(f->s);
    f->s = NULL;
    char db[128];
    snprintf(db, sizeof db, "%s/gpupool.db", f->dir);
    remove(db);
    sqlite3 *raw = NULL;
    assert_int_equal(sqlite3_open(db, &raw), SQLITE_OK);
    const char *v3 =
        "CREATE TABLE tasks(id TEXT PRIMARY KEY NOT NULL, type TEXT NOT NULL, model TEXT NOT NULL,"
        " priority INTEGER NOT NULL DEFAULT 0, status TEXT NOT NULL, node TEXT, attempts INTEGER NOT NULL DEFAULT 0,"
        " max_attempts INTEGER NOT NULL DEFAULT 1, input_json TEXT NOT NULL, result_json TEXT, error_code TEXT,"
        " error_message TEXT, idem_key TEXT UNIQUE, body_hash TEXT, created_ms INTEGER NOT NULL,"
        " started_ms INTEGER NOT NULL DEFAULT 0, finished_ms INTEGER NOT NULL DEFAULT 0,"
        " owner TEXT NOT NULL DEFAULT '', prompt_tokens REAL NOT NULL DEFAULT 0, max_tokens REAL NOT NULL DEFAULT 0,"
        " sensitivity TEXT NOT NULL DEFAULT 'normal', route_rule TEXT);"
        "CREATE TABLE attempts(task_id TEXT NOT NULL, attempt INTEGER NOT NULL, node TEXT NOT NULL,"
        " started_ms INTEGER NOT NULL, ended_ms INTEGER NOT NULL DEFAULT 0, outcome TEXT, message TEXT,"
        " PRIMARY KEY(task_id, attempt)) WITHOUT ROWID;"
        "INSERT INTO tasks(id,type,model,status,input_json,created_ms) VALUES('task_old','chat','m','queued','{}',1);"
        "PRAGMA user_version=3;";
    assert_int_equal(sqlite3_exec(raw, v3, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(raw);
    char err[256] = "";
    f->s = store_open(f->dir, err, sizeof err);
    assert_non_null(f->s);
    queued_task q[2];
    assert_int_equal(store_task_queued(f->s, q, 2), 1);
    assert_string_equal(q[0].id, "task_old");
    assert_int_equal(add_batch(f->s, "batch_u", 2, NULL, "h", NULL), STORE_OK);
    batch_rec b;
    assert_int_equal(store_batch_get(f->s, "batch_u", &b), STORE_OK);
    assert_int_equal(b.counts[0], 2);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(insert_progress_items),
        T(idempotency_and_all_or_nothing),
        T(cancel_is_one_transaction),
        T(upgrade_from_schema_3),
    };
    return cmocka_run_group_tests_name("store_batches", tests, NULL, NULL);
}
