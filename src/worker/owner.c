/* worker/owner: see owner.h. */
#include "worker/owner.h"
#include "util/err.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static const char *const day_names[7] = {"sun", "mon", "tue", "wed", "thu", "fri", "sat"};

const char *owner_rule_name(owner_rule r)
{
    static const char *const n[OWNER_RULES] = {"ok", "foreign_process", "foreign_vram", "over_cap",
                                               "user_active", "activity_unknown", "outside_hours"};
    return r >= 0 && r < OWNER_RULES ? n[r] : "unknown";
}


/* "8 GiB", "3.2 GiB", "600 MiB": what people read in a reason. */
static const char *size_text(uint64_t b, char *out, size_t len)
{
    const uint64_t gib = 1ULL << 30, mib = 1ULL << 20;
    if (b >= gib && b % gib == 0) snprintf(out, len, "%llu GiB", (unsigned long long)(b / gib));
    else if (b >= gib) snprintf(out, len, "%.1f GiB", (double)b / (double)gib);
    else snprintf(out, len, "%llu MiB", (unsigned long long)((b + mib / 2) / mib));
    return out;
}

/* ---- serving hours ---- */

static int day_index(const char *s, size_t len)
{
    if (len != 3) return -1;
    for (int d = 0; d < 7; d++)
        if (!strncasecmp(s, day_names[d], 3)) return d;
    return -1;
}

/* "mon", "mon-fri", "fri-mon", "weekdays", "weekends", "daily" -> mask. */
static int parse_days(const char *s, size_t len, unsigned *mask)
{
    if (len == 5 && !strncasecmp(s, "daily", 5)) { *mask = 0x7f; return 0; }
    if (len == 8 && !strncasecmp(s, "weekdays", 8)) { *mask = 0x3e; return 0; }
    if (len == 8 && !strncasecmp(s, "weekends", 8)) { *mask = 0x41; return 0; }
    const char *dash = memchr(s, '-', len);
    int a = day_index(s, dash ? (size_t)(dash - s) : len);
    int b = dash ? day_index(dash + 1, len - (size_t)(dash - s) - 1) : a;
    if (a < 0 || b < 0) return -1;
    *mask = 0;
    for (int d = a;; d = (d + 1) % 7) {
        *mask |= 1u << d;
        if (d == b) break;
    }
    return 0;
}

/* "9:00", "09:30", "24:00" (as an end only) -> minutes after midnight. */
static int parse_clock(const char *s, size_t len, int *min)
{
    int h = 0, m = 0;
    size_t i = 0, hd = 0;
    while (i < len && isdigit((unsigned char)s[i]) && hd < 2) h = h * 10 + (s[i++] - '0'), hd++;
    if (hd == 0 || i + 3 != len || s[i] != ':' || !isdigit((unsigned char)s[i + 1]) ||
        !isdigit((unsigned char)s[i + 2]))
        return -1;
    m = (s[i + 1] - '0') * 10 + (s[i + 2] - '0');
    if (h > 24 || m > 59 || (h == 24 && m != 0)) return -1;
    *min = h * 60 + m;
    return 0;
}

/* The windows as written, for reasons; cut with "..." when too many. */
static void append_text(owner_policy *p, const char *piece)
{
    size_t have = strlen(p->hours_text), room = sizeof p->hours_text;
    if (have >= 3 && !strcmp(p->hours_text + have - 3, "...")) return;
    const char *sep = have ? ", " : "";
    if (have + strlen(sep) + strlen(piece) + 1 <= room) {
        snprintf(p->hours_text + have, room - have, "%s%s", sep, piece);
    } else {
        while (have > 0 && have + 4 > room) p->hours_text[--have] = 0;
        snprintf(p->hours_text + have, room - have, "...");
    }
}

static int parse_window(const char *tok, size_t len, owner_window *w, char *err, size_t errlen)
{
    const char *sp = memchr(tok, ' ', len);
    w->days = 0x7f;
    const char *times = tok;
    size_t tlen = len;
    if (sp) {
        if (parse_days(tok, (size_t)(sp - tok), &w->days)) {
            err_out(err, errlen, "serving hours \"%.*s\": \"%.*s\" is not a day, a range like mon-fri, "
                    "weekdays, weekends or daily", (int)len, tok, (int)(sp - tok), tok);
            return -1;
        }
        times = sp + 1;
        while (*times == ' ' && times < tok + len) times++;
        tlen = len - (size_t)(times - tok);
    }
    const char *dash = memchr(times, '-', tlen);
    if (!dash || parse_clock(times, (size_t)(dash - times), &w->start_min) ||
        parse_clock(dash + 1, tlen - (size_t)(dash - times) - 1, &w->end_min)) {
        err_out(err, errlen, "serving hours \"%.*s\": expected [DAYS ]HH:MM-HH:MM", (int)len, tok);
        return -1;
    }
    if (w->start_min == 1440) {
        err_out(err, errlen, "serving hours \"%.*s\": a window cannot start at 24:00", (int)len, tok);
        return -1;
    }
    if (w->start_min == w->end_min) {
        err_out(err, errlen, "serving hours \"%.*s\": the window is empty (all day is 00:00-24:00)", (int)len, tok);
        return -1;
    }
    return 0;
}

int owner_parse_hours(const char *spec, owner_policy *p, char *err, size_t errlen)
{
    if (!spec || !*spec) {
        err_out(err, errlen, "serving hours are empty");
        return -1;
    }
    const char *s = spec;
    for (;;) {
        const char *comma = strchr(s, ',');
        const char *end = comma ? comma : s + strlen(s);
        while (s < end && isspace((unsigned char)*s)) s++;
        const char *e = end;
        while (e > s && isspace((unsigned char)e[-1])) e--;
        if (e == s) {
            err_out(err, errlen, "serving hours \"%s\": an empty window", spec);
            return -1;
        }
        if (p->nhours >= OWNER_MAX_WINDOWS) {
            err_out(err, errlen, "at most %d serving windows", OWNER_MAX_WINDOWS);
            return -1;
        }
        owner_window w;
        if (parse_window(s, (size_t)(e - s), &w, err, errlen)) return -1;
        p->hours[p->nhours++] = w;
        char piece[64];
        snprintf(piece, sizeof piece, "%.*s", (int)(e - s), s);
        append_text(p, piece);
        if (!comma) break;
        s = comma + 1;
    }
    return 0;
}

int owner_in_hours(const owner_policy *p, int weekday, int minute_of_day)
{
    if (p->nhours == 0) return 1;
    int prev = (weekday + 6) % 7;
    for (int i = 0; i < p->nhours; i++) {
        const owner_window *w = &p->hours[i];
        int today = (w->days >> weekday) & 1, yesterday = (w->days >> prev) & 1;
        if (w->start_min < w->end_min) {
            if (today && minute_of_day >= w->start_min && minute_of_day < w->end_min) return 1;
        } else if ((today && minute_of_day >= w->start_min) || (yesterday && minute_of_day < w->end_min)) {
            return 1;
        }
    }
    return 0;
}

/* ---- the decision ---- */

static int is_own(const owner_input *in, int pid)
{
    for (int i = 0; i < in->nown; i++)
        if (in->own_pids[i] == pid) return 1;
    return 0;
}

typedef struct facts {
    int cond[OWNER_RULES];
    char text[OWNER_RULES][OWNER_REASON_LEN];
} facts;

/* The GPU rules, and what may be offered.  Returns 0 when they could not be
 * judged this time (the GPUs did not answer). */
static int gpu_rules(const owner_policy *p, const owner_input *in, owner_state *st, owner_verdict *out, facts *f)
{
    if (in->ngpus < 0) return 0;
    int lists_known = 1, own_unknown = 0, nforeign = 0, first_gpu = -1, first_pid = 0;
    uint64_t own_measured = 0, used_total = 0, first_used = GPU_USED_UNKNOWN;
    for (int i = 0; i < in->ngpus && i < GPU_MAX; i++) {
        const gpu_info *g = &in->gpus[i];
        used_total += g->total_bytes > g->free_bytes ? g->total_bytes - g->free_bytes : 0;
        out->foreign_procs[i] = -1;
        if (g->nprocs < 0) { lists_known = 0; continue; }
        out->foreign_procs[i] = 0;
        for (int k = 0; k < g->nprocs && k < GPU_MAX_PROCS; k++) {
            const gpu_proc *pr = &g->procs[k];
            if (is_own(in, pr->pid)) {
                if (pr->used_bytes == GPU_USED_UNKNOWN) own_unknown = 1;
                else own_measured += pr->used_bytes;
                continue;
            }
            out->foreign_procs[i]++;
            /* The reason names the largest one. */
            if (nforeign++ == 0 || (pr->used_bytes != GPU_USED_UNKNOWN &&
                                    (first_used == GPU_USED_UNKNOWN || pr->used_bytes > first_used))) {
                first_gpu = g->index;
                first_pid = pr->pid;
                first_used = pr->used_bytes;
            }
        }
    }
    /* What the driver lists is exact; the expectation (the planner's figure
     * for what was started) is the fallback. */
    int measured = lists_known && !own_unknown;
    uint64_t own = measured ? own_measured : in->expected_bytes;
    out->own_bytes = own;
    char a[32], b[32];

    if (nforeign) {
        char more[32] = "";
        if (nforeign > 1) snprintf(more, sizeof more, " (and %d more)", nforeign - 1);
        f->cond[OWNER_FOREIGN_PROCESS] = 1;
        if (first_used == GPU_USED_UNKNOWN)
            snprintf(f->text[OWNER_FOREIGN_PROCESS], OWNER_REASON_LEN, "a foreign process (pid %d) is using GPU %d%s",
                     first_pid, first_gpu, more);
        else
            snprintf(f->text[OWNER_FOREIGN_PROCESS], OWNER_REASON_LEN, "a foreign process (pid %d, %s) is using GPU %d%s",
                     first_pid, size_text(first_used, a, sizeof a), first_gpu, more);
    }

    if (!in->starting) {
        int64_t unexplained = (int64_t)used_total - (int64_t)own;
        if (st->have_baseline && unexplained - st->baseline > (int64_t)p->tolerance_bytes) {
            f->cond[OWNER_FOREIGN_VRAM] = 1;
            snprintf(f->text[OWNER_FOREIGN_VRAM], OWNER_REASON_LEN,
                     "%s of VRAM is in use that this worker's engines do not explain",
                     size_text((uint64_t)(unexplained - st->baseline), a, sizeof a));
        }
        /* An expectation overestimates (the planner keeps a margin), so the
         * level is learnt only from exact figures or with nothing started;
         * else it would sink and later flag the margin as foreign. */
        if ((measured || in->expected_bytes == 0) && (!st->have_baseline || unexplained < st->baseline)) {
            st->baseline = unexplained;
            st->have_baseline = 1;
        }
    }

    if (p->max_vram_bytes && own > p->max_vram_bytes) {
        f->cond[OWNER_OVER_CAP] = 1;
        snprintf(f->text[OWNER_OVER_CAP], OWNER_REASON_LEN, "VRAM use over the owner's cap of %s (%s in use here)",
                 size_text(p->max_vram_bytes, a, sizeof a), size_text(own, b, sizeof b));
    }

    uint64_t left = UINT64_MAX;
    if (p->max_vram_bytes) left = own < p->max_vram_bytes ? p->max_vram_bytes - own : 0;
    for (int i = 0; i < in->ngpus && i < GPU_MAX; i++) {
        uint64_t fr = in->gpus[i].free_bytes < left ? in->gpus[i].free_bytes : left;
        out->offer_free[i] = fr;
        if (left != UINT64_MAX) left -= fr;
    }
    return 1;
}

static int gpu_rule(owner_rule r)
{
    return r == OWNER_FOREIGN_PROCESS || r == OWNER_FOREIGN_VRAM || r == OWNER_OVER_CAP;
}

void owner_decide(const owner_policy *p, const owner_input *in, owner_state *st, int64_t now, owner_verdict *out)
{
    memset(out, 0, sizeof *out);
    for (int i = 0; i < GPU_MAX; i++) out->foreign_procs[i] = -1;
    facts f;
    memset(&f, 0, sizeof f);
    int judged = gpu_rules(p, in, st, out, &f);

    if (p->pause_active_s > 0) {
        if (in->idle_s < 0) {
            f.cond[OWNER_ACTIVITY_UNKNOWN] = 1;
            snprintf(f.text[OWNER_ACTIVITY_UNKNOWN], OWNER_REASON_LEN, "user activity cannot be read: %s",
                     in->idle_why && *in->idle_why ? in->idle_why : "no source");
        } else if (in->idle_s < p->pause_active_s) {
            f.cond[OWNER_USER_ACTIVE] = 1;
            snprintf(f.text[OWNER_USER_ACTIVE], OWNER_REASON_LEN, "the user is active (input %lld s ago)",
                     (long long)in->idle_s);
        }
    }
    int minute = in->hour * 60 + in->minute;
    if (!owner_in_hours(p, in->weekday, minute)) {
        f.cond[OWNER_OUTSIDE_HOURS] = 1;
        snprintf(f.text[OWNER_OUTSIDE_HOURS], OWNER_REASON_LEN, "outside serving hours %s (now %s %02d:%02d)",
                 p->hours_text, day_names[((in->weekday % 7) + 7) % 7], in->hour, in->minute);
    }

    for (int r = OWNER_OK + 1; r < OWNER_RULES; r++) {
        if (gpu_rule((owner_rule)r)) {
            /* Unjudged, a GPU condition stays as it was. */
            if (!judged) continue;
            if (f.cond[r]) {
                st->held[r] = 1;
                st->seen_at[r] = now;
                snprintf(st->reason[r], OWNER_REASON_LEN, "%s", f.text[r]);
            } else if (st->held[r] && now - st->seen_at[r] >= p->settle_ms) {
                st->held[r] = 0;
            }
        } else {
            st->held[r] = f.cond[r];
            snprintf(st->reason[r], OWNER_REASON_LEN, "%s", f.text[r]);
        }
    }
    for (int r = OWNER_OK + 1; r < OWNER_RULES; r++) {
        if (!st->held[r]) continue;
        out->draining = 1;
        out->rule = (owner_rule)r;
        snprintf(out->reason, sizeof out->reason, "%s", st->reason[r]);
        break;
    }
}
