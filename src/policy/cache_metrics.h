/* policy/cache_metrics: the semantic cache's counters in the Prometheus text
 * format, for GET /metrics.  Pure: a cache_stats snapshot in, text out. */
#ifndef GPUPOOL_CACHE_METRICS_H
#define GPUPOOL_CACHE_METRICS_H

#include "policy/cache.h"
#include "util/buf.h"

/* Appends gpupool_cache_lookups_total, _hits_total, _misses_total,
 * _skipped_total, _inserts_total, _removed_total{reason=lru|ttl|replaced|
 * invalidated}, _hit_ratio (hits / lookups since start, 0 before any),
 * _entries, _bytes and _max_bytes, each with its HELP and TYPE lines.
 * Returns 0, or -1 when memory ran out. */
int cache_metrics_render(const cache_stats *st, buf *out);

#endif
