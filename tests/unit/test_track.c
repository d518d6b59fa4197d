/* Unit tests: the two-track decision (policy/track) and the budgets it reads
 * (policy/budget): complexity rules, headers, privacy before everything,
 * the degrade at the soft threshold and at the hard cap, fallback hops, the
 * minute window and the day's counters. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy/budget.h"
#include "policy/track.h"
#include "store/store.h"

static void config(track_cfg *c)
{
    char err[200];
    track_cfg_init(c);
    snprintf(c->auto_local, sizeof c->auto_local, "local-8b");
    snprintf(c->auto_cloud, sizeof c->auto_cloud, "cloud-big");
    assert_int_equal(track_rule_add(c, "prompt-tokens=1000", err, sizeof err), 0);
    assert_int_equal(track_rule_add(c, "max-tokens=2048", err, sizeof err), 0);
    assert_int_equal(track_rule_add(c, "keyword=prove", err, sizeof err), 0);
    assert_int_equal(track_rule_add(c, "keyword=证明", err, sizeof err), 0);
}

static const budget_view OK = {.level = BUDGET_OK, .limit = ""};

static void rules_pick_the_track(void **state)
{
    (void)state;
    track_cfg c;
    config(&c);
    track_decision d;
    track_request simple = {.is_auto = 1, .prompt_tokens = 20, .max_tokens = 100};
    track_decide(&c, &simple, &OK, &d);
    assert_int_equal(d.target, TRACK_LOCAL);
    assert_string_equal(d.model, "local-8b");
    assert_string_equal(d.kind, "simple");

    track_request big = {.is_auto = 1, .prompt_tokens = 5000};
    track_decide(&c, &big, &OK, &d);
    assert_int_equal(d.target, TRACK_CLOUD);
    assert_string_equal(d.model, "cloud-big");
    assert_string_equal(d.reason, "complex (prompt_tokens 5000 >= 1000)");

    track_request longer = {.is_auto = 1, .max_tokens = 4096};
    track_decide(&c, &longer, &OK, &d);
    assert_int_equal(d.target, TRACK_CLOUD);
    assert_non_null(strstr(d.reason, "max_tokens 4096"));

    json_t *body = json_pack("{s:[{s:s,s:s}]}", "messages", "role", "user", "content", "Please PROVE this lemma");
    track_request kw = {.is_auto = 1, .keyword = track_keyword_hit(&c, body)};
    assert_string_equal(kw.keyword, "prove");
    track_decide(&c, &kw, &OK, &d);
    assert_int_equal(d.target, TRACK_CLOUD);
    assert_string_equal(d.reason, "complex (keyword 'prove')");
    json_decref(body);
    /* a keyword that is not ASCII is named by its place, to keep the header ASCII */
    body = json_pack("{s:s}", "prompt", "请证明这个定理");
    track_request cjk = {.is_auto = 1, .keyword = track_keyword_hit(&c, body)};
    track_decide(&c, &cjk, &OK, &d);
    assert_string_equal(d.reason, "complex (keyword #2)");
    json_decref(body);
    body = json_pack("{s:[{s:s,s:s}]}", "messages", "role", "prove", "content", "hello");
    assert_null(track_keyword_hit(&c, body)); /* the role is not text */
    json_decref(body);

    /* the header wins over the rules, both ways */
    track_request forced_local = {.is_auto = 1, .prompt_tokens = 5000, .hint = "local"};
    track_decide(&c, &forced_local, &OK, &d);
    assert_int_equal(d.target, TRACK_LOCAL);
    assert_string_equal(d.kind, "header");
    track_request forced_cloud = {.is_auto = 1, .hint = "cloud"};
    track_decide(&c, &forced_cloud, &OK, &d);
    assert_int_equal(d.target, TRACK_CLOUD);

    /* an explicit model: a local one stays, a cloud-only one goes out */
    track_request explicit_local = {.prompt_tokens = 9000};
    track_decide(&c, &explicit_local, &OK, &d);
    assert_int_equal(d.target, TRACK_LOCAL);
    assert_null(d.model);
    assert_string_equal(d.reason, "pool");
    track_request explicit_cloud = {.cloud_model = 1};
    track_decide(&c, &explicit_cloud, &OK, &d);
    assert_int_equal(d.target, TRACK_CLOUD);
    assert_null(d.model);

    /* without a cloud model auto stays local */
    c.auto_cloud[0] = 0;
    track_decide(&c, &big, &OK, &d);
    assert_int_equal(d.target, TRACK_LOCAL);
    assert_string_equal(d.kind, "no_cloud");
    track_cfg_free(&c);
}

static void private_never_goes_out(void **state)
{
    (void)state;
    track_cfg c;
    config(&c);
    track_decision d;
    track_request rq = {.is_auto = 1, .prompt_tokens = 9000, .hint = "cloud", .urgent = 1, .private_rule = "email",
                        .local_failed = 1};
    track_decide(&c, &rq, &OK, &d);
    assert_int_equal(d.target, TRACK_LOCAL);
    assert_string_equal(d.model, "local-8b");
    assert_string_equal(d.reason, "private (email)");
    /* auto without a local model: nowhere to run */
    c.auto_local[0] = 0;
    track_decide(&c, &rq, &OK, &d);
    assert_int_equal(d.target, TRACK_LOCAL);
    assert_true(d.refuse);
    track_cfg_free(&c);
}

static void degrade_at_soft_and_hard(void **state)
{
    (void)state;
    track_cfg c;
    config(&c);
    budget *b = budget_new();
    budget_limits l;
    char err[200];
    assert_int_equal(budget_limits_parse("tokens-day=1000,cost-day=2,soft=0.5", &l, err, sizeof err), 0);
    assert_int_equal(budget_set_limits(b, "default", &l), 0);
    assert_true(budget_configured(b));
    const char *day = "2026-12-01";
    track_request normal = {.is_auto = 1, .prompt_tokens = 5000};
    track_request urgent = {.is_auto = 1, .prompt_tokens = 5000, .urgent = 1};
    track_request simple = {.is_auto = 1, .prompt_tokens = 5};
    track_decision d;

    budget_view v = budget_check(b, "key-a", 1000, day);
    assert_int_equal(v.level, BUDGET_OK);
    track_decide(&c, &normal, &v, &d);
    assert_int_equal(d.target, TRACK_CLOUD);

    /* 499 of 1000 tokens: still under the soft threshold of one half */
    budget_charge_usage(b, "key-a", day, 499, 0.1);
    v = budget_check(b, "key-a", 1000, day);
    assert_int_equal(v.level, BUDGET_OK);
    budget_charge_usage(b, "key-a", day, 1, 0);
    v = budget_check(b, "key-a", 1000, day);
    assert_int_equal(v.level, BUDGET_SOFT);
    assert_string_equal(v.limit, "tokens-day");
    track_decide(&c, &normal, &v, &d);
    assert_int_equal(d.target, TRACK_LOCAL);
    assert_string_equal(d.model, "local-8b");
    assert_string_equal(d.kind, "budget_soft");
    assert_string_equal(d.reason, "budget soft threshold (tokens-day at 50%), not urgent");
    track_decide(&c, &urgent, &v, &d);
    assert_int_equal(d.target, TRACK_CLOUD);
    track_decide(&c, &simple, &v, &d);
    assert_int_equal(d.target, TRACK_LOCAL);
    assert_string_equal(d.kind, "simple");

    /* the cost reaches its cap first: everything runs locally */
    budget_charge_usage(b, "key-a", day, 0, 1.9);
    v = budget_check(b, "key-a", 1000, day);
    assert_int_equal(v.level, BUDGET_HARD);
    assert_string_equal(v.limit, "cost-day");
    track_decide(&c, &urgent, &v, &d);
    assert_int_equal(d.target, TRACK_LOCAL);
    assert_string_equal(d.kind, "budget_hard");
    assert_string_equal(d.reason, "budget hard cap (cost-day at 100%)");
    track_request header = {.is_auto = 1, .hint = "cloud", .urgent = 1};
    track_decide(&c, &header, &v, &d);
    assert_int_equal(d.target, TRACK_LOCAL);
    /* a model only the cloud serves, at the cap, runs as auto's local model */
    track_request explicit_cloud = {.cloud_model = 1, .urgent = 1};
    track_decide(&c, &explicit_cloud, &v, &d);
    assert_int_equal(d.target, TRACK_LOCAL);
    assert_string_equal(d.model, "local-8b");
    c.auto_local[0] = 0;
    track_decide(&c, &explicit_cloud, &v, &d);
    assert_true(d.refuse);
    snprintf(c.auto_local, sizeof c.auto_local, "local-8b");

    /* another key has its own budget */
    v = budget_check(b, "key-b", 1000, day);
    assert_int_equal(v.level, BUDGET_OK);
    /* a new day starts again */
    v = budget_check(b, "key-a", 1000, "2026-12-02");
    assert_int_equal(v.level, BUDGET_OK);
    budget_free(b);
    track_cfg_free(&c);
}

static void fallback_hops_ask_again(void **state)
{
    (void)state;
    track_cfg c;
    config(&c);
    track_decision d;
    /* the cloud failed: the local model, said so */
    track_request rq = {.is_auto = 1, .prompt_tokens = 5000, .cloud_failed = 1};
    track_decide(&c, &rq, &OK, &d);
    assert_int_equal(d.target, TRACK_LOCAL);
    assert_string_equal(d.model, "local-8b");
    assert_string_equal(d.kind, "fallback");
    assert_non_null(strstr(d.reason, "the cloud failed"));
    /* local failed: the cloud, while the budget allows it */
    track_request local = {.is_auto = 1, .prompt_tokens = 5, .local_failed = 1};
    track_decide(&c, &local, &OK, &d);
    assert_int_equal(d.target, TRACK_CLOUD);
    assert_string_equal(d.model, "cloud-big");
    budget_view hard = {.level = BUDGET_HARD, .limit = "rpm", .share = 1};
    track_decide(&c, &local, &hard, &d);
    assert_int_equal(d.target, TRACK_LOCAL);
    assert_string_equal(d.kind, "budget_hard");
    budget_view soft = {.level = BUDGET_SOFT, .limit = "rpm", .share = 0.9};
    track_decide(&c, &local, &soft, &d);
    assert_int_equal(d.target, TRACK_LOCAL);
    /* both failed: nothing more */
    track_request both = {.is_auto = 1, .local_failed = 1, .cloud_failed = 1};
    track_decide(&c, &both, &OK, &d);
    assert_int_equal(d.target, TRACK_LOCAL);
    track_cfg_free(&c);
}

static void minute_window_and_restore(void **state)
{
    (void)state;
    budget *b = budget_new();
    budget_limits l;
    char err[200];
    assert_int_equal(budget_limits_parse("rpm=3", &l, err, sizeof err), 0);
    assert_true(l.soft > 0.79 && l.soft < 0.81);
    assert_int_equal(budget_set_limits(b, "key-a", &l), 0);
    const char *day = "2026-12-01";
    for (int i = 0; i < 2; i++) budget_charge_request(b, "key-a", 10000 + i * 1000, day);
    budget_view v = budget_check(b, "key-a", 12000, day);
    assert_int_equal(v.level, BUDGET_OK); /* 2 of 3 is under the default soft 0.8 */
    budget_charge_request(b, "key-a", 12000, day);
    v = budget_check(b, "key-a", 12500, day);
    assert_int_equal(v.level, BUDGET_HARD);
    assert_string_equal(v.limit, "rpm");
    /* a minute later the window has slid past them */
    v = budget_check(b, "key-a", 12000 + 60000, day);
    assert_int_equal(v.level, BUDGET_OK);
    /* a key without limits, and no default: no budget at all */
    v = budget_check(b, "key-z", 1000, day);
    assert_false(v.limited);
    /* restored spend counts */
    assert_int_equal(budget_limits_parse("tokens-day=100", &l, err, sizeof err), 0);
    budget_set_limits(b, "", &l);
    budget_restore(b, "key-r", day, 4, 100, 0.5);
    v = budget_check(b, "key-r", 1000, day);
    assert_int_equal(v.level, BUDGET_HARD);
    json_t *j = budget_json(b, "key-r", 1000, day);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "used"), "tokens_today")), 100);
    assert_string_equal(json_string_value(json_object_get(j, "level")), "hard");
    json_decref(j);
    /* bad specs */
    assert_int_equal(budget_limits_parse("rpm=x", &l, err, sizeof err), -1);
    assert_int_equal(budget_limits_parse("soft=1.5", &l, err, sizeof err), -1);
    assert_int_equal(budget_limits_parse("", &l, err, sizeof err), -1);
    assert_int_equal(budget_limits_parse("color=red", &l, err, sizeof err), -1);
    budget_free(b);
}

static void prices_and_rules_parse(void **state)
{
    (void)state;
    track_cfg c;
    track_cfg_init(&c);
    char err[200];
    assert_int_equal(track_price_set(&c, "cloud-acme", 2.5, 10), 0);
    assert_true(track_cost(&c, "cloud-acme", 1000000, 100000) > 3.49 && track_cost(&c, "cloud-acme", 1000000, 100000) < 3.51);
    assert_true(track_cost(&c, "cloud-other", 1000, 1000) == 0);
    assert_int_equal(track_rule_add(&c, "urgent-priority=9", err, sizeof err), 0);
    assert_int_equal(c.urgent_priority, 9);
    assert_int_equal(track_rule_add(&c, "prompt-tokens", err, sizeof err), -1);
    assert_int_equal(track_rule_add(&c, "colour=blue", err, sizeof err), -1);
    assert_int_equal(track_rule_add(&c, "keyword=", err, sizeof err), -1);
    assert_true(track_hint_valid(NULL) && track_hint_valid("CLOUD") && !track_hint_valid("moon"));
    assert_true(track_urgency_valid("urgent") && !track_urgency_valid("now"));
    track_cfg_free(&c);
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static void restore_into(void *ctx, const char *owner, int64_t requests, int64_t tokens, double cost)
{
    budget_restore(ctx, owner, "2026-12-01", requests, tokens, cost);
}

/* The spend is added up per day and key in the store, and a budget made
 * after a reopen starts from it. */
static void spend_survives_reopen(void **state)
{
    (void)state;
    char dir[] = "/tmp/gpupool-spend-XXXXXX", err[256];
    assert_non_null(mkdtemp(dir));
    store *st = store_open(dir, err, sizeof err);
    assert_non_null(st);
    assert_int_equal(store_spend_add(st, "2026-12-01", "key-a", 1, 0, 0), STORE_OK);
    assert_int_equal(store_spend_add(st, "2026-12-01", "key-a", 0, 300, 0.25), STORE_OK);
    assert_int_equal(store_spend_add(st, "2026-12-01", "key-b", 1, 10, 0.01), STORE_OK);
    assert_int_equal(store_spend_add(st, "2026-11-30", "key-a", 9, 9000, 9), STORE_OK);
    store_close(st);
    st = store_open(dir, err, sizeof err);
    assert_non_null(st);
    budget *b = budget_new();
    budget_limits l;
    assert_int_equal(budget_limits_parse("tokens-day=350", &l, err, sizeof err), 0);
    budget_set_limits(b, "default", &l);
    assert_int_equal(store_spend_load(st, "2026-12-01", restore_into, b), STORE_OK);
    json_t *j = budget_json(b, "key-a", 1000, "2026-12-01");
    json_t *used = json_object_get(j, "used");
    assert_int_equal(json_integer_value(json_object_get(used, "tokens_today")), 300);
    assert_int_equal(json_integer_value(json_object_get(used, "requests_today")), 1);
    assert_true(json_real_value(json_object_get(used, "cost_today")) > 0.249);
    assert_string_equal(json_string_value(json_object_get(j, "level")), "soft");
    json_decref(j);
    budget_free(b);
    store_close(st);
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rules_pick_the_track),
        cmocka_unit_test(private_never_goes_out),
        cmocka_unit_test(degrade_at_soft_and_hard),
        cmocka_unit_test(fallback_hops_ask_again),
        cmocka_unit_test(minute_window_and_restore),
        cmocka_unit_test(prices_and_rules_parse),
        cmocka_unit_test(spend_survives_reopen),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
