/* Unit tests for conversation sessions: the pure half (api/session_fit:
 * ids, splitting a request, fitting a budget by whole turns, the rebuilt
 * conversation, the summary request, the JSON view) and the store's half
 * (store/sessions.c: appends, drops, sticky privacy, owners, expiry, and a
 * version-4 database gaining the tables on opening). */
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

#include "api/session_fit.h"
#include "api/validate.h"
#include "store/store.h"
#include "store_fixture.h"

static json_t *msgs(const char *text)
{
    json_error_t e;
    json_t *j = json_loads(text, 0, &e);
    if (!j) fail_msg("bad JSON in test: %s", e.text);
    return j;
}

static const char *content(const json_t *arr, size_t i)
{
    const char *v = json_string_value(json_object_get(json_array_get(arr, i), "content"));
    return v ? v : "";
}

static void ids(void **state)
{
    (void)state;
    assert_true(session_id_valid("conv-1"));
    assert_true(session_id_valid("a.b_c:D-9"));
    assert_false(session_id_valid(""));
    assert_false(session_id_valid(NULL));
    assert_false(session_id_valid("no spaces"));
    assert_false(session_id_valid("slash/es"));
    char long_id[SESSION_ID_MAX + 2];
    memset(long_id, 'x', sizeof long_id - 1);
    long_id[SESSION_ID_MAX + 1] = 0;
    assert_false(session_id_valid(long_id));
    long_id[SESSION_ID_MAX] = 0;
    assert_true(session_id_valid(long_id));
}

static void split_keeps_system_apart(void **state)
{
    (void)state;
    json_t *m = msgs("[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\",\"content\":\"u\"},"
                     "{\"role\":\"developer\",\"content\":\"d\"}]");
    json_t *sys, *turn;
    assert_int_equal(session_split(m, &sys, &turn), 0);
    assert_int_equal(json_array_size(sys), 2);
    assert_string_equal(content(sys, 1), "d");
    assert_int_equal(json_array_size(turn), 1);
    json_decref(sys);
    json_decref(turn);
    json_decref(m);
    m = msgs("[{\"role\":\"user\",\"content\":\"only\"}]");
    assert_int_equal(session_split(m, &sys, &turn), 0);
    assert_null(sys);
    json_decref(turn);
    json_decref(m);
    assert_int_equal(session_split(NULL, &sys, &turn), -1);
}

/* 40 bytes of Latin text: 10 tokens. */
#define Q40 "qqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqq"

static void fit_drops_whole_turns(void **state)
{
    (void)state;
    json_t *h = msgs("[{\"role\":\"user\",\"content\":\"" Q40 "\"},{\"role\":\"assistant\",\"content\":\"" Q40
                     "\"},{\"role\":\"user\",\"content\":\"" Q40 "\"},{\"role\":\"assistant\",\"content\":\"" Q40
                     "\"},{\"role\":\"tool\",\"content\":\"" Q40 "\"},{\"role\":\"user\",\"content\":\"" Q40 "\"}]");
    double all = session_tokens(h);
    assert_true(all > 60);
    /* it fits: nothing goes */
    assert_int_equal(session_fit_drop(h, 10, all + 10), 0);
    /* one token over: the whole first turn (user + assistant) goes */
    assert_int_equal(session_fit_drop(h, 11, all + 10), 2);
    /* the second turn has a tool message: it goes with it */
    assert_int_equal(session_fit_drop(h, 0, all - 25), 5);
    /* nothing fits: everything */
    assert_int_equal(session_fit_drop(h, 1000, 100), 6);
    /* an empty history never drops */
    json_t *empty = json_array();
    assert_int_equal(session_fit_drop(empty, 1000, 100), 0);
    json_decref(empty);
    json_decref(h);
}

static void conversation_order(void **state)
{
    (void)state;
    json_t *sys = msgs("[{\"role\":\"system\",\"content\":\"be brief\"}]");
    json_t *h = msgs("[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":\"b\"},"
                     "{\"role\":\"user\",\"content\":\"c\"},{\"role\":\"assistant\",\"content\":\"d\"}]");
    json_t *turn = msgs("[{\"role\":\"user\",\"content\":\"e\"}]");
    json_t *c = session_conversation(sys, "they met", h, 2, turn);
    assert_int_equal(json_array_size(c), 5);
    assert_string_equal(content(c, 0), "be brief");
    assert_string_equal(content(c, 1), SESSION_SUMMARY_PREFIX "they met");
    assert_string_equal(json_string_value(json_object_get(json_array_get(c, 1), "role")), "system");
    assert_string_equal(content(c, 2), "c");
    assert_string_equal(content(c, 4), "e");
    json_decref(c);
    c = session_conversation(NULL, NULL, h, 0, NULL);
    assert_int_equal(json_array_size(c), 4);
    json_decref(c);

    json_t *b = session_summary_body("small", "before", h, 2, 64);
    assert_string_equal(json_string_value(json_object_get(b, "model")), "small");
    assert_int_equal(json_integer_value(json_object_get(b, "max_tokens")), 64);
    const char *text = content(json_object_get(b, "messages"), 1);
    assert_non_null(strstr(text, "Earlier summary: before"));
    assert_non_null(strstr(text, "user: a\nassistant: b\n"));
    assert_null(strstr(text, "user: c"));
    json_decref(b);
    json_decref(sys);
    json_decref(h);
    json_decref(turn);
}

static void assistant_message(void **state)
{
    (void)state;
    json_t *ok = msgs("{\"choices\":[{\"message\":{\"role\":\"assistant\",\"content\":\"hi\"}}]}");
    json_t *m = session_assistant_message(ok);
    assert_string_equal(json_string_value(json_object_get(m, "content")), "hi");
    json_decref(m);
    json_decref(ok);
    json_t *none = msgs("{\"choices\":[]}");
    assert_null(session_assistant_message(none));
    json_decref(none);
}

static void json_view(void **state)
{
    (void)state;
    session_rec r = {.owner = "key-1", .id = "conv", .model = "m", .is_private = 1, .private_rule = "email",
                     .created_ms = 1000, .updated_ms = 2000};
    r.system = msgs("[{\"role\":\"system\",\"content\":\"" Q40 "\"}]");
    r.messages = msgs("[{\"role\":\"user\",\"content\":\"" Q40 "\"}]");
    json_t *j = session_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "object")), "session");
    assert_string_equal(json_string_value(json_object_get(j, "id")), "conv");
    assert_int_equal(json_integer_value(json_object_get(j, "message_count")), 1);
    assert_true(json_integer_value(json_object_get(j, "tokens")) >= 20);
    assert_true(json_is_true(json_object_get(j, "private")));
    assert_string_equal(json_string_value(json_object_get(j, "private_rule")), "email");
    assert_true(json_is_null(json_object_get(j, "summary")));
    assert_true(json_is_null(json_object_get(j, "expires_at")));
    assert_int_equal(json_integer_value(json_object_get(j, "updated_at")), 2000);
    assert_null(json_object_get(j, "owner")); /* never shown */
    json_decref(j);
    json_decref(r.system);
    json_decref(r.messages);
}

/* ---- the store ---- */


static void store_turns(void **state)
{
    fx *f = *state;
    session_rec r;
    assert_int_equal(store_session_get(f->s, "k", "c", 100, &r), STORE_NOT_FOUND);
    json_t *sys = msgs("[{\"role\":\"system\",\"content\":\"s\"}]");
    json_t *t1 = msgs("[{\"role\":\"user\",\"content\":\"u1\"},{\"role\":\"assistant\",\"content\":\"a1\"}]");
    json_t *t2 = msgs("[{\"role\":\"user\",\"content\":\"u2\"},{\"role\":\"assistant\",\"content\":\"a2\"}]");
    session_write w = {.owner = "k", .id = "c", .model = "m1", .system = sys, .append = t1, .now_ms = 100};
    assert_int_equal(store_session_write(f->s, &w), STORE_OK);
    w = (session_write){.owner = "k", .id = "c", .model = "m2", .append = t2, .now_ms = 200};
    assert_int_equal(store_session_write(f->s, &w), STORE_OK);
    assert_int_equal(store_session_get(f->s, "k", "c", 300, &r), STORE_OK);
    assert_int_equal(json_array_size(r.messages), 4);
    assert_string_equal(content(r.messages, 2), "u2");
    assert_string_equal(content(r.system, 0), "s"); /* kept when a turn gives none */
    assert_string_equal(r.model, "m2");
    assert_int_equal(r.created_ms, 100);
    assert_int_equal(r.updated_ms, 200);
    assert_int_equal(r.first_seq, 0);
    assert_null(r.summary);
    session_rec_free(&r);
    /* another owner does not see it */
    assert_int_equal(store_session_get(f->s, "other", "c", 300, &r), STORE_NOT_FOUND);
    assert_int_equal(store_session_delete(f->s, "other", "c"), STORE_NOT_FOUND);
    /* a trimmed turn: the first two go, a summary comes */
    w = (session_write){.owner = "k", .id = "c", .append = t1, .drop_before_seq = 2, .summary = "sum", .now_ms = 300};
    assert_int_equal(store_session_write(f->s, &w), STORE_OK);
    assert_int_equal(store_session_get(f->s, "k", "c", 400, &r), STORE_OK);
    assert_int_equal(json_array_size(r.messages), 4);
    assert_int_equal(r.first_seq, 2);
    assert_string_equal(content(r.messages, 0), "u2");
    assert_string_equal(r.summary, "sum");
    session_rec_free(&r);
    assert_int_equal(store_session_delete(f->s, "k", "c"), STORE_OK);
    assert_int_equal(store_session_get(f->s, "k", "c", 400, &r), STORE_NOT_FOUND);
    assert_int_equal(store_session_delete(f->s, "k", "c"), STORE_NOT_FOUND);
    json_decref(sys);
    json_decref(t1);
    json_decref(t2);
}

static void store_privacy_only_goes_up(void **state)
{
    fx *f = *state;
    session_write w = {.owner = "k", .id = "p", .is_private = 1, .private_rule = "email", .now_ms = 1};
    assert_int_equal(store_session_write(f->s, &w), STORE_OK);
    w = (session_write){.owner = "k", .id = "p", .is_private = 1, .private_rule = "header", .now_ms = 2};
    assert_int_equal(store_session_write(f->s, &w), STORE_OK);
    w = (session_write){.owner = "k", .id = "p", .is_private = 0, .now_ms = 3};
    assert_int_equal(store_session_write(f->s, &w), STORE_OK);
    session_rec r;
    assert_int_equal(store_session_get(f->s, "k", "p", 4, &r), STORE_OK);
    assert_true(r.is_private);
    assert_string_equal(r.private_rule, "email");
    session_rec_free(&r);
}

static void store_expiry(void **state)
{
    fx *f = *state;
    json_t *t = msgs("[{\"role\":\"user\",\"content\":\"old\"}]");
    session_write w = {.owner = "k", .id = "e", .append = t, .now_ms = 1000, .ttl_ms = 500};
    assert_int_equal(store_session_write(f->s, &w), STORE_OK);
    w = (session_write){.owner = "k", .id = "forever", .append = t, .now_ms = 1000};
    assert_int_equal(store_session_write(f->s, &w), STORE_OK);
    session_rec r;
    assert_int_equal(store_session_get(f->s, "k", "e", 1499, &r), STORE_OK);
    assert_int_equal(r.expires_ms, 1500);
    session_rec_free(&r);
    assert_int_equal(store_session_get(f->s, "k", "e", 1500, &r), STORE_NOT_FOUND);
    /* a turn after expiry starts afresh */
    json_t *t2 = msgs("[{\"role\":\"user\",\"content\":\"new\"}]");
    w = (session_write){.owner = "k", .id = "e", .append = t2, .now_ms = 2000, .ttl_ms = 500};
    assert_int_equal(store_session_write(f->s, &w), STORE_OK);
    assert_int_equal(store_session_get(f->s, "k", "e", 2001, &r), STORE_OK);
    assert_int_equal(json_array_size(r.messages), 1);
    assert_string_equal(content(r.messages, 0), "new");
    session_rec_free(&r);
    assert_int_equal(store_session_expire(f->s, 2500), 1);
    assert_int_equal(store_session_get(f->s, "k", "forever", 1000000, &r), STORE_OK);
    session_rec_free(&r);
    json_decref(t);
    json_decref(t2);
}

/* A version-4 database (before sessions) gains the tables on opening. */
static void store_migrates_from_version_4(void **state)
{
    fx *f = *state;
    store_close(f->s);
    char db[128];
    snprintf(db, sizeof db, "%s/gpupool.db", f->dir);
    sqlite3 *raw = NULL;
    assert_int_equal(sqlite3_open(db, &raw), SQLITE_OK);
    assert_int_equal(sqlite3_exec(raw, "DROP TABLE session_messages; DROP TABLE sessions; PRAGMA user_version=4;",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(raw);
    char err[256] = "";
    f->s = store_open(f->dir, err, sizeof err);
    assert_non_null(f->s);
    session_write w = {.owner = "k", .id = "m", .now_ms = 1};
    assert_int_equal(store_session_write(f->s, &w), STORE_OK);
    session_rec r;
    assert_int_equal(store_session_get(f->s, "k", "m", 2, &r), STORE_OK);
    session_rec_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ids),
        cmocka_unit_test(split_keeps_system_apart),
        cmocka_unit_test(fit_drops_whole_turns),
        cmocka_unit_test(conversation_order),
        cmocka_unit_test(assistant_message),
        cmocka_unit_test(json_view),
        cmocka_unit_test_setup_teardown(store_turns, setup, teardown),
        cmocka_unit_test_setup_teardown(store_privacy_only_goes_up, setup, teardown),
        cmocka_unit_test_setup_teardown(store_expiry, setup, teardown),
        cmocka_unit_test_setup_teardown(store_migrates_from_version_4, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
