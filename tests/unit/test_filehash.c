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

/* Set as filehash's cancel callback, it counts the blocks read: 0 after a
 * call means the cache answered. */
static int blocks_read;
static int count_blocks(void *ctx)
{
    (void)ctx;
    blocks_read++;
    return 0;
}

static int hash_counting(const char *cache, const char *file, char out[65])
{
    char err[256];
    blocks_read = 0;
    assert_int_equal(filehash_get_cancellable(cache, file, out, NULL, count_blocks, NULL, err, sizeof err), 0);
    return blocks_read;
}

/* A file whose mtime is long past, so its digest may be cached. */
static void write_settled(const char *path, const char *text, time_t mtime)
{
    write_file(path, text);
    struct timespec times[2] = {{mtime, 0}, {mtime, 0}};
    assert_int_equal(utimensat(AT_FDCWD, path, times, 0), 0);
}

/* A directory of its own for a test: a model file, another file and the cache. */
typedef struct scratch {
    char dir[32], file[256], other[256], cache[256];
} scratch;

static void scratch_make(scratch *s)
{
    snprintf(s->dir, sizeof s->dir, "/tmp/gpupool-fh-XXXXXX");
    assert_non_null(mkdtemp(s->dir));
    snprintf(s->file, sizeof s->file, "%s/model.gguf", s->dir);
    snprintf(s->other, sizeof s->other, "%s/model.gguf.tmp", s->dir);
    snprintf(s->cache, sizeof s->cache, "%s/hashes.json", s->dir);
}

static void scratch_remove(const scratch *s)
{
    unlink(s->file);
    unlink(s->other);
    unlink(s->cache);
    rmdir(s->dir);
}

static void hashes_and_caches(void **state)
{
    scratch sc;
    scratch_make(&sc);
    const char *file = sc.file, *other = sc.other, *cache = sc.cache;
    char out[65], err[256];
    time_t old = time(NULL) - 100;
    write_settled(file, "abc", old);
    uint64_t bytes = 0;
    assert_int_equal(filehash_get(cache, file, out, &bytes, err, sizeof err), 0);
    assert_string_equal(out, ABC_SHA);
    assert_int_equal(bytes, 3);
    assert_int_equal(access(cache, R_OK), 0);

    /* Unchanged: the cache answers without reading the file. */
    assert_int_equal(hash_counting(cache, file, out), 0);
    assert_string_equal(out, ABC_SHA);

    /* Other bytes of the same size with the old mtime put back: the
     * changed ctime gives them away. */
    write_settled(file, "abd", old);
    assert_int_equal(hash_counting(cache, file, out), 1);
    assert_string_not_equal(out, ABC_SHA);
    assert_int_equal(hash_counting(cache, file, out), 0);

    /* Another file renamed over it, with the same size and mtime: a new inode. */
    write_settled(other, "abc", old);
    assert_int_equal(rename(other, file), 0);
    assert_int_equal(hash_counting(cache, file, out), 1);
    assert_string_equal(out, ABC_SHA);

    /* A new modification time makes it hash again. */
    write_settled(file, "abd", old - 100);
    assert_int_equal(hash_counting(cache, file, out), 1);
    assert_string_not_equal(out, ABC_SHA);

    /* Stamped far in the future, as a copy from a machine whose clock runs
     * ahead: cached all the same, not read again at every look. */
    write_settled(file, "abc", time(NULL) + 1000);
    assert_int_equal(hash_counting(cache, file, out), 1);
    assert_int_equal(hash_counting(cache, file, out), 0);

    /* No cache at all still hashes; a missing file is an error. */
    assert_int_equal(filehash_get(NULL, file, out, NULL, err, sizeof err), 0);
    unlink(file);
    assert_int_equal(filehash_get(cache, file, out, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "model.gguf"));
    scratch_remove(&sc);
}

/* A file written just now may be written again within the same timestamp
 * tick, its stamps all unchanged: its digest is read again each time
 * until the file has settled. */
static void fresh_file_is_not_trusted(void **state)
{
    scratch sc;
    scratch_make(&sc);
    const char *file = sc.file, *cache = sc.cache;
    char out[65];
    write_file(file, "abc");
    assert_int_equal(hash_counting(cache, file, out), 1);
    assert_int_equal(hash_counting(cache, file, out), 1);
    assert_string_equal(out, ABC_SHA);

    const int64_t s = 1000000000;
    assert_false(filehash_settled(100 * s, 100 * s));
    assert_false(filehash_settled(100 * s, 100 * s + FILEHASH_SETTLE_NS - 1));
    assert_true(filehash_settled(100 * s, 100 * s + FILEHASH_SETTLE_NS));
    /* Stamped in the future (a copy from a machine whose clock runs ahead):
     * a write now would change the stamp, so only a near one is racy. */
    assert_true(filehash_settled(100 * s, 50 * s));
    assert_false(filehash_settled(100 * s, 100 * s - FILEHASH_SETTLE_NS + 1));
    scratch_remove(&sc);
}

/* Set as the cancel callback while one file is read, it stores another's
 * digest in the same cache, as a worker's other thread may. */
static const char *other_cache, *other_file;
static int store_another_meanwhile(void *ctx)
{
    (void)ctx;
    const char *f = other_file;
    other_file = NULL;
    if (f) {
        char out[65], err[256];
        assert_int_equal(filehash_get(other_cache, f, out, NULL, err, sizeof err), 0);
    }
    return 0;
}

static void entries_stored_meanwhile_stay(void **state)
{
    scratch sc;
    scratch_make(&sc);
    const char *a = sc.file, *b = sc.other, *cache = sc.cache;
    char out[65], err[256];
    time_t old = time(NULL) - 100;
    write_settled(a, "abc", old);
    write_settled(b, "abd", old);
    other_cache = cache;
    other_file = b;
    assert_int_equal(filehash_get_cancellable(cache, a, out, NULL, store_another_meanwhile, NULL, err, sizeof err), 0);
    assert_null(other_file);
    assert_int_equal(hash_counting(cache, a, out), 0);
    assert_string_equal(out, ABC_SHA);
    assert_int_equal(hash_counting(cache, b, out), 0);
    scratch_remove(&sc);
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
        cmocka_unit_test(fresh_file_is_not_trusted),
        cmocka_unit_test(entries_stored_meanwhile_stay),
        cmocka_unit_test(validates_digests),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
