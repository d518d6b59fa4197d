/* api/metrics: see metrics.h. */
#include "api/metrics.h"

#include <pthread.h>
#include <string.h>

#define MAX_CODES 16
static const double BUCKETS[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
#define NB (sizeof BUCKETS / sizeof BUCKETS[0])

typedef struct route_stats {
    int codes[MAX_CODES];
    uint64_t counts[MAX_CODES];
    int ncodes;
    uint64_t bucket[NB];
    uint64_t n;
    double sum;
} route_stats;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static route_stats stats[ROUTE_COUNT];

const char *metrics_route_name(metrics_route r)
{
    static const char *names[] = {"chat_completions", "completions", "embeddings", "models",
                                  "tasks_create", "tasks_get", "tasks_list", "tasks_cancel",
                                  "nodes", "plan", "register", "heartbeat", "healthz", "metrics",
                                  "openapi", "preflight", "cache", "batches", "sessions", "budget", "apps", "rollouts", "audit", "webhooks", "files", "other"};
    return r < ROUTE_COUNT ? names[r] : "other";
}

void metrics_observe(metrics_route r, int status, int64_t dur_us)
{
    if (r >= ROUTE_COUNT) r = ROUTE_OTHER;
    double s = (double)dur_us / 1e6;
    pthread_mutex_lock(&mu);
    route_stats *st = &stats[r];
    int i;
    for (i = 0; i < st->ncodes; i++)
        if (st->codes[i] == status) break;
    if (i == st->ncodes && st->ncodes < MAX_CODES) st->codes[st->ncodes++] = status;
    if (i < MAX_CODES) st->counts[i]++;
    for (size_t b = 0; b < NB; b++)
        if (s <= BUCKETS[b]) st->bucket[b]++;
    st->n++;
    st->sum += s;
    pthread_mutex_unlock(&mu);
}

void metrics_header(buf *out, const char *name, const char *type, const char *help)
{
    buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void metrics_render_requests(buf *out)
{
    pthread_mutex_lock(&mu);
    metrics_header(out, "gpupool_http_requests_total", "counter", "HTTP requests answered, by route and status.");
    for (int r = 0; r < ROUTE_COUNT; r++)
        for (int i = 0; i < stats[r].ncodes; i++)
            buf_printf(out, "gpupool_http_requests_total{route=\"%s\",code=\"%d\"} %llu\n",
                       metrics_route_name((metrics_route)r), stats[r].codes[i],
                       (unsigned long long)stats[r].counts[i]);
    metrics_header(out, "gpupool_http_request_duration_seconds", "histogram",
                   "Time from a whole request to its answer (streams: to the first byte).");
    for (int r = 0; r < ROUTE_COUNT; r++) {
        if (!stats[r].n) continue;
        const char *name = metrics_route_name((metrics_route)r);
        for (size_t b = 0; b < NB; b++)
            buf_printf(out, "gpupool_http_request_duration_seconds_bucket{route=\"%s\",le=\"%g\"} %llu\n", name,
                       BUCKETS[b], (unsigned long long)stats[r].bucket[b]);
        buf_printf(out, "gpupool_http_request_duration_seconds_bucket{route=\"%s\",le=\"+Inf\"} %llu\n", name,
                   (unsigned long long)stats[r].n);
        buf_printf(out, "gpupool_http_request_duration_seconds_sum{route=\"%s\"} %.6f\n", name, stats[r].sum);
        buf_printf(out, "gpupool_http_request_duration_seconds_count{route=\"%s\"} %llu\n", name,
                   (unsigned long long)stats[r].n);
    }
    pthread_mutex_unlock(&mu);
}
