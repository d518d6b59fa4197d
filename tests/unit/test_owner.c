/* Unit tests for worker/owner: each rule that drains a node, its boundaries,
 * the hysteresis that keeps a node from flapping, the VRAM cap, and serving
 * hours including windows past midnight.  Time is passed in, never read. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "worker/owner.h"

#define GiB (1ULL << 30)
#define MiB (1ULL << 20)

enum { SUN, MON, TUE, WED, THU, FRI, SAT };

static owner_policy policy(void)
{
    owner_policy p;
    memset(&p, 0, sizeof p);
    p.tolerance_bytes = OWNER_DEFAULT_TOLERANCE;
    p.settle_ms = 600;
    return p;
}

/* A 12 GiB GPU with `used` bytes taken and an (empty) process list. */
static gpu_info gpu(uint64_t used)
{
    gpu_info g;
    memset(&g, 0, sizeof g);
    g.total_bytes = 12 * GiB;
    g.free_bytes = 12 * GiB - used;
    return g;
}

static void add_proc(gpu_info *g, int pid, uint64_t used)
{
    g->procs[g->nprocs++] = (gpu_proc){pid, used};
}

static const int OWN[] = {100, 101};

/* Wednesday noon, user idle for an hour, our two pids. */
static owner_input input(const gpu_info *g, int n)
{
    owner_input in = {.gpus = g, .ngpus = n, .own_pids = OWN, .nown = 2, .weekday = WED, .hour = 12, .minute = 0,
                      .idle_s = 3600};
    return in;
}

static owner_verdict decide(const owner_policy *p, const owner_input *in, owner_state *st, int64_t now)
{
    owner_verdict v;
    owner_decide(p, in, st, now, &v);
    return v;
}

static void nothing_asked_serves(void **state)
{
    (void)state;
    owner_policy p = policy();
    owner_state st = {0};
    gpu_info g = gpu(2 * GiB);
    owner_input in = input(&g, 1);
    owner_verdict v = decide(&p, &in, &st, 1000);
    assert_false(v.draining);
    assert_int_equal(v.rule, OWNER_OK);
    assert_string_equal(v.reason, "");
    assert_int_equal(v.foreign_procs[0], 0);
    assert_true(v.offer_free[0] == 10 * GiB);
    assert_string_equal(owner_rule_name(v.rule), "ok");
}

static void foreign_process_drains_at_once(void **state)
{
    (void)state;
    owner_policy p = policy();
    owner_state st = {0};
    gpu_info g = gpu(2 * GiB);
    owner_input in = input(&g, 1);
    decide(&p, &in, &st, 0);
    g = gpu(2 * GiB + 3 * GiB + 200 * MiB);
    add_proc(&g, 4242, 3 * GiB + 200 * MiB);
    owner_verdict v = decide(&p, &in, &st, 200);
    assert_true(v.draining);
    assert_int_equal(v.rule, OWNER_FOREIGN_PROCESS);
    assert_string_equal(v.reason, "a foreign process (pid 4242, 3.2 GiB) is using GPU 0");
    assert_int_equal(v.foreign_procs[0], 1);
    assert_string_equal(owner_rule_name(v.rule), "foreign_process");
}

static void own_processes_are_not_foreign(void **state)
{
    (void)state;
    owner_policy p = policy();
    owner_state st = {0};
    gpu_info g = gpu(2 * GiB);
    owner_input in = input(&g, 1);
    decide(&p, &in, &st, 0);
    /* Our engine loads 6 GiB: listed under our pid, and it explains the
     * fall in free memory too. */
    g = gpu(8 * GiB);
    add_proc(&g, 101, 6 * GiB);
    owner_verdict v = decide(&p, &in, &st, 200);
    assert_false(v.draining);
    assert_int_equal(v.foreign_procs[0], 0);
    assert_true(v.own_bytes == 6 * GiB);
}

static void several_foreign_name_the_largest(void **state)
{
    (void)state;
    owner_policy p = policy();
    owner_state st = {0};
    gpu_info g[2] = {gpu(1 * GiB), gpu(5 * GiB)};
    g[1].index = 1;
    add_proc(&g[0], 7, GPU_USED_UNKNOWN);
    add_proc(&g[1], 8, 1 * GiB);
    add_proc(&g[1], 9, 4 * GiB);
    owner_input in = input(g, 2);
    owner_verdict v = decide(&p, &in, &st, 0);
    assert_string_equal(v.reason, "a foreign process (pid 9, 4 GiB) is using GPU 1 (and 2 more)");
    assert_int_equal(v.foreign_procs[0], 1);
    assert_int_equal(v.foreign_procs[1], 2);

    /* Alone and of unknown size, it is still named. */
    owner_state st2 = {0};
    in = input(g, 1);
    v = decide(&p, &in, &st2, 0);
    assert_string_equal(v.reason, "a foreign process (pid 7) is using GPU 0");
}

static void gpu_conditions_clear_only_after_settling(void **state)
{
    (void)state;
    owner_policy p = policy();
    owner_state st = {0};
    gpu_info clean = gpu(2 * GiB), busy = gpu(2 * GiB);
    add_proc(&busy, 4242, 256 * MiB);
    owner_input in_clean = input(&clean, 1), in_busy = input(&busy, 1);
    assert_false(decide(&p, &in_clean, &st, 0).draining);
    assert_true(decide(&p, &in_busy, &st, 1000).draining);
    /* Gone, but not for long enough: still draining, same reason. */
    owner_verdict v = decide(&p, &in_clean, &st, 1200);
    assert_true(v.draining);
    assert_string_equal(v.reason, "a foreign process (pid 4242, 256 MiB) is using GPU 0");
    assert_true(decide(&p, &in_clean, &st, 1599).draining);
    /* Back within the settle time: the clock starts again. */
    assert_true(decide(&p, &in_busy, &st, 1700).draining);
    assert_true(decide(&p, &in_clean, &st, 2299).draining);
    v = decide(&p, &in_clean, &st, 2300);
    assert_false(v.draining);
    assert_string_equal(v.reason, "");
}

static void unreadable_gpus_keep_the_gpu_verdict(void **state)
{
    (void)state;
    owner_policy p = policy();
    owner_state st = {0};
    gpu_info busy = gpu(2 * GiB), clean = gpu(2 * GiB);
    add_proc(&busy, 4242, GiB);
    owner_input in = input(&busy, 1);
    assert_true(decide(&p, &in, &st, 0).draining);
    owner_input lost = input(NULL, -1);
    owner_verdict v = decide(&p, &lost, &st, 60000);
    assert_true(v.draining);
    assert_int_equal(v.rule, OWNER_FOREIGN_PROCESS);
    assert_true(v.offer_free[0] == 0);
    in = input(&clean, 1);
    assert_false(decide(&p, &in, &st, 60200).draining);
}

/* No process list (an old driver): free VRAM falling beyond the tolerance
 * below the lowest level seen counts as foreign use. */
static void unexplained_vram_beyond_tolerance_drains(void **state)
{
    (void)state;
    owner_policy p = policy();
    owner_state st = {0};
    gpu_info g = gpu(2 * GiB);
    g.nprocs = -1;
    owner_input in = input(&g, 1);
    assert_false(decide(&p, &in, &st, 0).draining);
    g.free_bytes -= 512 * MiB; /* exactly the tolerance: noise */
    owner_verdict v = decide(&p, &in, &st, 200);
    assert_false(v.draining);
    assert_int_equal(v.foreign_procs[0], -1);
    g.free_bytes -= 1; /* beyond it */
    v = decide(&p, &in, &st, 400);
    assert_true(v.draining);
    assert_int_equal(v.rule, OWNER_FOREIGN_VRAM);
    assert_string_equal(v.reason, "512 MiB of VRAM is in use that this worker's engines do not explain");

    /* The level is the lowest seen: use that shrinks lowers it. */
    owner_state st2 = {0};
    g = gpu(3 * GiB);
    g.nprocs = -1;
    decide(&p, &in, &st2, 0);
    g = gpu(1 * GiB);
    g.nprocs = -1;
    decide(&p, &in, &st2, 200);
    g = gpu(2 * GiB);
    g.nprocs = -1;
    assert_true(decide(&p, &in, &st2, 400).draining);

    /* A larger tolerance lets it pass. */
    p.tolerance_bytes = 2 * GiB;
    owner_state st3 = {0};
    g = gpu(1 * GiB);
    g.nprocs = -1;
    decide(&p, &in, &st3, 0);
    g = gpu(3 * GiB);
    g.nprocs = -1;
    assert_false(decide(&p, &in, &st3, 200).draining);
}

/* Without a process list, what our engines were started with explains
 * their use; an estimate above the real use must not lower the level (or
 * the margin would look foreign once the engine stops). */
static void expected_use_explains_but_does_not_teach(void **state)
{
    (void)state;
    owner_policy p = policy();
    owner_state st = {0};
    gpu_info g = gpu(2 * GiB);
    g.nprocs = -1;
    owner_input in = input(&g, 1);
    decide(&p, &in, &st, 0);
    /* Our engine starts: free VRAM says nothing meanwhile. */
    in.starting = 1;
    g = gpu(2 * GiB + 3 * GiB);
    g.nprocs = -1;
    assert_false(decide(&p, &in, &st, 200).draining);
    /* Up: expected 5 GiB, really 4 GiB. */
    in.starting = 0;
    in.expected_bytes = 5 * GiB;
    g = gpu(6 * GiB);
    g.nprocs = -1;
    owner_verdict v = decide(&p, &in, &st, 400);
    assert_false(v.draining);
    assert_true(v.own_bytes == 5 * GiB);
    /* Stopped: back where it was, and that is not foreign. */
    in.expected_bytes = 0;
    g = gpu(2 * GiB);
    g.nprocs = -1;
    assert_false(decide(&p, &in, &st, 600).draining);
    /* But the owner taking 2 GiB while our engine runs is. */
    in.expected_bytes = 5 * GiB;
    g = gpu(2 * GiB + 5 * GiB + 2 * GiB);
    g.nprocs = -1;
    assert_int_equal(decide(&p, &in, &st, 800).rule, OWNER_FOREIGN_VRAM);
}

static void vram_cap_drains_and_limits_offers(void **state)
{
    (void)state;
    owner_policy p = policy();
    p.max_vram_bytes = 8 * GiB;
    owner_state st = {0};
    gpu_info g[2] = {gpu(1 * GiB), gpu(3 * GiB)};
    g[0].free_bytes = 4 * GiB;
    g[1].free_bytes = 6 * GiB;
    add_proc(&g[1], 100, 3 * GiB);
    owner_input in = input(g, 2);
    owner_verdict v = decide(&p, &in, &st, 0);
    assert_false(v.draining);
    /* 8 GiB cap, 3 GiB used by us: 5 GiB to offer, first GPU first. */
    assert_true(v.offer_free[0] == 4 * GiB);
    assert_true(v.offer_free[1] == 1 * GiB);

    g[1].procs[0].used_bytes = 8 * GiB; /* exactly the cap */
    v = decide(&p, &in, &st, 200);
    assert_false(v.draining);
    assert_true(v.offer_free[0] == 0 && v.offer_free[1] == 0);

    g[1].procs[0].used_bytes = 9 * GiB;
    v = decide(&p, &in, &st, 400);
    assert_true(v.draining);
    assert_int_equal(v.rule, OWNER_OVER_CAP);
    assert_string_equal(v.reason, "VRAM use over the owner's cap of 8 GiB (9 GiB in use here)");

    /* With our use unknown, the expectation counts. */
    owner_state st2 = {0};
    g[1].procs[0].used_bytes = GPU_USED_UNKNOWN;
    in.expected_bytes = 10 * GiB;
    assert_int_equal(decide(&p, &in, &st2, 0).rule, OWNER_OVER_CAP);
}

static void user_activity(void **state)
{
    (void)state;
    owner_policy p = policy();
    owner_state st = {0};
    gpu_info g = gpu(GiB);
    owner_input in = input(&g, 1);
    in.idle_s = 5;
    assert_false(decide(&p, &in, &st, 0).draining); /* not asked for */
    p.pause_active_s = 60;
    in.idle_s = 12;
    owner_verdict v = decide(&p, &in, &st, 0);
    assert_true(v.draining);
    assert_int_equal(v.rule, OWNER_USER_ACTIVE);
    assert_string_equal(v.reason, "the user is active (input 12 s ago)");
    in.idle_s = 59;
    assert_true(decide(&p, &in, &st, 1).draining);
    /* The pause itself is the hysteresis: serving resumes only after a
     * full minute without input. */
    in.idle_s = 60;
    assert_false(decide(&p, &in, &st, 2).draining);
    in.idle_s = -1;
    in.idle_why = "no /dev/input";
    v = decide(&p, &in, &st, 3);
    assert_int_equal(v.rule, OWNER_ACTIVITY_UNKNOWN);
    assert_string_equal(v.reason, "user activity cannot be read: no /dev/input");
}

static void hours(owner_policy *p, const char *spec)
{
    char err[200] = "";
    if (owner_parse_hours(spec, p, err, sizeof err)) fail_msg("\"%s\": %s", spec, err);
}

static void serving_hours_boundaries(void **state)
{
    (void)state;
    owner_policy p = policy();
    hours(&p, "09:00-18:00");
    assert_int_equal(p.nhours, 1);
    assert_false(owner_in_hours(&p, WED, 8 * 60 + 59));
    assert_true(owner_in_hours(&p, WED, 9 * 60));
    assert_true(owner_in_hours(&p, SUN, 17 * 60 + 59));
    assert_false(owner_in_hours(&p, SAT, 18 * 60));

    owner_state st = {0};
    gpu_info g = gpu(GiB);
    owner_input in = input(&g, 1);
    in.hour = 18;
    in.minute = 5;
    owner_verdict v = decide(&p, &in, &st, 0);
    assert_true(v.draining);
    assert_int_equal(v.rule, OWNER_OUTSIDE_HOURS);
    assert_string_equal(v.reason, "outside serving hours 09:00-18:00 (now wed 18:05)");
    in.hour = 9;
    in.minute = 0;
    assert_false(decide(&p, &in, &st, 1).draining);

    /* No windows: any time. */
    owner_policy any = policy();
    assert_true(owner_in_hours(&any, SAT, 3 * 60));
}

static void serving_hours_past_midnight(void **state)
{
    (void)state;
    owner_policy p = policy();
    hours(&p, "mon-fri 18:00-08:00");
    assert_true(owner_in_hours(&p, MON, 18 * 60));
    assert_false(owner_in_hours(&p, MON, 17 * 60 + 59));
    assert_true(owner_in_hours(&p, TUE, 7 * 60 + 59));   /* Monday's night */
    assert_false(owner_in_hours(&p, TUE, 8 * 60));
    assert_true(owner_in_hours(&p, SAT, 7 * 60 + 59));   /* Friday's night */
    assert_false(owner_in_hours(&p, SAT, 18 * 60));      /* Saturday starts none */
    assert_false(owner_in_hours(&p, MON, 7 * 60));       /* Sunday started none */
    assert_true(owner_in_hours(&p, FRI, 23 * 60 + 59));

    /* Days that wrap the week, and a window ending at midnight. */
    owner_policy q = policy();
    hours(&q, "fri-mon 22:00-24:00");
    assert_true(owner_in_hours(&q, SUN, 23 * 60));
    assert_true(owner_in_hours(&q, MON, 22 * 60));
    assert_false(owner_in_hours(&q, TUE, 23 * 60));
    assert_false(owner_in_hours(&q, SAT, 0)); /* ends at midnight, not after */
}

static void serving_hours_forms(void **state)
{
    (void)state;
    owner_policy p = policy();
    hours(&p, "weekdays 18:00-23:00, weekends 00:00-24:00");
    hours(&p, "Wed 9:30-10:00"); /* repeated options add windows */
    assert_int_equal(p.nhours, 3);
    assert_string_equal(p.hours_text, "weekdays 18:00-23:00, weekends 00:00-24:00, Wed 9:30-10:00");
    assert_true(owner_in_hours(&p, SAT, 0));
    assert_true(owner_in_hours(&p, SUN, 23 * 60 + 59));
    assert_false(owner_in_hours(&p, MON, 17 * 60));
    assert_true(owner_in_hours(&p, WED, 9 * 60 + 30));
    assert_false(owner_in_hours(&p, THU, 9 * 60 + 30));
    owner_policy d = policy();
    hours(&d, "daily 00:00-01:00");
    assert_true(owner_in_hours(&d, TUE, 30));

    static const char *const bad[] = {"", "9-17", "25:00-26:00", "09:60-10:00", "24:00-01:00", "09:00-09:00",
                                      "mon-fry 09:00-10:00", "09:00-18:00,", "09:00-24:30", "someday 9:00-10:00",
                                      "123:00-124:00"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        owner_policy b = policy();
        char err[200] = "";
        if (owner_parse_hours(bad[i], &b, err, sizeof err) == 0) fail_msg("\"%s\" was accepted", bad[i]);
        assert_true(err[0] != 0);
        assert_null(strchr(err, '\n'));
    }
    owner_policy many = policy();
    char err[200];
    for (int i = 0; i < OWNER_MAX_WINDOWS; i++) assert_int_equal(owner_parse_hours("01:00-02:00", &many, err, sizeof err), 0);
    assert_int_equal(owner_parse_hours("01:00-02:00", &many, err, sizeof err), -1);
    assert_true(strlen(many.hours_text) < sizeof many.hours_text);
}

/* Several reasons at once: the first in the documented order is shown. */
static void reasons_in_order(void **state)
{
    (void)state;
    owner_policy p = policy();
    hours(&p, "09:00-10:00");
    p.pause_active_s = 60;
    owner_state st = {0};
    gpu_info g = gpu(GiB);
    add_proc(&g, 4242, GiB);
    owner_input in = input(&g, 1);
    in.idle_s = 1;
    assert_int_equal(decide(&p, &in, &st, 0).rule, OWNER_FOREIGN_PROCESS);
    g.nprocs = 0;
    assert_int_equal(decide(&p, &in, &st, 1000).rule, OWNER_USER_ACTIVE);
    in.idle_s = 600;
    assert_int_equal(decide(&p, &in, &st, 1001).rule, OWNER_OUTSIDE_HOURS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(nothing_asked_serves),
        cmocka_unit_test(foreign_process_drains_at_once),
        cmocka_unit_test(own_processes_are_not_foreign),
        cmocka_unit_test(several_foreign_name_the_largest),
        cmocka_unit_test(gpu_conditions_clear_only_after_settling),
        cmocka_unit_test(unreadable_gpus_keep_the_gpu_verdict),
        cmocka_unit_test(unexplained_vram_beyond_tolerance_drains),
        cmocka_unit_test(expected_use_explains_but_does_not_teach),
        cmocka_unit_test(vram_cap_drains_and_limits_offers),
        cmocka_unit_test(user_activity),
        cmocka_unit_test(serving_hours_boundaries),
        cmocka_unit_test(serving_hours_past_midnight),
        cmocka_unit_test(serving_hours_forms),
        cmocka_unit_test(reasons_in_order),
    };
    return cmocka_run_group_tests_name("owner", tests, NULL, NULL);
}
