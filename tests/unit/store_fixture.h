/* The fixture the store's unit tests share: a fresh store in a temporary
 * directory for each test, and small helpers. */
#ifndef GPUPOOL_TEST_STORE_FIXTURE_H
#define GPUPOOL_TEST_STORE_FIXTURE_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/store.h"

typedef struct fx {
    char dir[64];
    store *s;
} fx;

static inline int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static inline int setup(void **state) {
    fx *f = calloc(1, sizeof *f);
    assert_non_null(f);
    snprintf(f->dir, sizeof f->dir, "/tmp/gpupool-store-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    char err[256] = "";
    f->s = store_open(f->dir, err, sizeof err);
    assert_non_null(f->s);
    assert_string_equal(err, "");
    *state = f;
    return 0;
}

static inline int teardown(void **state) {
    fx *f = *state;
    store_close(f->s);
    nftw(f->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    free(f);
    return 0;
}

/* Inserts a plain task with the given id, priority and creation time. */
static inline void add(store *s, const char *id, int prio, int64_t created) {
    task_new t = {.id = id, .type = "chat", .model = "llama3", .priority = prio,
                  .input_json = "{\"messages\":[]}", .max_attempts = 3, .created_ms = created};
    assert_int_equal(store_task_insert(s, &t, NULL), STORE_OK);
}

static inline void assert_status(store *s, const char *id, const char *status) {
    task_rec r;
    assert_int_equal(store_task_get(s, id, &r), STORE_OK);
    assert_string_equal(r.status, status);
    task_rec_free(&r);
}

#endif
