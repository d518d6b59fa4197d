/* fuzz/replay: runs one fuzz target's LLVMFuzzerTestOneInput without
 * libFuzzer, as `make test` does under ASan and UBSan, so the targets keep
 * building and their seeds and past crashes keep passing on every change.
 *
 * Usage: build-asan/fuzz/fuzz_NAME DIR...  Every regular file in the
 * directories (the seeds fuzz/run_NAME.sh writes, and fuzz/regress/NAME: the
 * inputs that once crashed the target) is one test.  Each file runs whole,
 * cut at 32 points, and with 64 single bytes changed (the same changes every
 * run: a file's name seeds them).  Each run gets a copy of exactly its size,
 * so a read past the end is an ASan report.  The fuzz scripts search; this
 * only replays. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REPLAY_MAX (1u << 20)
#define CUTS 32
#define CHANGES 64

static void run_copy(const uint8_t *data, size_t n)
{
    uint8_t *copy = malloc(n ? n : 1);
    assert_non_null(copy);
    if (n) memcpy(copy, data, n);
    LLVMFuzzerTestOneInput(copy, n);
    free(copy);
}

static uint64_t next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void replay_file(void **state)
{
    const char *path = *state;
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s", path);
    uint8_t *data = malloc(REPLAY_MAX);
    assert_non_null(data);
    size_t n = fread(data, 1, REPLAY_MAX, f);
    fclose(f);
    run_copy(data, n);
    for (int k = 0; k < CUTS; k++) run_copy(data, n * (size_t)k / CUTS);
    uint64_t seed = 1469598103934665603ull; /* FNV-1a of the name */
    for (const char *p = path; *p; p++) seed = (seed ^ (unsigned char)*p) * 1099511628211ull;
    uint8_t *changed = malloc(n ? n : 1);
    assert_non_null(changed);
    for (int k = 0; n && k < CHANGES; k++) {
        memcpy(changed, data, n);
        uint64_t r = next(&seed);
        changed[r % n] = (uint8_t)(r >> 32);
        run_copy(changed, n);
    }
    free(changed);
    free(data);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const struct CMUnitTest *)a)->name, ((const struct CMUnitTest *)b)->name);
}

int main(int argc, char **argv)
{
    struct CMUnitTest *tests = NULL;
    size_t ntests = 0;
    for (int i = 1; i < argc; i++) {
        DIR *d = opendir(argv[i]);
        if (!d) continue; /* a target may have no past crashes */
        struct dirent *e;
        while ((e = readdir(d))) {
            size_t len = strlen(argv[i]) + strlen(e->d_name) + 2;
            char *path = malloc(len);
            struct stat st;
            if (!path) return 2;
            snprintf(path, len, "%s/%s", argv[i], e->d_name);
            if (stat(path, &st) || !S_ISREG(st.st_mode)) {
                free(path);
                continue;
            }
            struct CMUnitTest *more = realloc(tests, (ntests + 1) * sizeof *tests);
            if (!more) return 2;
            tests = more;
            tests[ntests++] = (struct CMUnitTest){.name = path, .test_func = replay_file, .initial_state = path};
        }
        closedir(d);
    }
    if (!ntests) {
        fprintf(stderr, "%s: no inputs in the directories given: nothing was replayed\n", argv[0]);
        return 1;
    }
    qsort(tests, ntests, sizeof *tests, by_name);
    const char *group = strrchr(argv[0], '/');
    int rc = _cmocka_run_group_tests(group ? group + 1 : argv[0], tests, ntests, NULL, NULL);
    for (size_t i = 0; i < ntests; i++) free((void *)tests[i].name);
    free(tests);
    return rc;
}
