/* policy/cache_metrics: see cache_metrics.h.  The ratio is there besides the
 * counters so that a person can read a hit rate straight off /metrics;
 * dashboards should still compute rate(hits) / rate(lookups). */
#include "policy/cache_metrics.h"

static int metric(buf *out, const char *name, const char *type, const char *help, double v)
{
    return buf_printf(out, "# HELP gpupool_cache_%s %s\n# TYPE gpupool_cache_%s %s\ngpupool_cache_%s %.17g\n",
                      name, help, name, type, name, v);
}

int cache_metrics_render(const cache_stats *st, buf *out)
{
    int rc = 0;
    rc |= metric(out, "lookups_total", "counter", "Semantic cache lookups.", (double)st->lookups);
    rc |= metric(out, "hits_total", "counter", "Lookups answered from the cache.", (double)st->hits);
    rc |= metric(out, "misses_total", "counter", "Lookups that found nothing similar enough.",
                 (double)st->misses);
    rc |= metric(out, "skipped_total", "counter", "Requests not looked up (no-cache, temperature, shape).",
                 (double)st->skipped);
    rc |= metric(out, "inserts_total", "counter", "Answers stored.", (double)st->inserts);
    rc |= buf_printf(out, "# HELP gpupool_cache_removed_total Entries removed, by reason.\n"
                          "# TYPE gpupool_cache_removed_total counter\n"
                          "gpupool_cache_removed_total{reason=\"lru\"} %llu\n"
                          "gpupool_cache_removed_total{reason=\"ttl\"} %llu\n"
                          "gpupool_cache_removed_total{reason=\"replaced\"} %llu\n"
                          "gpupool_cache_removed_total{reason=\"invalidated\"} %llu\n",
                     (unsigned long long)st->evicted, (unsigned long long)st->expired,
                     (unsigned long long)st->replaced, (unsigned long long)st->invalidated);
    rc |= metric(out, "hit_ratio", "gauge", "Hits per lookup since start.",
                 st->lookups ? (double)st->hits / (double)st->lookups : 0.0);
    rc |= metric(out, "entries", "gauge", "Entries held.", (double)st->entries);
    rc |= metric(out, "bytes", "gauge", "Bytes the entries count against the bound.", (double)st->bytes);
    rc |= metric(out, "max_bytes", "gauge", "The bound on those bytes.", (double)st->max_bytes);
    return rc ? -1 : 0;
}
