/* worker/peerauth: how one pool member proves membership to another when it
 * asks for a file, without asking the coordinator.
 *
 *   Authorization: Bearer <ts>.<hex HMAC-SHA256(join_token, "file:" sha256 ":" ts)>
 *
 * ts is Unix time in seconds; a token is accepted within window_s of the
 * holder's clock either way, so the machines' clocks must agree to within
 * that (NTP does).  A token names one file, so a captured one opens that
 * file only, and only until it goes stale.  Pure: the caller passes the
 * time. */
#ifndef GPUPOOL_PEERAUTH_H
#define GPUPOOL_PEERAUTH_H

#include <stddef.h>
#include <stdint.h>

#define PEERAUTH_WINDOW_S 300
#define PEERAUTH_TOKEN_MAX 96

/* The bearer token for sha256 (lower-case hex) at ts. */
void peerauth_make(const char *join_token, const char *sha256, int64_t ts, char out[PEERAUTH_TOKEN_MAX]);
/* 0 when bearer is a token for sha256 within window_s of now_s; else -1
 * and why names the reason (missing, malformed, stale, wrong). */
int peerauth_check(const char *join_token, const char *sha256, const char *bearer, int64_t now_s, int64_t window_s,
                   char *why, size_t whylen);

#endif
