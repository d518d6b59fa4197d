/* node/cidr: see cidr.h. */
#include <stddef.h>
#include "node/cidr.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_ip(const char *s, int *family, unsigned char out[16])
{
    if (inet_pton(AF_INET, s, out) == 1) { *family = AF_INET; return 0; }
    if (inet_pton(AF_INET6, s, out) == 1) {
        static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (!memcmp(out, mapped, 12)) { memmove(out, out + 12, 4); *family = AF_INET; }
        else *family = AF_INET6;
        return 0;
    }
    return -1;
}

int cidr_parse(const char *text, cidr *out, char *err, size_t errlen)
{
    char host[64];
    const char *slash = strchr(text, '/');
    size_t hl = slash ? (size_t)(slash - text) : strlen(text);
    if (hl == 0 || hl >= sizeof host) { snprintf(err, errlen, "bad address range '%s'", text); return -1; }
    memcpy(host, text, hl);
    host[hl] = 0;
    memset(out, 0, sizeof *out);
    if (parse_ip(host, &out->family, out->addr)) {
        snprintf(err, errlen, "bad address in range '%s'", text);
        return -1;
    }
    int maxbits = out->family == AF_INET ? 32 : 128;
    out->bits = maxbits;
    if (slash) {
        char *e;
        long b = strtol(slash + 1, &e, 10);
        if (*e || e == slash + 1 || b < 0 || b > maxbits) {
            snprintf(err, errlen, "bad prefix length in '%s'", text);
            return -1;
        }
        out->bits = (int)b;
    }
    return 0;
}

int cidr_list_add(cidr_list *l, const char *text, char *err, size_t errlen)
{
    if (l->n >= CIDR_MAX) { snprintf(err, errlen, "too many address ranges (max %d)", CIDR_MAX); return -1; }
    if (cidr_parse(text, &l->items[l->n], err, errlen)) return -1;
    l->n++;
    return 0;
}

static int matches(const cidr *c, int family, const unsigned char *a)
{
    if (c->family != family) return 0;
    int full = c->bits / 8, rest = c->bits % 8;
    if (memcmp(c->addr, a, (size_t)full)) return 0;
    if (!rest) return 1;
    unsigned char mask = (unsigned char)(0xff << (8 - rest));
    return (c->addr[full] & mask) == (a[full] & mask);
}

int cidr_list_allows(const cidr_list *l, const char *ip)
{
    if (!l || l->n == 0) return 1;
    int family;
    unsigned char a[16];
    if (!ip || parse_ip(ip, &family, a)) return 0;
    for (int i = 0; i < l->n; i++)
        if (matches(&l->items[i], family, a)) return 1;
    return 0;
}
