/* api/metrics: request counters and latency histograms for GET /metrics,
 * rendered in the Prometheus text format. */
#ifndef GPUPOOL_METRICS_H
#define GPUPOOL_METRICS_H

#include <stdint.h>

#include "util/buf.h"

typedef enum metrics_route {
    ROUTE_CHAT, ROUTE_COMPLETIONS, ROUTE_EMBEDDINGS, ROUTE_MODELS,
    ROUTE_TASKS_CREATE, ROUTE_TASKS_GET, ROUTE_TASKS_LIST, ROUTE_TASKS_CANCEL,
    ROUTE_NODES, ROUTE_PLAN, ROUTE_REGISTER, ROUTE_HEARTBEAT, ROUTE_HEALTH, ROUTE_METRICS,
    ROUTE_OPENAPI, ROUTE_PREFLIGHT, ROUTE_CACHE, ROUTE_BATCHES, ROUTE_SESSIONS, ROUTE_BUDGET, ROUTE_APPS, ROUTE_ROLLOUTS, ROUTE_AUDIT, ROUTE_WEBHOOKS, ROUTE_FILES, ROUTE_OTHER,
    ROUTE_COUNT
} metrics_route;

const char *metrics_route_name(metrics_route r);
void metrics_observe(metrics_route r, int status, int64_t dur_us);
/* Appends gpupool_http_requests_total and gpupool_http_request_duration_seconds. */
void metrics_render_requests(buf *out);
/* Appends one "# HELP/# TYPE" header. */
void metrics_header(buf *out, const char *name, const char *type, const char *help);

#endif
