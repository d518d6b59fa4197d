/* api/webhook_rec: the pure decisions behind webhook deliveries: whether a
 * callback_url is acceptable (and its host), the signature header, and the
 * retry schedule.  No I/O, no state; thread-safe. */
#ifndef GPUPOOL_API_WEBHOOK_REC_H
#define GPUPOOL_API_WEBHOOK_REC_H

#include <stddef.h>
#include <stdint.h>

#define WEBHOOK_URL_MAX 2048

/* 0 when url is an absolute http:// or https:// URL with a host, at most
 * WEBHOOK_URL_MAX bytes, without whitespace, control characters or user
 * info; its host (brackets of an IPv6 literal removed) goes to host.
 * Otherwise -1 with a one-line reason. */
int webhook_url_check(const char *url, char *host, size_t hostlen, char *why, size_t whylen);

/* X-Gpupool-Signature's value: "t=<unix seconds>,v1=<hex HMAC-SHA256 under
 * secret of "<t>.<body>">".  out needs 96 bytes. */
void webhook_signature(const char *secret, int64_t unix_s, const char *body, size_t len, char *out, size_t outlen);

/* The wait before attempt `attempt` + 1 after attempt `attempt` (1-based)
 * failed: base_ms doubled per attempt, at most max_ms, scaled by a jitter
 * factor in [0.5, 1) from u (uniform in [0, 1)) so that receivers that came
 * back are not hit by every retry at once. */
int64_t webhook_backoff_ms(int attempt, int64_t base_ms, int64_t max_ms, double u);

/* "task.succeeded", "batch.completed": the event of an object reaching a
 * final status. */
void webhook_event_name(const char *kind, const char *status, char *out, size_t outlen);

#endif
