/* Unit tests of worker/filehash: digests, the cache and its invalidation. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "worker/filehash.h"

#define ABC_SHA "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void hashes_and_caches(void **state)
{
    char dir[] = "/tmp/gpupool-fh-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char file[256], cache[256], out[65], err[256];
    snprintf(file, sizeof file, "%s/model.gguf", dir);
    snprintf(cache, sizeof cache, "%s/hashes.json", dir);
    write_file(file, "abc");
    uint64_t bytes = 0;
    assert_int_equal(filehash_get(cache, file, out, &bytes, err, sizeof err), 0);
    assert_string_equal(out, ABC_SHA);
    assert_int_equal(bytes, 3);
    assert_int_equal(access(cache, R_OK), 0);

    /* A cached entry answers without reading the file: prove it by
     * changing the bytes but keeping size and mtime. */
    struct stat st;
    assert_int_equal(stat(file, &st), 0);
    write_file(file, "abd");
    struct timespec times[2] = {st.st_atim, st.st_mtim};
    assert_int_equal(utimensat(AT_FDCWD, file, times, 0), 0);
    assert_int_equal(filehash_get(cache, file, out, NULL, err, sizeof err), 0);
    assert_string_equal(out, ABC_SHA);

    /* A new modification time makes it hash again. */
    times[1].tv_sec -= 100;
    assert_int_equal(utimensat(AT_FDCWD, file, times, 0), 0);
    assert_int_equal(filehash_get(cache, file, out, NULL, err, sizeof err), 0);
    assert_string_not_equal(out, ABC_SHA);
    assert_true(filehash_valid(out));

    /* No cache at all still hashes; a missing file is an error. */
    assert_int_equal(filehash_get(NULL, file, out, NULL, err, sizeof err), 0);
    unlink(file);
    assert_int_equal(filehash_get(cache, file, out, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "model.gguf"));
    unlink(cache);
    rmdir(dir);
}

static void validates_digests(void **state)
{
    assert_true(filehash_valid(ABC_SHA));
    assert_false(filehash_valid("abc"));
    assert_false(filehash_valid(NULL));
    char bad[65];
    memcpy(bad, ABC_SHA, 65);
    bad[10] = 'g';
    assert_false(filehash_valid(bad));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(hashes_and_caches),
        cmocka_unit_test(validates_digests),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
