/* worker/peerauth: see peerauth.h. */
#include "worker/peerauth.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "util/err.h"
#include "util/ids.h"

void peerauth_make(const char *join_token, const char *sha256, int64_t ts, char out[PEERAUTH_TOKEN_MAX])
{
    char msg[128], mac[65];
    int n = snprintf(msg, sizeof msg, "file:%.64s:%" PRId64, sha256, ts);
    hmac_sha256_hex(join_token, msg, (size_t)n, mac);
    snprintf(out, PEERAUTH_TOKEN_MAX, "%" PRId64 ".%s", ts, mac);
}

int peerauth_check(const char *join_token, const char *sha256, const char *bearer, int64_t now_s, int64_t window_s,
                   char *why, size_t whylen)
{
    if (!bearer || !*bearer) return err_out(why, whylen, "no credentials");
    if (!join_token || !*join_token) return err_out(why, whylen, "no join token to check against");
    const char *dot = strchr(bearer, '.');
    if (!dot || dot == bearer || dot - bearer > 12 || strlen(dot + 1) != 64)
        return err_out(why, whylen, "malformed file token");
    int64_t ts = 0;
    for (const char *p = bearer; p < dot; p++) {
        if (!isdigit((unsigned char)*p)) return err_out(why, whylen, "malformed file token");
        ts = ts * 10 + (*p - '0');
    }
    int64_t skew = ts > now_s ? ts - now_s : now_s - ts;
    if (skew > window_s)
        return err_out(why, whylen, "stale file token (%" PRId64 " s off this machine's clock, %" PRId64 " s allowed)",
                       skew, window_s);
    char want[PEERAUTH_TOKEN_MAX];
    peerauth_make(join_token, sha256, ts, want);
    if (!secret_equal(bearer, want)) return err_out(why, whylen, "file token not signed with this pool's join token");
    return 0;
}
