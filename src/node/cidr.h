/* node/cidr: address allowlists ("10.0.0.0/8", "192.168.1.7", "fd00::/8").
 * Pure; used to bind node tokens to the addresses workers may come from. */
#ifndef GPUPOOL_CIDR_H
#define GPUPOOL_CIDR_H

#define CIDR_MAX 32

typedef struct cidr {
    int family; /* AF_INET or AF_INET6 */
    unsigned char addr[16];
    int bits;
} cidr;

typedef struct cidr_list {
    cidr items[CIDR_MAX];
    int n;
} cidr_list;

/* Parses one entry; returns 0, or -1 with a one-line reason. */
int cidr_parse(const char *text, cidr *out, char *err, size_t errlen);
int cidr_list_add(cidr_list *l, const char *text, char *err, size_t errlen);
/* An empty list allows everything.  IPv4-mapped IPv6 peers match IPv4 entries. */
int cidr_list_allows(const cidr_list *l, const char *ip);

#endif
