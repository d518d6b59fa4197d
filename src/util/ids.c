/* ids: see ids.h.  Digests come from OpenSSL's libcrypto. */
#include "util/ids.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
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

int sha256_file_hex(const char *path, char out[65])
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    int rc = md && EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1 ? 0 : -1;
    size_t cap = 1 << 20, n;
    unsigned char *block = rc ? NULL : malloc(cap);
    if (!block) rc = -1;
    while (!rc && (n = fread(block, 1, cap, f)) > 0)
        if (EVP_DigestUpdate(md, block, n) != 1) rc = -1;
    if (!rc && ferror(f)) { rc = -1; errno = EIO; }
    unsigned char digest[32];
    unsigned int len = 0;
    if (!rc && EVP_DigestFinal_ex(md, digest, &len) != 1) rc = -1;
    if (!rc) to_hex(digest, 32, out);
    int saved = errno;
    free(block);
    EVP_MD_CTX_free(md);
    fclose(f);
    errno = saved;
    return rc;
}

void hmac_sha256_hex(const char *key, const void *data, size_t len, char out[65])
{
    unsigned char mac[32];
    unsigned int maclen = 0;
    HMAC(EVP_sha256(), key, (int)strlen(key), data, len, mac, &maclen);
    to_hex(mac, 32, out);
}

int secret_equal(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la != lb) return 0;
    return CRYPTO_memcmp(a, b, la) == 0;
}
