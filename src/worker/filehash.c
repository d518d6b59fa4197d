/* worker/filehash: see filehash.h. */
#include "worker/filehash.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "util/clock.h"
#include "util/err.h"
#include "util/ids.h"

int filehash_settled(int64_t mtime_ns, int64_t stat_ns)
{
    /* A write after the stat would stamp about stat_ns, so a file stamped
     * far from it either way (a clock set back, a copy from a machine whose
     * clock runs ahead) shows such a write too: only a fresh one is racy. */
    int64_t apart = stat_ns > mtime_ns ? stat_ns - mtime_ns : mtime_ns - stat_ns;
    return apart >= FILEHASH_SETTLE_NS;
}

int filehash_valid(const char *s)
{
    if (!s || strlen(s) != 64) return 0;
    for (const char *p = s; *p; p++)
        if (!isxdigit((unsigned char)*p)) return 0;
    return 1;
}

/* What says a file is the one that was hashed.  The inode and ctime catch
 * a file replaced by a rename or rewritten with its old mtime put back;
 * times are in nanoseconds, as the filesystem keeps them. */
static json_t *stamp_of(const struct stat *st)
{
    return json_pack("{s:I,s:I,s:I,s:I,s:I}", "bytes", (json_int_t)st->st_size, "mtime_ns",
                     (json_int_t)timespec_ns(st->st_mtim), "ctime_ns", (json_int_t)timespec_ns(st->st_ctim), "ino",
                     (json_int_t)st->st_ino, "dev", (json_int_t)st->st_dev);
}

static int entry_current(json_t *e, const struct stat *st)
{
    if (!filehash_valid(json_string_value(json_object_get(e, "sha256")))) return 0;
    json_t *now = stamp_of(st);
    const char *k;
    json_t *v;
    int same = 1;
    json_object_foreach(now, k, v) same &= json_integer_value(json_object_get(e, k)) == json_integer_value(v);
    json_decref(now);
    return same && filehash_settled(timespec_ns(st->st_mtim), json_integer_value(json_object_get(e, "stat_ns")));
}

/* Keeps the newest FILEHASH_MAX entries: the object's insertion order is
 * the order they were stored in, so the oldest go first. */
static void trim(json_t *files)
{
    while (json_object_size(files) > FILEHASH_MAX) {
        void *it = json_object_iter(files);
        json_object_del(files, json_object_iter_key(it));
    }
}

static int save(const char *cache_path, json_t *root, char *err, size_t errlen)
{
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", cache_path) >= (int)sizeof tmp)
        return err_out(err, errlen, "%s: the path is too long", cache_path);
    if (json_dump_file(root, tmp, JSON_INDENT(1)) != 0 || rename(tmp, cache_path) != 0) {
        remove(tmp);
        return err_out(err, errlen, "%s: cannot write it", cache_path);
    }
    return 0;
}

/* Hex SHA-256 of path in 1 MiB blocks; 0, -1 with errno set, or -2 when
 * cancelled. */
static int hash_file(const char *path, char out[65], int (*cancelled)(void *), void *ctx)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    unsigned char *block = malloc(1 << 20);
    int rc = md && block ? 0 : -1;
    if (rc == 0) EVP_DigestInit_ex(md, EVP_sha256(), NULL);
    size_t n;
    while (rc == 0 && (n = fread(block, 1, 1 << 20, f)) > 0) {
        if (cancelled && cancelled(ctx)) rc = -2;
        else EVP_DigestUpdate(md, block, n);
    }
    if (rc == 0 && ferror(f)) rc = -1;
    if (rc == 0) {
        unsigned char d[32];
        unsigned dl = 0;
        EVP_DigestFinal_ex(md, d, &dl);
        for (int i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
    }
    int saved = errno;
    EVP_MD_CTX_free(md);
    free(block);
    fclose(f);
    errno = saved;
    return rc;
}

int filehash_get(const char *cache_path, const char *file, char out[65], uint64_t *bytes, char *err, size_t errlen)
{
    return filehash_get_cancellable(cache_path, file, out, bytes, NULL, NULL, err, errlen);
}

/* The cache's "files" object, loaded afresh (*root owns it). */
static json_t *load_files(const char *cache_path, json_t **root)
{
    *root = cache_path ? json_load_file(cache_path, 0, NULL) : NULL;
    if (!json_is_object(*root)) { json_decref(*root); *root = json_object(); }
    json_t *files = json_object_get(*root, "files");
    if (!json_is_object(files)) { files = json_object(); json_object_set_new(*root, "files", files); }
    return files;
}

/* A worker's hasher and its file-sharing thread both use the cache: each
 * read-modify-write of it is whole, and the hashing between is not held. */
static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;

int filehash_get_cancellable(const char *cache_path, const char *file, char out[65], uint64_t *bytes,
                             int (*cancelled)(void *ctx), void *ctx, char *err, size_t errlen)
{
    char abs[PATH_MAX];
    struct stat st;
    struct timespec stat_time; /* wall time, as the file's own times are */
    clock_gettime(CLOCK_REALTIME, &stat_time);
    if (!realpath(file, abs) || stat(abs, &st) != 0) return err_out(err, errlen, "%s: %s", file, strerror(errno));
    if (!S_ISREG(st.st_mode)) return err_out(err, errlen, "%s: not a regular file", file);
    if (bytes) *bytes = (uint64_t)st.st_size;
    json_t *root;
    pthread_mutex_lock(&cache_mu);
    json_t *e = json_object_get(load_files(cache_path, &root), abs);
    int hit = e && entry_current(e, &st);
    if (hit) snprintf(out, 65, "%s", json_string_value(json_object_get(e, "sha256")));
    json_decref(root);
    pthread_mutex_unlock(&cache_mu);
    if (hit) return 0;
    int hrc = hash_file(abs, out, cancelled, ctx);
    if (hrc != 0) {
        if (hrc == -2) return err_out(err, errlen, "cancelled");
        return err_out(err, errlen, "%s: cannot read it: %s", file, strerror(errno));
    }
    if (cache_path) {
        /* Loaded again: what was stored while this file was read stays. */
        pthread_mutex_lock(&cache_mu);
        json_t *files = load_files(cache_path, &root);
        json_object_del(files, abs);
        json_t *entry = stamp_of(&st);
        json_object_set_new(entry, "sha256", json_string(out));
        json_object_set_new(entry, "stat_ns", json_integer((json_int_t)timespec_ns(stat_time)));
        json_object_set_new(files, abs, entry);
        trim(files);
        /* The hash is right even when the cache cannot be written: it is
         * computed again next time. */
        char why[256];
        (void)save(cache_path, root, why, sizeof why);
        json_decref(root);
        pthread_mutex_unlock(&cache_mu);
    }
    return 0;
}
