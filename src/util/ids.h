/* ids: random identifiers, secrets and digests. */
#ifndef GPUPOOL_IDS_H
#define GPUPOOL_IDS_H

#include <stddef.h>

/* Fills out with 2*nbytes hex characters of kernel randomness plus NUL. */
void rand_hex(char *out, size_t nbytes);
/* "prefix_" followed by 24 random hex characters; out needs 32+strlen(prefix). */
void make_id(char *out, size_t outlen, const char *prefix);
/* Lower-case hex SHA-256 of data; out needs 65 bytes. */
void sha256_hex(const void *data, size_t len, char out[65]);
/* Lower-case hex SHA-256 of the file at path, read in 1 MiB blocks; 0, or -1
 * with errno set when it cannot be read. */
int sha256_file_hex(const char *path, char out[65]);
/* Lower-case hex HMAC-SHA256 of data under key; out needs 65 bytes. */
void hmac_sha256_hex(const char *key, const void *data, size_t len, char out[65]);
/* Compares two secrets in time independent of where they differ. */
int secret_equal(const char *a, const char *b);

#endif
