/* worker/residency: see residency.h. */
#include "worker/residency.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

/* A year: longer keep-alives are as good as forever, and stay far from
 * overflowing when added to a monotonic time. */
#define MAX_MS (366LL * 86400 * 1000)

/* A number without sign, exponent or hex ("2", "2.5", ".5"), which strtod
 * would take too loosely; the end in *end.  -1 when there is none. */
static int plain_number(const char *p, double *v, const char **end)
{
    double x = 0, scale = 0;
    int digits = 0;
    for (; (*p >= '0' && *p <= '9') || (*p == '.' && scale == 0); p++) {
        if (*p == '.') { scale = 1; continue; }
        digits++;
        if (scale) x += (*p - '0') * (scale /= 10);
        else x = x * 10 + (*p - '0');
    }
    *v = x;
    *end = p;
    return digits ? 0 : -1;
}

int res_parse_duration(const char *s, int64_t *ms)
{
    if (!s) return -1;
    while (isspace((unsigned char)*s)) s++;
    /* Ollama: any negative duration keeps the model loaded. */
    int negative = *s == '-';
    if (negative) s++;
    if (!*s) return -1;
    double total = 0;
    const char *p = s;
    int parts = 0;
    while (*p) {
        double v;
        const char *end;
        if (plain_number(p, &v, &end)) return -1;
        p = end;
        double unit;
        if (!*p && parts == 0) unit = 1000; /* a bare number is seconds */
        else if (!strncmp(p, "ms", 2)) unit = 1, p += 2;
        else if (*p == 's') unit = 1000, p++;
        else if (*p == 'm') unit = 60000, p++;
        else if (*p == 'h') unit = 3600000, p++;
        else return -1;
        total += v * unit;
        parts++;
    }
    if (negative) {
        *ms = RES_FOREVER;
        return 0;
    }
    if (total > (double)MAX_MS) total = (double)MAX_MS;
    *ms = (int64_t)llround(total);
    return 0;
}

int res_keep_alive(const json_t *v, int64_t *ms, char *err, size_t errlen)
{
    if (!v || json_is_null(v)) return 0;
    if (json_is_number(v)) {
        double d = json_number_value(v);
        if (!isfinite(d)) return err_out(err, errlen, "keep_alive must be a finite number of seconds");
        if (d < 0) *ms = RES_FOREVER;
        else *ms = d * 1000 > (double)MAX_MS ? MAX_MS : (int64_t)llround(d * 1000);
        return 1;
    }
    if (json_is_string(v) && res_parse_duration(json_string_value(v), ms) == 0) return 1;
    return err_out(err, errlen, "keep_alive must be seconds or a duration such as \"10m\", \"1h30m\" or \"-1\"");
}

int res_expired(const res_engine *e, int64_t now)
{
    if (!e->running || e->busy || e->pinned || e->keep_alive_ms < 0) return 0;
    return now - e->last_used_ms >= e->keep_alive_ms;
}

int64_t res_next_expiry(const res_engine *e, int n, int64_t now)
{
    int64_t best = -1;
    for (int i = 0; i < n; i++) {
        if (!e[i].running || e[i].busy || e[i].pinned || e[i].keep_alive_ms < 0) continue;
        int64_t left = e[i].last_used_ms + e[i].keep_alive_ms - now;
        if (left < 0) left = 0;
        if (best < 0 || left < best) best = left;
    }
    return best;
}

static int evictable(const res_engine *e)
{
    return e->running && !e->busy && !e->pinned;
}

uint64_t res_evictable(const res_engine *e, int n)
{
    uint64_t sum = 0;
    for (int i = 0; i < n; i++)
        if (evictable(&e[i])) sum += e[i].bytes;
    return sum;
}

int res_pick_victims(const res_engine *e, int n, uint64_t need, uint64_t free_bytes, int *victims)
{
    if (need <= free_bytes) return 0;
    if (free_bytes + res_evictable(e, n) < need) return -1;
    int k = 0;
    uint64_t have = free_bytes;
    while (have < need) {
        int pick = -1;
        for (int i = 0; i < n; i++) {
            if (!evictable(&e[i])) continue;
            int taken = 0;
            for (int j = 0; j < k; j++) taken |= victims[j] == i;
            if (taken) continue;
            if (pick < 0 || e[i].last_used_ms < e[pick].last_used_ms) pick = i;
        }
        if (pick < 0) return -1; /* cannot happen: the sum said enough */
        victims[k++] = pick;
        have += e[pick].bytes;
    }
    return k;
}
