/* Unit tests: placement scoring and the baseline policies, the queue's order
 * and per-key limits, node profiles, and the dispatcher's task memo.  All
 * pure: no sockets, and time is passed in. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "sched/placement.h"
#include "sched/profile.h"
#include "sched/queue.h"
#include "sched/taskmemo.h"

/* Candidates with nothing measured and no GPU readings. */
#define NODE(...) {.ready = 1, .success = -1, .temp_c = -1, __VA_ARGS__}
#define DOWN(...) {.ready = 0, .success = -1, .temp_c = -1, __VA_ARGS__}

static place_cfg score_cfg(void)
{
    place_cfg cfg = {.policy = POLICY_SCORE};
    place_weights_default(&cfg.w);
    return cfg;
}

static int pick(const place_candidate *c, size_t n)
{
    place_cfg cfg = score_cfg();
    place_request rq = {.max_tokens = 100};
    return placement_pick(&cfg, &rq, c, n, NULL);
}

static place_block why(const place_candidate *c, size_t n)
{
    place_cfg cfg = score_cfg();
    return placement_why(&cfg, c, n);
}

static void pick_prefers_least_loaded_then_free_vram(void **state)
{
    (void)state;
    place_candidate c[] = {
        NODE(.id = "a", .has_model = 1, .inflight = 2, .slots = 4, .free_vram = 10),
        NODE(.id = "b", .has_model = 1, .inflight = 1, .slots = 4, .free_vram = 5),
        NODE(.id = "c", .has_model = 1, .inflight = 1, .slots = 4, .free_vram = 8),
    };
    assert_int_equal(pick(c, 3), 2);
    c[2].inflight = 3;
    assert_int_equal(pick(c, 3), 1);
}

static void pick_compares_load_relative_to_slots(void **state)
{
    (void)state;
    place_candidate c[] = {
        NODE(.id = "small", .has_model = 1, .inflight = 1, .slots = 2),
        NODE(.id = "big", .has_model = 1, .inflight = 3, .slots = 8),
    };
    assert_int_equal(pick(c, 2), 1); /* 3/8 < 1/2 */
}

static void pick_skips_unqualified(void **state)
{
    (void)state;
    place_candidate c[] = {
        DOWN(.id = "down", .has_model = 1, .slots = 4),
        NODE(.id = "nomodel", .has_model = 0, .slots = 4),
        NODE(.id = "full", .has_model = 1, .inflight = 4, .slots = 4),
        NODE(.id = "tried", .has_model = 1, .excluded = 1, .slots = 4),
    };
    assert_int_equal(pick(c, 4), PLACE_NONE);
    assert_int_equal(why(c, 4), PLACE_BUSY);
    c[2].has_model = 0;
    assert_int_equal(why(c, 4), PLACE_UNAVAILABLE);
    c[0].has_model = 0;
    c[3].has_model = 0;
    assert_int_equal(why(c, 4), PLACE_NO_MODEL);
    assert_int_equal(why(c, 0), PLACE_NO_MODEL);
}

static void pick_ties_are_stable(void **state)
{
    (void)state;
    place_candidate c[] = {
        NODE(.id = "n2", .has_model = 1, .slots = 1),
        NODE(.id = "n1", .has_model = 1, .slots = 1),
    };
    assert_int_equal(pick(c, 2), 1);
}

static void pick_starts_models_only_where_they_fit(void **state)
{
    (void)state;
    place_candidate c[] = {
        NODE(.id = "small", .loadable = 1, .need_bytes = 16, .free_vram = 10, .slots = 1),
        NODE(.id = "big", .loadable = 1, .need_bytes = 16, .free_vram = 22, .slots = 1),
    };
    assert_int_equal(pick(c, 2), 1);
    c[1].free_vram = 15;
    assert_int_equal(pick(c, 2), PLACE_NONE);
    assert_int_equal(why(c, 2), PLACE_NO_FIT);
    c[1].free_vram = 16; /* exactly enough */
    assert_int_equal(pick(c, 2), 1);
}

static void pick_prefers_a_loaded_model(void **state)
{
    (void)state;
    place_candidate c[] = {
        NODE(.id = "cold", .loadable = 1, .need_bytes = 1, .free_vram = 100, .slots = 4),
        NODE(.id = "warm", .has_model = 1, .inflight = 3, .free_vram = 1, .slots = 4),
    };
    /* busier, less free memory, but no cold start */
    assert_int_equal(pick(c, 2), 1);
    c[1].inflight = 4; /* full: the cold node is used (the load is cheaper than waiting) */
    c[0].load_ms = 100;
    assert_int_equal(pick(c, 2), 0);
    /* of two cold nodes, the one that need not stop another model */
    place_candidate e[] = {
        NODE(.id = "a-evicts", .loadable = 1, .need_bytes = 1, .free_vram = 100, .slots = 4, .evicting = 1),
        NODE(.id = "b-room", .loadable = 1, .need_bytes = 1, .free_vram = 50, .slots = 4),
    };
    assert_int_equal(pick(e, 2), 1);
    /* with affinity weighted out, load alone decides */
    place_cfg cfg = score_cfg();
    cfg.w.affinity = 0;
    place_request rq = {.max_tokens = 100};
    c[1].inflight = 3;
    assert_int_equal(placement_pick(&cfg, &rq, c, 2, NULL), 0);
}

static void pick_uses_measured_speed(void **state)
{
    (void)state;
    place_candidate c[] = {
        NODE(.id = "slow", .has_model = 1, .slots = 4, .ttft_ms = 400, .tps = 10),
        NODE(.id = "fast", .has_model = 1, .slots = 4, .inflight = 2, .ttft_ms = 100, .tps = 60),
    };
    double est = 0;
    place_cfg cfg = score_cfg();
    place_request rq = {.max_tokens = 100};
    assert_int_equal(placement_pick(&cfg, &rq, c, 2, &est), 1);
    assert_true(est > 1700 && est < 1800); /* 100 ms + 100 tokens at 60/s */
    /* an unmeasured node is judged by the pool's figures for the model */
    c[0].ttft_ms = c[0].tps = 0;
    rq.prior_ttft_ms = 50;
    rq.prior_tps = 200;
    assert_int_equal(placement_pick(&cfg, &rq, c, 2, NULL), 0);
    assert_true(placement_service_ms(&rq, &c[0]) < 600);
    /* a node not measured yet gets tried before an equal one already known */
    place_candidate d[] = {
        NODE(.id = "a-known", .has_model = 1, .slots = 4, .ttft_ms = 100, .tps = 50),
        NODE(.id = "b-new", .has_model = 1, .slots = 4),
    };
    place_request pr = {.max_tokens = 100, .prior_ttft_ms = 100, .prior_tps = 50};
    assert_int_equal(placement_pick(&cfg, &pr, d, 2, NULL), 1);
}

static void pick_penalises_failures_heat_and_slow_links(void **state)
{
    (void)state;
    place_candidate c[] = {
        NODE(.id = "a", .has_model = 1, .slots = 4, .ttft_ms = 100, .tps = 50),
        NODE(.id = "b", .has_model = 1, .slots = 4, .ttft_ms = 110, .tps = 45),
    };
    assert_int_equal(pick(c, 2), 0);
    c[0].success = 0.6; /* fails 4 calls in 10 over the last hour */
    assert_int_equal(pick(c, 2), 1);
    c[0].success = 1;
    c[0].temp_c = 90; /* past hot_c */
    assert_int_equal(pick(c, 2), 1);
    c[0].temp_c = 60;
    c[0].throttled = 1;
    assert_int_equal(pick(c, 2), 1);
    c[0].throttled = 0;
    assert_int_equal(pick(c, 2), 0);
    /* a 50 MB payload over a link measured at 1 MB/s */
    place_cfg cfg = score_cfg();
    place_request rq = {.max_tokens = 100, .payload_bytes = 50e6};
    c[0].link_bytes_per_ms = 1000;
    assert_int_equal(placement_pick(&cfg, &rq, c, 2, NULL), 1);
    cfg.w.link = 0;
    assert_int_equal(placement_pick(&cfg, &rq, c, 2, NULL), 0);
}

static void pick_counts_load_the_engine_reports(void **state)
{
    (void)state;
    /* Someone uses node a's llama-server directly: it reports 4 busy slots
     * and 2 waiting, though the pool sent it nothing. */
    place_candidate c[] = {
        NODE(.id = "a", .has_model = 1, .slots = 4, .engine_busy = 4, .engine_queued = 2),
        NODE(.id = "b", .has_model = 1, .slots = 4, .inflight = 1),
    };
    assert_int_equal(pick(c, 2), 1);
    c[0].engine_busy = c[0].engine_queued = 0;
    assert_int_equal(pick(c, 2), 0);
}

static void pick_waits_for_a_much_faster_busy_node(void **state)
{
    (void)state;
    place_candidate c[] = {
        NODE(.id = "fast", .has_model = 1, .slots = 2, .inflight = 2, .ttft_ms = 50, .tps = 100, .samples = 9),
        NODE(.id = "slow", .has_model = 1, .slots = 2, .ttft_ms = 500, .tps = 5, .samples = 2),
    };
    /* two calls are not enough to pass a free node over */
    assert_int_equal(pick(c, 2), 1);
    c[1].samples = 3;
    assert_int_equal(pick(c, 2), PLACE_DEFER);
    /* not when the free node is nearly as good */
    c[1].tps = 80;
    c[1].ttft_ms = 60;
    assert_int_equal(pick(c, 2), 1);
    /* urgent work waits for the fast node where ordinary work takes the slow one */
    c[1].tps = 40;
    c[1].ttft_ms = 100;
    place_cfg dc = score_cfg();
    place_request low = {.max_tokens = 100, .priority = 0}, high = {.max_tokens = 100, .priority = 9};
    assert_int_equal(placement_pick(&dc, &low, c, 2, NULL), 1);
    assert_int_equal(placement_pick(&dc, &high, c, 2, NULL), PLACE_DEFER);
    /* but not behind a long line already waiting for it */
    high.queued_ahead = 6;
    assert_int_equal(placement_pick(&dc, &high, c, 2, NULL), 1);
    /* nor with deferring switched off */
    c[1].tps = 5;
    place_cfg cfg = score_cfg();
    cfg.w.defer = 0;
    place_request rq = {.max_tokens = 100};
    assert_int_equal(placement_pick(&cfg, &rq, c, 2, NULL), 1);
}

static void baselines_ignore_slots_and_speed(void **state)
{
    (void)state;
    place_candidate c[] = {
        NODE(.id = "a", .has_model = 1, .slots = 1, .inflight = 5, .tps = 100),
        DOWN(.id = "b", .has_model = 1, .slots = 1),
        NODE(.id = "c", .has_model = 1, .slots = 1, .inflight = 2, .tps = 1),
        NODE(.id = "d", .loadable = 1, .need_bytes = 10, .free_vram = 5, .slots = 1),
    };
    place_cfg rr = {.policy = POLICY_ROUND_ROBIN}, lc = {.policy = POLICY_LEAST_CONN};
    place_request rq = {.max_tokens = 10};
    int seen[4] = {0};
    for (unsigned t = 0; t < 6; t++) {
        rq.rr_ticket = t;
        int p = placement_pick(&rr, &rq, c, 4, NULL);
        assert_true(p == 0 || p == 2);
        seen[p]++;
    }
    assert_int_equal(seen[0], 3);
    assert_int_equal(seen[2], 3);
    assert_int_equal(placement_pick(&lc, &rq, c, 4, NULL), 2);
    c[2].inflight = 9;
    assert_int_equal(placement_pick(&lc, &rq, c, 4, NULL), 0);
    assert_int_equal(placement_why(&lc, c, 4), PLACE_OK);
}

static void policies_and_weights_parse(void **state)
{
    (void)state;
    place_policy p;
    assert_int_equal(place_policy_parse("round-robin", &p), 0);
    assert_int_equal(p, POLICY_ROUND_ROBIN);
    assert_int_equal(place_policy_parse("least-connections", &p), 0);
    assert_int_equal(p, POLICY_LEAST_CONN);
    assert_int_equal(place_policy_parse("gpupool", &p), 0);
    assert_int_equal(p, POLICY_SCORE);
    assert_int_equal(place_policy_parse("random", &p), -1);
    assert_string_equal(place_policy_name(POLICY_LEAST_CONN), "least-connections");

    place_weights w;
    place_weights_default(&w);
    char err[128];
    assert_int_equal(place_weights_parse("speed=2,affinity=0.5,hot_c=75,defer=0", &w, err, sizeof err), 0);
    assert_true(w.speed == 2 && w.affinity == 0.5 && w.hot_c == 75 && w.defer == 0 && w.load == 1);
    assert_int_equal(place_weights_parse("speed=fast", &w, err, sizeof err), -1);
    assert_non_null(strstr(err, "speed=fast"));
    assert_int_equal(place_weights_parse("colour=1", &w, err, sizeof err), -1);
    assert_non_null(strstr(err, "unknown weight"));
    assert_int_equal(place_weights_parse("load=-1", &w, err, sizeof err), -1);
    assert_int_equal(place_weights_parse("", &w, err, sizeof err), 0);
}

/* ---- queue ---- */

static void queue_orders_priority_then_shortest_then_oldest(void **state)
{
    (void)state;
    queue_cfg cfg = {.aging_ms = 0};
    queue_item it[] = {
        {.id = "low-short", .priority = 1, .enqueued_ms = 0, .est_ms = 10},
        {.id = "high-long", .priority = 9, .enqueued_ms = 5, .est_ms = 5000},
        {.id = "high-short", .priority = 9, .enqueued_ms = 9, .est_ms = 100},
        {.id = "high-short-older", .priority = 9, .enqueued_ms = 1, .est_ms = 100},
        {.id = "backing-off", .priority = 9, .enqueued_ms = 0, .est_ms = 1, .not_before_ms = 500},
    };
    size_t order[5];
    size_t n = queue_order(&cfg, it, 5, 100, order);
    assert_int_equal(n, 4);
    assert_string_equal(it[order[0]].id, "high-short-older");
    assert_string_equal(it[order[1]].id, "high-short");
    assert_string_equal(it[order[2]].id, "high-long");
    assert_string_equal(it[order[3]].id, "low-short");
    /* once its backoff is over it is offered, shortest first */
    n = queue_order(&cfg, it, 5, 500, order);
    assert_int_equal(n, 5);
    assert_string_equal(it[order[0]].id, "backing-off");
}

static void queue_aging_prevents_starvation(void **state)
{
    (void)state;
    queue_cfg cfg = {.aging_ms = 1000};
    queue_item it[] = {
        {.id = "old-low", .priority = 0, .enqueued_ms = 0, .est_ms = 100},
        {.id = "new-high", .priority = 5, .enqueued_ms = 4499, .est_ms = 100},
    };
    size_t order[2];
    queue_order(&cfg, it, 2, 4500, order);
    assert_string_equal(it[order[0]].id, "new-high"); /* 4.5 s of waiting lifted it to 4 only */
    assert_int_equal(queue_effective_priority(&cfg, &it[0], 4500), 4);
    queue_order(&cfg, it, 2, 6000, order);
    assert_string_equal(it[order[0]].id, "old-low"); /* 6 > 5 */
    assert_int_equal(queue_effective_priority(&cfg, &it[0], 999999999), 1000);
    cfg.aging_ms = 0;
    assert_int_equal(queue_effective_priority(&cfg, &it[0], 999999), 0);
}

static void queue_per_key_limits(void **state)
{
    (void)state;
    queue_cfg none = {0}, conc = {.key_max_running = 2}, share = {.key_max_share = 0.25};
    assert_true(queue_owner_may_start(&none, 100, 1, 8));
    assert_true(queue_owner_may_start(&conc, 1, 0, 8));
    assert_false(queue_owner_may_start(&conc, 2, 0, 8));
    /* a quarter of 8 slots while others wait; all of them when nobody else does */
    assert_true(queue_owner_may_start(&share, 1, 1, 8));
    assert_false(queue_owner_may_start(&share, 2, 1, 8));
    assert_true(queue_owner_may_start(&share, 7, 0, 8));
    /* a tiny pool still gives every key one slot */
    assert_true(queue_owner_may_start(&share, 0, 1, 2));
    assert_false(queue_owner_may_start(&share, 1, 1, 2));
}

/* ---- profiles ---- */

static void profile_derives_speed_from_what_it_gets(void **state)
{
    (void)state;
    double ttft, tps;
    call_sample timed = {.total_ms = 2000, .engine_prompt_ms = 150, .engine_decode_ms = 990, .completion_tokens = 100};
    profile_derive(&timed, 0, &ttft, &tps);
    assert_true(ttft == 150 && tps > 99.9 && tps < 100.1);
    call_sample streamed = {.total_ms = 1100, .first_byte_ms = 100, .completion_tokens = 101};
    profile_derive(&streamed, 0, &ttft, &tps);
    assert_true(ttft == 100 && tps > 99.9 && tps < 100.1);
    call_sample plain = {.total_ms = 1200, .completion_tokens = 101};
    profile_derive(&plain, 200, &ttft, &tps); /* the prior ttft splits the total */
    assert_true(ttft == 0 && tps > 99.9 && tps < 100.1);
    call_sample few = {.total_ms = 30, .completion_tokens = 4};
    profile_derive(&few, 0, &ttft, &tps);
    assert_true(tps == 0); /* four tokens say nothing about decoding speed */
    call_sample one = {.total_ms = 80, .completion_tokens = 1};
    profile_derive(&one, 0, &ttft, &tps);
    assert_true(ttft == 80 && tps == 0);

    call_sample parsed = {0};
    const char *body = "{\"usage\":{\"completion_tokens\":42},\"timings\":{\"prompt_ms\":12.5,\"predicted_ms\":410}}";
    call_sample_parse_answer(&parsed, body, strlen(body));
    assert_int_equal(parsed.completion_tokens, 42);
    assert_true(parsed.engine_prompt_ms == 12.5 && parsed.engine_decode_ms == 410);
    call_sample junk = {0};
    call_sample_parse_answer(&junk, "not json", 8);
    assert_int_equal(junk.completion_tokens, 0);
}

static void profile_averages_and_forgets(void **state)
{
    (void)state;
    node_profile p = {0};
    assert_null(profile_speed(&p, "m"));
    profile_observe_speed(&p, "m", 100, 50, 1);
    profile_observe_speed(&p, "m", 200, 50, 2);
    const model_speed *m = profile_speed(&p, "m");
    assert_non_null(m);
    assert_true(m->ttft_ms > 119 && m->ttft_ms < 121); /* 100 + 0.2 x 100 */
    assert_int_equal(m->samples, 2);
    /* more models than entries: the least recently measured makes room */
    for (int i = 0; i < PROFILE_MODELS; i++) {
        char name[16];
        snprintf(name, sizeof name, "x%d", i);
        profile_observe_speed(&p, name, 10, 10, 10 + i);
    }
    assert_null(profile_speed(&p, "m"));

    int calls;
    assert_true(profile_success_rate(&p, 0, &calls) < 0);
    for (int i = 0; i < 3; i++) profile_observe_outcome(&p, 1, 60000);
    profile_observe_outcome(&p, 0, 120000);
    assert_true(profile_success_rate(&p, 120000, &calls) == 0.75);
    assert_int_equal(calls, 4);
    /* an hour later the old minute no longer counts */
    assert_true(profile_success_rate(&p, 60000 + 3600000, &calls) == 0);
    assert_int_equal(calls, 1);
    assert_true(profile_success_rate(&p, 120000 + 3600000, &calls) < 0);

    profile_observe_link(&p, 100, 1); /* too small to say anything */
    assert_true(p.link_bytes_per_ms == 0);
    profile_observe_link(&p, 1e6, 10);
    assert_true(p.link_bytes_per_ms == 1e5);
    json_t *j = profile_json(&p, 120000);
    assert_non_null(json_object_get(json_object_get(j, "models"), "x3"));
    json_decref(j);
}

/* ---- task memo ---- */

static void memo_remembers_backoff_and_failed_nodes(void **state)
{
    (void)state;
    memo_table *t = memo_new();
    char id[32];
    for (int i = 0; i < 1000; i++) {
        snprintf(id, sizeof id, "task_%d", i);
        assert_non_null(memo_get(t, id, i));
    }
    assert_int_equal(memo_count(t), 1000);
    task_memo *m = memo_find(t, "task_7");
    assert_non_null(m);
    assert_int_equal(m->first_seen_ms, 7);
    memo_failed(t, "task_7", "node-a", 500, 2000);
    memo_failed(t, "task_7", "node-a", 1000, 2100);
    memo_failed(t, "task_7", "node-b", 1000, 2200);
    m = memo_find(t, "task_7");
    assert_int_equal(m->ntried, 2);
    assert_int_equal(m->not_before_ms, 3200);
    for (int i = 0; i < MEMO_TRIED + 2; i++) {
        char node[16];
        snprintf(node, sizeof node, "n%d", i);
        memo_failed(t, "task_7", node, 1, 3000);
    }
    assert_int_equal(memo_find(t, "task_7")->ntried, MEMO_TRIED);
    assert_string_equal(memo_find(t, "task_7")->tried[MEMO_TRIED - 1], "n5");
    /* a pass that saw only task_1: the rest go, except task_7 (kept after its failure) */
    memo_begin_pass(t);
    memo_get(t, "task_1", 4000)->seen = 1;
    memo_end_pass(t, 4000);
    assert_int_equal(memo_count(t), 2);
    assert_non_null(memo_find(t, "task_7"));
    assert_null(memo_find(t, "task_8"));
    memo_begin_pass(t);
    memo_end_pass(t, 100000);
    assert_int_equal(memo_count(t), 0);
    memo_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(pick_prefers_least_loaded_then_free_vram),
        cmocka_unit_test(pick_compares_load_relative_to_slots),
        cmocka_unit_test(pick_skips_unqualified),
        cmocka_unit_test(pick_ties_are_stable),
        cmocka_unit_test(pick_starts_models_only_where_they_fit),
        cmocka_unit_test(pick_prefers_a_loaded_model),
        cmocka_unit_test(pick_uses_measured_speed),
        cmocka_unit_test(pick_penalises_failures_heat_and_slow_links),
        cmocka_unit_test(pick_counts_load_the_engine_reports),
        cmocka_unit_test(pick_waits_for_a_much_faster_busy_node),
        cmocka_unit_test(baselines_ignore_slots_and_speed),
        cmocka_unit_test(policies_and_weights_parse),
        cmocka_unit_test(queue_orders_priority_then_shortest_then_oldest),
        cmocka_unit_test(queue_aging_prevents_starvation),
        cmocka_unit_test(queue_per_key_limits),
        cmocka_unit_test(profile_derives_speed_from_what_it_gets),
        cmocka_unit_test(profile_averages_and_forgets),
        cmocka_unit_test(memo_remembers_backoff_and_failed_nodes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
