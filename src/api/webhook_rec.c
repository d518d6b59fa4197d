/* api/webhook_rec: see webhook_rec.h. */
#include "api/webhook_rec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/ids.h"

int webhook_url_check(const char *url, char *host, size_t hostlen, char *why, size_t whylen)
{
    if (!url || !*url) { snprintf(why, whylen, "it is empty"); return -1; }
    size_t n = strlen(url);
    if (n > WEBHOOK_URL_MAX) { snprintf(why, whylen, "it is longer than %d bytes", WEBHOOK_URL_MAX); return -1; }
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)url[i] <= ' ' || url[i] == 0x7f) {
            snprintf(why, whylen, "it holds whitespace or control characters");
            return -1;
        }
    const char *rest;
    if (!strncasecmp(url, "http://", 7)) rest = url + 7;
    else if (!strncasecmp(url, "https://", 8)) rest = url + 8;
    else { snprintf(why, whylen, "it must start with http:// or https://"); return -1; }
    size_t auth = strcspn(rest, "/?#");
    if (memchr(rest, '@', auth)) { snprintf(why, whylen, "it must not hold user info (user@host)"); return -1; }
    const char *h = rest, *end;
    if (*h == '[') {
        end = memchr(h, ']', auth);
        if (!end) { snprintf(why, whylen, "its IPv6 host has no closing ]"); return -1; }
        h++;
        if (end[1] != ':' && end + 1 != rest + auth) { snprintf(why, whylen, "its host is malformed"); return -1; }
    } else {
        end = memchr(h, ':', auth);
        if (!end) end = rest + auth;
    }
    size_t hl = (size_t)(end - h);
    if (hl == 0) { snprintf(why, whylen, "it has no host"); return -1; }
    if (hl >= hostlen) { snprintf(why, whylen, "its host is too long"); return -1; }
    const char *port = *end == ']' ? end + 1 : end;
    if (*port == ':') {
        char *pe;
        long p = strtol(port + 1, &pe, 10);
        if (pe == port + 1 || pe != rest + auth || p < 1 || p > 65535) {
            snprintf(why, whylen, "its port must be a number from 1 to 65535");
            return -1;
        }
    }
    memcpy(host, h, hl);
    host[hl] = 0;
    return 0;
}

void webhook_signature(const char *secret, int64_t unix_s, const char *body, size_t len, char *out, size_t outlen)
{
    char t[24];
    int tl = snprintf(t, sizeof t, "%lld.", (long long)unix_s);
    char *msg = malloc((size_t)tl + len + 1);
    char mac[65] = "";
    if (msg) {
        memcpy(msg, t, (size_t)tl);
        if (len) memcpy(msg + tl, body, len);
        hmac_sha256_hex(secret, msg, (size_t)tl + len, mac);
        free(msg);
    }
    snprintf(out, outlen, "t=%lld,v1=%s", (long long)unix_s, mac);
}

int64_t webhook_backoff_ms(int attempt, int64_t base_ms, int64_t max_ms, double u)
{
    if (attempt < 1) attempt = 1;
    int64_t d = base_ms;
    for (int i = 1; i < attempt && d < max_ms; i++) d *= 2;
    if (d > max_ms) d = max_ms;
    if (u < 0) u = 0;
    if (u >= 1) u = 0.999999;
    int64_t w = (int64_t)((double)d * (0.5 + u / 2));
    return w > 0 ? w : 1;
}

void webhook_event_name(const char *kind, const char *status, char *out, size_t outlen)
{
    snprintf(out, outlen, "%s.%s", kind, status);
}
