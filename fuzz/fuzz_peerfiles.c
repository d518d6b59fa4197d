/* fuzz_peerfiles: libFuzzer target for what a worker parses from a peer
 * before it serves a file, and what the downloader parses from a source:
 * the Range header (an accepted range lies inside the file), Content-Range
 * (what it parses prints back the same way) and the file token (only the
 * right one passes).  Built and run by fuzz/run_peerfiles.sh. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/range.h"
#include "worker/peerauth.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SHA "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 8) return 0;
    uint64_t file_size;
    memcpy(&file_size, data, 8);
    file_size %= (uint64_t)1 << 44;
    char *s = malloc(size - 8 + 1);
    if (!s) abort();
    memcpy(s, data + 8, size - 8);
    s[size - 8] = 0;
    uint64_t a = 0, z = 0;
    if (http_range_parse(s, file_size, &a, &z) == HTTP_RANGE_OK && !(a <= z && z < file_size)) abort();
    uint64_t first, total;
    if (http_content_range_parse(s, &first, &total) == 0 && first != UINT64_MAX && total) {
        char back[96];
        http_content_range(first, first, total, back, sizeof back);
        uint64_t f2, t2;
        if (http_content_range_parse(back, &f2, &t2) || f2 != first || t2 != total) abort();
    }
    char why[200], tok[PEERAUTH_TOKEN_MAX];
    if (peerauth_check("pool-secret", SHA, s, 1700000000, 300, why, sizeof why) == 0) {
        peerauth_make("pool-secret", SHA, atoll(s), tok);
        if (strcmp(tok, s)) abort();
    }
    free(s);
    return 0;
}
