/* ids: see ids.h.  Digests come from OpenSSL's libcrypto. */
#include "util/ids.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

static const char HEX[] = "0123456789abcdef";

static void to_hex(const unsigned char *in, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = HEX[in[i] >> 4];
        out[2 * i + 1] = HEX[in[i] & 15];
    }
    out[2 * n] = 0;
}

void rand_hex(char *out, size_t nbytes)
{
    unsigned char raw[64];
    if (nbytes > sizeof raw) nbytes = sizeof raw;
    size_t got = 0;
    while (got < nbytes) {
        ssize_t r = getrandom(raw + got, nbytes - got, 0);
        if (r > 0) got += (size_t)r;
    }
    to_hex(raw, nbytes, out);
}

void make_id(char *out, size_t outlen, const char *prefix)
{
    char hex[25];
    rand_hex(hex, 12);
    snprintf(out, outlen, "%s_%s", prefix, hex);
}

void sha256_hex(const void *data, size_t len, char out[65])
{
    unsigned char md[32];
    unsigned int mdlen = 0;
    EVP_Digest(data, len, md, &mdlen, EVP_sha256(), NULL);
    to_hex(md, 32, out);
}

int secret_equal(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la != lb) return 0;
    return CRYPTO_memcmp(a, b, la) == 0;
}
