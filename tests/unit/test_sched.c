/* Unit tests: the node registry (state machine with an injected clock). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "node/registry.h"
#include "sched/placement.h"

/* ---- registry ---- */
#define RQ(m) (&(reg_request){.model = (m), .priority = 5})
#define FP_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define FP_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

static registry *new_registry(void)
{
    registry_cfg cfg = {.join_token = "join", .heartbeat_ms = 1000, .missed_beats = 3, .token_ttl_ms = 10000};
    return registry_new(&cfg);
}

static json_t *report(const char *fp, const char *model, int slots)
{
    return json_pack("{s:s, s:s, s:s, s:[{s:s, s:I, s:I}], s:[{s:s, s:b, s:[s], s:i}]}", "name", "n", "fingerprint", fp,
                     "address", "http://127.0.0.1:1", "gpus", "name", "g", "total_bytes", (json_int_t)100,
                     "free_bytes", (json_int_t)50, "engines", "kind", "sim", "healthy", 1, "models", model, "slots", slots);
}

static int beat(registry *r, const char *id, const char *token, const char *fp, int seq, const char *peer, int64_t now,
                char *new_token);

/* Registers, without the first heartbeat: the node is not ready yet. */
static void join_only(registry *r, const char *fp, int64_t now, char *id, char *token)
{
    json_t *req = report(fp, "m", 2), *resp = NULL;
    char why[200];
    assert_int_equal(registry_register(r, "join", req, "127.0.0.1", now, &resp, why, sizeof why), 200);
    strcpy(id, json_string_value(json_object_get(resp, "node_id")));
    strcpy(token, json_string_value(json_object_get(resp, "node_token")));
    json_decref(req);
    json_decref(resp);
}

/* Registers and sends the first heartbeat, which makes the node ready. */
static void join(registry *r, const char *fp, int64_t now, char *id, char *token)
{
    join_only(r, fp, now, id, token);
    assert_int_equal(beat(r, id, token, fp, 1, "127.0.0.1", now, NULL), 200);
}

static int beat(registry *r, const char *id, const char *token, const char *fp, int seq, const char *peer, int64_t now,
                char *new_token)
{
    json_t *req = report(fp, "m", 2), *resp = NULL;
    json_object_set_new(req, "node_id", json_string(id));
    json_object_set_new(req, "seq", json_integer(seq));
    char why[200];
    int st = registry_heartbeat(r, token, req, peer, now, &resp, why, sizeof why);
    const char *t = json_string_value(json_object_get(resp, "node_token"));
    if (new_token) strcpy(new_token, t ? t : "");
    json_decref(req);
    json_decref(resp);
    return st;
}

static void register_requires_join_token(void **state)
{
    (void)state;
    registry *r = new_registry();
    json_t *req = report(FP_A, "m", 2), *resp = NULL;
    char why[200];
    assert_int_equal(registry_register(r, "nope", req, "127.0.0.1", 0, &resp, why, sizeof why), 401);
    assert_null(resp);
    assert_int_equal(registry_register(r, NULL, req, "127.0.0.1", 0, &resp, why, sizeof why), 401);
    json_object_del(req, "fingerprint");
    assert_int_equal(registry_register(r, "join", req, "127.0.0.1", 0, &resp, why, sizeof why), 400);
    json_decref(req);
    registry_free(r);
}

static void node_id_is_stable_for_a_fingerprint(void **state)
{
    (void)state;
    registry *r = new_registry();
    char id1[64], id2[64], id3[64], t1[80], t2[80], t3[80];
    join(r, FP_A, 0, id1, t1);
    join(r, FP_A, 10, id2, t2);
    join(r, FP_B, 20, id3, t3);
    assert_string_equal(id1, id2);
    assert_string_not_equal(id1, id3);
    assert_string_not_equal(t1, t2);
    int counts[NODE_STATES];
    registry_counts(r, counts);
    assert_int_equal(counts[NODE_READY], 2);
    registry_free(r);
}

static void heartbeat_token_bound_to_machine_and_address(void **state)
{
    (void)state;
    registry *r = new_registry();
    char id[64], tok[80];
    join(r, FP_A, 0, id, tok);
    assert_int_equal(beat(r, id, tok, FP_A, 2, "127.0.0.1", 100, NULL), 200);
    assert_int_equal(beat(r, id, tok, FP_B, 2, "127.0.0.1", 200, NULL), 403);
    assert_int_equal(beat(r, id, tok, FP_A, 3, "127.0.0.2", 300, NULL), 403);
    assert_int_equal(beat(r, id, "forged", FP_A, 4, "127.0.0.1", 400, NULL), 401);
    assert_int_equal(beat(r, "node-unknown", tok, FP_A, 5, "127.0.0.1", 500, NULL), 401);
    /* expired */
    assert_int_equal(beat(r, id, tok, FP_A, 6, "127.0.0.1", 20000, NULL), 401);
    registry_free(r);
}

static void token_rotates_at_half_life_and_old_one_lingers(void **state)
{
    (void)state;
    registry *r = new_registry();
    char id[64], tok[80], fresh[80];
    join(r, FP_A, 0, id, tok);
    assert_int_equal(beat(r, id, tok, FP_A, 2, "127.0.0.1", 1000, fresh), 200);
    assert_string_equal(fresh, "");
    assert_int_equal(beat(r, id, tok, FP_A, 3, "127.0.0.1", 5000, fresh), 200);
    assert_true(strlen(fresh) > 20);
    assert_string_not_equal(fresh, tok);
    /* the old token works until its own expiry, the new one after it */
    assert_int_equal(beat(r, id, tok, FP_A, 4, "127.0.0.1", 6000, NULL), 200);
    assert_int_equal(beat(r, id, tok, FP_A, 5, "127.0.0.1", 10001, NULL), 401);
    assert_int_equal(beat(r, id, fresh, FP_A, 6, "127.0.0.1", 10002, NULL), 200);
    registry_free(r);
}

/* A frozen node is passed over, and named once, after two and a half
 * intervals of silence; a heartbeat ends the silence. */
static void overdue_heartbeats_make_a_node_silent(void **state)
{
    (void)state;
    registry *r = new_registry();
    char a[64], ta[80], b[64], tb[80];
    join(r, FP_A, 0, a, ta);
    join(r, FP_B, 2000, b, tb);
    char ids[4][40];
    assert_int_equal(registry_next_deadline(r, 0), 2501);
    assert_int_equal(registry_silent(r, 2500, ids, 4), 0);
    assert_int_equal(registry_silent(r, 2501, ids, 4), 1);
    assert_string_equal(ids[0], a);
    assert_int_equal(registry_silent(r, 2600, ids, 4), 0); /* only once */
    /* now it is due offline at 3001 */
    assert_int_equal(registry_next_deadline(r, 2600), 3001);
    node_lease l[3];
    for (int i = 0; i < 2; i++) {
        assert_int_equal(registry_acquire(r, RQ("m"), NULL, 0, &l[i]), PLACE_OK);
        assert_string_equal(l[i].node_id, b);
    }
    assert_int_equal(registry_acquire(r, RQ("m"), NULL, 0, &l[2]), PLACE_BUSY);
    for (int i = 0; i < 2; i++) registry_release(r, &l[i], 2700, 1);
    assert_int_equal(beat(r, a, ta, FP_A, 2, "127.0.0.1", 2800, NULL), 200);
    int on_a = 0;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(registry_acquire(r, RQ("m"), NULL, 0, &l[i]), PLACE_OK);
        on_a += !strcmp(l[i].node_id, a);
    }
    assert_true(on_a >= 1);
    for (int i = 0; i < 3; i++) registry_release(r, &l[i], 2900, 1);
    assert_int_equal(registry_silent(r, 2900, ids, 4), 0);
    registry_free(r);
}

static void missed_heartbeats_mark_offline(void **state)
{
    (void)state;
    registry *r = new_registry();
    char id[64], tok[80];
    join(r, FP_A, 0, id, tok);
    char off[4][40];
    assert_int_equal(registry_sweep(r, 2999, off, 4), 0);
    assert_int_equal(registry_sweep(r, 3001, off, 4), 1);
    assert_string_equal(off[0], id);
    assert_int_equal(registry_sweep(r, 4000, off, 4), 0); /* only once */
    node_lease l;
    assert_int_equal(registry_acquire(r, RQ("m"), NULL, 0, &l), PLACE_UNAVAILABLE);
    /* a heartbeat brings it back */
    assert_int_equal(beat(r, id, tok, FP_A, 2, "127.0.0.1", 4100, NULL), 200);
    assert_int_equal(registry_acquire(r, RQ("m"), NULL, 0, &l), PLACE_OK);
    registry_free(r);
}

static void leases_respect_slots(void **state)
{
    (void)state;
    registry *r = new_registry();
    char a[64], b[64], ta[80], tb[80];
    join(r, FP_A, 0, a, ta);
    join(r, FP_B, 0, b, tb);
    node_lease l[5];
    for (int i = 0; i < 4; i++) assert_int_equal(registry_acquire(r, RQ("m"), NULL, 0, &l[i]), PLACE_OK);
    /* spread evenly: 2 each */
    int on_a = 0;
    for (int i = 0; i < 4; i++) on_a += !strcmp(l[i].node_id, a);
    assert_int_equal(on_a, 2);
    assert_int_equal(registry_acquire(r, RQ("m"), NULL, 0, &l[4]), PLACE_BUSY);
    assert_int_equal(registry_acquire(r, RQ("other"), NULL, 0, &l[4]), PLACE_NO_MODEL);
    assert_int_equal(registry_acquire_wait(r, RQ("m"), NULL, 0, 0, 0, &l[4]), REG_QUEUE_FULL);
    registry_release(r, &l[0], 1, 1);
    assert_int_equal(registry_acquire(r, RQ("m"), NULL, 0, &l[4]), PLACE_OK);
    assert_string_equal(l[4].node_id, l[0].node_id);
    const char *ex[] = {a, b};
    for (int i = 1; i < 5; i++) registry_release(r, &l[i], 2, 1);
    assert_int_equal(registry_acquire_wait(r, RQ("m"), ex, 2, 0, 10, &l[0]), REG_EXHAUSTED);
    assert_true(registry_drain_rate(r, 3) > 0);
    registry_free(r);
}

static void unreachable_node_skipped_until_heartbeat(void **state)
{
    (void)state;
    registry *r = new_registry();
    char id[64], tok[80];
    join(r, FP_A, 0, id, tok);
    registry_mark_unreachable(r, id, "connection refused", 0);
    node_lease l;
    assert_int_equal(registry_acquire(r, RQ("m"), NULL, 0, &l), PLACE_UNAVAILABLE);
    json_t *nodes = registry_nodes_json(r, 10);
    assert_string_equal(json_string_value(json_object_get(json_array_get(nodes, 0), "state")), "not_ready");
    json_decref(nodes);
    assert_int_equal(beat(r, id, tok, FP_A, 2, "127.0.0.1", 100, NULL), 200);
    assert_int_equal(registry_acquire(r, RQ("m"), NULL, 0, &l), PLACE_OK);
    registry_free(r);
}

static void ready_only_after_first_heartbeat(void **state)
{
    (void)state;
    registry *r = new_registry();
    char id[64], tok[80];
    join_only(r, FP_A, 0, id, tok);
    node_lease l;
    assert_int_equal(registry_acquire(r, RQ("m"), NULL, 0, &l), PLACE_UNAVAILABLE);
    assert_int_equal(beat(r, id, tok, FP_A, 5, "127.0.0.1", 10, NULL), 200);
    assert_int_equal(registry_acquire(r, RQ("m"), NULL, 0, &l), PLACE_OK);
    registry_release(r, &l, 11, 1);
    /* an older beat arriving late changes nothing */
    registry_mark_unreachable(r, id, "test", 12);
    assert_int_equal(beat(r, id, tok, FP_A, 4, "127.0.0.1", 12, NULL), 200);
    assert_int_equal(registry_acquire(r, RQ("m"), NULL, 0, &l), PLACE_UNAVAILABLE);
    registry_free(r);
}

static void breaker_opens_cools_down_and_probes(void **state)
{
    (void)state;
    registry *r = new_registry(); /* 3 failures, 5 s cooldown */
    char id[64], tok[80];
    join(r, FP_A, 0, id, tok);
    node_lease l;
    int seq = 2;
    char fresh[80];
#define BEAT(now) do { \
        assert_int_equal(beat(r, id, tok, FP_A, seq++, "127.0.0.1", (now), fresh), 200); \
        if (fresh[0]) strcpy(tok, fresh); /* follow token rotation */ \
    } while (0)
    /* two failures: the next heartbeat makes it usable again */
    for (int i = 0; i < 2; i++) registry_mark_unreachable(r, id, "boom", 100);
    BEAT(200);
    assert_int_equal(registry_acquire(r, RQ("m"), NULL, 0, &l), PLACE_OK);
    registry_release(r, &l, 210, 0);
    /* the third in a row opens the breaker: heartbeats do not close it */
    registry_mark_unreachable(r, id, "boom", 300);
    BEAT(400);
    assert_int_equal(registry_acquire(r, RQ("m"), NULL, 0, &l), PLACE_UNAVAILABLE);
    json_t *nodes = registry_nodes_json(r, 400);
    assert_string_equal(json_string_value(json_object_get(json_array_get(nodes, 0), "breaker")), "open");
    json_decref(nodes);
    char off[1][40];
    registry_sweep(r, 5299, off, 1);
    assert_int_equal(registry_acquire(r, RQ("m"), NULL, 0, &l), PLACE_UNAVAILABLE);
    /* cooldown over: exactly one probe */
    registry_sweep(r, 5300, off, 1);
    BEAT(5300);
    assert_int_equal(registry_acquire(r, RQ("m"), NULL, 0, &l), PLACE_OK);
    node_lease second;
    assert_int_equal(registry_acquire(r, RQ("m"), NULL, 0, &second), PLACE_UNAVAILABLE);
    /* the probe fails: open again, for twice as long */
    registry_mark_unreachable(r, id, "boom", 5400);
    registry_release(r, &l, 5400, 0);
    BEAT(5500);
    BEAT(11000); /* workers keep beating (and rotating tokens) meanwhile */
    registry_sweep(r, 5400 + 9999, off, 1);
    assert_int_equal(registry_acquire(r, RQ("m"), NULL, 0, &l), PLACE_UNAVAILABLE);
    registry_sweep(r, 5400 + 10000, off, 1);
    BEAT(15400);
    assert_int_equal(registry_acquire(r, RQ("m"), NULL, 0, &l), PLACE_OK);
    /* the probe succeeds: closed, and more work flows */
    registry_release(r, &l, 15500, 1);
    assert_int_equal(registry_acquire(r, RQ("m"), NULL, 0, &l), PLACE_OK);
    assert_int_equal(registry_acquire(r, RQ("m"), NULL, 0, &second), PLACE_OK);
    assert_true(registry_status_served(200) && registry_status_served(404));
    assert_false(registry_status_served(500) || registry_status_served(401) || registry_status_served(0));
    registry_free(r);
#undef BEAT
}

static void models_union_of_live_nodes(void **state)
{
    (void)state;
    registry *r = new_registry();
    char id[64], tok[80];
    join(r, FP_A, 0, id, tok);
    json_t *m = registry_models_json(r, 0);
    assert_int_equal(json_array_size(json_object_get(m, "data")), 1);
    json_decref(m);
    char off[1][40];
    registry_sweep(r, 100000, off, 1);
    m = registry_models_json(r, 100000);
    assert_int_equal(json_array_size(json_object_get(m, "data")), 0);
    json_decref(m);
    assert_true(registry_model_known(r, "m"));
    assert_false(registry_model_known(r, "x"));
    registry_free(r);
}


static void admin_drain_undrain_and_forget(void **state)
{
    (void)state;
    registry *r = new_registry();
    char a[64], b[64], ta[80], tb[80];
    join(r, FP_A, 0, a, ta);
    join(r, FP_B, 0, b, tb);
    assert_int_equal(registry_set_drain(r, "node-nope", 1, 10), -1);
    assert_int_equal(registry_set_drain(r, a, 1, 10), 0);
    /* its heartbeats say it is fine; the administrator's word stands */
    assert_int_equal(beat(r, a, ta, FP_A, 2, "127.0.0.1", 20, NULL), 200);
    node_lease l[4];
    for (int i = 0; i < 2; i++) {
        assert_int_equal(registry_acquire(r, RQ("m"), NULL, 0, &l[i]), PLACE_OK);
        assert_string_equal(l[i].node_id, b);
    }
    json_t *nodes = registry_nodes_json(r, 20);
    json_t *na = json_array_get(nodes, 0);
    assert_string_equal(json_string_value(json_object_get(na, "state")), "draining");
    assert_string_equal(json_string_value(json_object_get(na, "state_reason")), "drained by an administrator");
    json_decref(nodes);
    assert_int_equal(registry_set_drain(r, a, 0, 30), 0);
    assert_int_equal(registry_acquire(r, RQ("m"), NULL, 0, &l[2]), PLACE_BUSY); /* until its next beat */
    assert_int_equal(beat(r, a, ta, FP_A, 3, "127.0.0.1", 40, NULL), 200);
    assert_int_equal(registry_acquire(r, RQ("m"), NULL, 0, &l[2]), PLACE_OK);
    assert_string_equal(l[2].node_id, a);
    /* a live node is not forgotten without force; an offline one is */
    assert_int_equal(registry_forget(r, a, 0), -2);
    char off[2][40];
    assert_int_equal(registry_sweep(r, 3500, off, 2), 2);
    assert_int_equal(registry_forget(r, a, 0), 0);
    assert_int_equal(registry_forget(r, a, 0), -1);
    assert_int_equal(registry_forget(r, b, 1), 0);
    nodes = registry_nodes_json(r, 3500);
    assert_int_equal(json_array_size(nodes), 0);
    json_decref(nodes);
    /* a release for a forgotten node's lease is harmless */
    registry_release(r, &l[0], 3600, 1);
    registry_free(r);
}

/* A heartbeat of node id on FP_A with extra fields merged into the report. */
static void beat_with(registry *r, const char *id, const char *token, int seq, int64_t now, json_t *extra)
{
    json_t *req = report(FP_A, "m", 2), *resp = NULL;
    json_object_set_new(req, "node_id", json_string(id));
    json_object_set_new(req, "seq", json_integer(seq));
    json_object_update(req, extra);
    json_decref(extra);
    char why[200];
    assert_int_equal(registry_heartbeat(r, token, req, "127.0.0.1", now, &resp, why, sizeof why), 200);
    json_decref(req);
    json_decref(resp);
}

/* Two models whose names share a long first part are two models: a lease
 * of one does not fill the other's slot. */
static void leases_count_whole_model_names(void **state)
{
    (void)state;
    registry *r = new_registry();
    char a[64], ta[80];
    join(r, FP_A, 0, a, ta);
    char m1[128], m2[128];
    memset(m1, 'x', 100);
    memcpy(m2, m1, 100);
    strcpy(m1 + 100, "-q4");
    strcpy(m2 + 100, "-q8");
    beat_with(r, a, ta, 2, 1,
              json_pack("{s:[{s:s, s:b, s:[s], s:i}, {s:s, s:b, s:[s], s:i}]}", "engines", "kind", "sim", "healthy", 1,
                        "models", m1, "slots", 1, "kind", "sim", "healthy", 1, "models", m2, "slots", 1));
    node_lease l1, l2, l3;
    assert_int_equal(registry_acquire(r, RQ(m1), NULL, 0, &l1), PLACE_OK);
    assert_int_equal(registry_acquire(r, RQ(m2), NULL, 0, &l2), PLACE_OK);
    assert_int_equal(registry_acquire(r, RQ(m1), NULL, 0, &l3), PLACE_BUSY);
    registry_free(r);
}

/* A heartbeat's "link" sample (large bodies and their arrival time) sets the
 * node's measured throughput, which /v1/nodes shows in its profile. */
static void heartbeat_link_samples_measure_throughput(void **state)
{
    (void)state;
    registry *r = new_registry();
    char a[64], ta[80];
    join(r, FP_A, 0, a, ta);
    beat_with(r, a, ta, 2, 10, json_pack("{s:{s:f, s:f}}", "link", "bytes", 4e6, "ms", 40.0));
    json_t *nodes = registry_nodes_json(r, 20);
    json_t *prof = json_object_get(json_array_get(nodes, 0), "profile");
    assert_true(json_real_value(json_object_get(prof, "link_bytes_per_ms")) == 1e5);
    json_decref(nodes);
    registry_free(r);
}

static void worker_draining_reason_shown(void **state)
{
    (void)state;
    registry *r = new_registry();
    char a[64], ta[80];
    join(r, FP_A, 0, a, ta);
    beat_with(r, a, ta, 2, 10,
              json_pack("{s:b, s:s}", "draining", 1, "draining_reason", "a foreign process (pid 42) is using GPU 0"));
    node_lease l;
    assert_int_equal(registry_acquire(r, RQ("m"), NULL, 0, &l), PLACE_UNAVAILABLE);
    json_t *nodes = registry_nodes_json(r, 10);
    assert_string_equal(json_string_value(json_object_get(json_array_get(nodes, 0), "state_reason")),
                        "a foreign process (pid 42) is using GPU 0");
    json_decref(nodes);
    assert_int_equal(beat(r, a, ta, FP_A, 3, "127.0.0.1", 20, NULL), 200);
    assert_int_equal(registry_acquire(r, RQ("m"), NULL, 0, &l), PLACE_OK);
    registry_free(r);
}

static void observations_shape_placement(void **state)
{
    (void)state;
    registry *r = new_registry();
    char a[64], b[64], ta[80], tb[80];
    join(r, FP_A, 0, a, ta);
    join(r, FP_B, 0, b, tb);
    /* a answers 100 tokens in 1 s, b in 4 s */
    node_lease la = {0}, lb = {0};
    snprintf(la.node_id, sizeof la.node_id, "%.39s", a);
    snprintf(lb.node_id, sizeof lb.node_id, "%.39s", b);
    strcpy(la.model, "m");
    strcpy(lb.model, "m");
    call_sample fast = {.total_ms = 1000, .first_byte_ms = 100, .completion_tokens = 100};
    call_sample slow = {.total_ms = 4000, .first_byte_ms = 100, .completion_tokens = 100};
    for (int i = 0; i < 3; i++) {
        registry_observe(r, &la, 1, &fast, 100);
        registry_observe(r, &lb, 1, &slow, 100);
    }
    node_lease l;
    reg_request rq = {.model = "m", .max_tokens = 100, .now = 200};
    assert_int_equal(registry_acquire(r, &rq, NULL, 0, &l), PLACE_OK);
    assert_string_equal(l.node_id, a);
    assert_true(l.est_ms > 900 && l.est_ms < 1100);
    /* the pool's estimate for the model averages what the nodes measured */
    double est = registry_estimate_ms(r, &rq);
    assert_true(est > 1000 && est < 4000);
    /* a then fails most of its calls: the slower but reliable node wins */
    for (int i = 0; i < 20; i++) registry_observe(r, &la, 0, NULL, 200);
    node_lease l2;
    assert_int_equal(registry_acquire(r, &rq, NULL, 0, &l2), PLACE_OK);
    assert_string_equal(l2.node_id, b);
    /* an hour on, those failures no longer count */
    registry_release(r, &l, 300, 1);
    registry_release(r, &l2, 300, 1);
    rq.now = 200 + 3600000 + 60000;
    assert_int_equal(registry_acquire(r, &rq, NULL, 0, &l2), PLACE_OK);
    assert_string_equal(l2.node_id, a);
    json_t *nodes = registry_nodes_json(r, 200);
    json_t *prof = json_object_get(json_array_get(nodes, 0), "profile");
    assert_int_equal(json_integer_value(json_object_get(prof, "calls_1h")), 23);
    assert_non_null(json_object_get(json_object_get(prof, "models"), "m"));
    json_decref(nodes);
    registry_free(r);
}

static void cold_starts_counted(void **state)
{
    (void)state;
    registry *r = new_registry();
    char a[64], ta[80];
    join(r, FP_A, 0, a, ta);
    beat_with(r, a, ta, 2, 10,
              json_pack("{s:[{s:s, s:I}]}", "loadable", "model", "big", "need_bytes", (json_int_t)40));
    node_lease l;
    assert_int_equal(registry_acquire(r, RQ("m"), NULL, 0, &l), PLACE_OK);
    assert_false(l.cold);
    assert_int_equal(registry_cold_starts(r), 0);
    assert_int_equal(registry_acquire(r, RQ("big"), NULL, 0, &l), PLACE_OK);
    assert_true(l.cold);
    assert_int_equal(registry_cold_starts(r), 1);
    assert_int_equal(registry_total_slots(r), 2);
    registry_free(r);
}


static void external_backend_never_gets_private_work(void **state)
{
    (void)state;
    registry *r = new_registry();
    const char *models[] = {"m", "big-cloud"};
    assert_int_equal(registry_add_external(r, "acme", "http://127.0.0.1:9", "sk-test", models, 2, 8, 0), 0);
    assert_int_equal(registry_add_external(r, "acme", "http://127.0.0.1:9", "sk-test", models, 2, 8, 0), -1);
    reg_request priv = {.model = "big-cloud", .priority = 5, .trusted_only = 1, .now = 1};
    reg_request norm = {.model = "big-cloud", .priority = 5, .now = 1};
    node_lease l;
    /* only the cloud has big-cloud: ordinary work goes there, private never */
    assert_int_equal(registry_acquire(r, &priv, NULL, 0, &l), PLACE_UNAVAILABLE);
    assert_false(registry_model_trusted(r, "big-cloud"));
    assert_int_equal(registry_acquire(r, &norm, NULL, 0, &l), PLACE_OK);
    assert_string_equal(l.node_id, "cloud-acme");
    assert_true(l.external);
    assert_string_equal(l.token, "sk-test");
    registry_release(r, &l, 2, 1);
    /* with a trusted node serving m, m stays local, even when that node is busy */
    char a[64], ta[80];
    join(r, FP_A, 0, a, ta);
    assert_true(registry_model_trusted(r, "m"));
    reg_request m = {.model = "m", .priority = 5, .now = 1};
    node_lease k[3];
    for (int i = 0; i < 2; i++) {
        assert_int_equal(registry_acquire(r, &m, NULL, 0, &k[i]), PLACE_OK);
        assert_string_equal(k[i].node_id, a);
    }
    assert_int_equal(registry_acquire(r, &m, NULL, 0, &k[2]), PLACE_BUSY);
    /* once the trusted node is offline, ordinary m work may go out; private may not */
    char off[2][40];
    assert_int_equal(registry_sweep(r, 3500, off, 2), 1); /* the cloud never goes offline */
    assert_int_equal(registry_acquire(r, &m, NULL, 0, &k[2]), PLACE_OK);
    assert_string_equal(k[2].node_id, "cloud-acme");
    m.trusted_only = 1;
    assert_int_equal(registry_acquire(r, &m, NULL, 0, &l), PLACE_UNAVAILABLE);
    json_t *nodes = registry_nodes_json(r, 3500);
    assert_string_equal(json_string_value(json_object_get(json_array_get(nodes, 0), "trust")), "external");
    assert_string_equal(json_string_value(json_object_get(json_array_get(nodes, 1), "trust")), "trusted");
    json_decref(nodes);
    registry_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(register_requires_join_token),
        cmocka_unit_test(node_id_is_stable_for_a_fingerprint),
        cmocka_unit_test(heartbeat_token_bound_to_machine_and_address),
        cmocka_unit_test(token_rotates_at_half_life_and_old_one_lingers),
        cmocka_unit_test(missed_heartbeats_mark_offline),
        cmocka_unit_test(overdue_heartbeats_make_a_node_silent),
        cmocka_unit_test(leases_count_whole_model_names),
        cmocka_unit_test(heartbeat_link_samples_measure_throughput),
        cmocka_unit_test(leases_respect_slots),
        cmocka_unit_test(unreachable_node_skipped_until_heartbeat),
        cmocka_unit_test(ready_only_after_first_heartbeat),
        cmocka_unit_test(breaker_opens_cools_down_and_probes),
        cmocka_unit_test(models_union_of_live_nodes),
        cmocka_unit_test(admin_drain_undrain_and_forget),
        cmocka_unit_test(worker_draining_reason_shown),
        cmocka_unit_test(observations_shape_placement),
        cmocka_unit_test(cold_starts_counted),
        cmocka_unit_test(external_backend_never_gets_private_work),
    };
    return cmocka_run_group_tests_name("sched", tests, NULL, NULL);
}
