/* worker/filehash: see filehash.h. */
#include "worker/filehash.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "util/err.h"
#include "util/ids.h"

int filehash_valid(const char *s)
{
    if (!s || strlen(s) != 64) return 0;
    for (const char *p = s; *p; p++)
        if (!isxdigit((unsigned char)*p)) return 0;
    return 1;
}

static int entry_current(json_t *e, uint64_t size, int64_t mtime)
{
    return json_integer_value(json_object_get(e, "bytes")) == (json_int_t)size &&
           json_integer_value(json_object_get(e, "mtime")) == (json_int_t)mtime &&
           filehash_valid(json_string_value(json_object_get(e, "sha256")));
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

int filehash_get(const char *cache_path, const char *file, char out[65], uint64_t *bytes, char *err, size_t errlen)
{
    char abs[PATH_MAX];
    struct stat st;
    if (!realpath(file, abs) || stat(abs, &st) != 0) return err_out(err, errlen, "%s: %s", file, strerror(errno));
    if (!S_ISREG(st.st_mode)) return err_out(err, errlen, "%s: not a regular file", file);
    if (bytes) *bytes = (uint64_t)st.st_size;
    json_t *root = cache_path ? json_load_file(cache_path, 0, NULL) : NULL;
    if (!json_is_object(root)) { json_decref(root); root = json_object(); }
    json_t *files = json_object_get(root, "files");
    if (!json_is_object(files)) { files = json_object(); json_object_set_new(root, "files", files); }
    json_t *e = json_object_get(files, abs);
    if (e && entry_current(e, (uint64_t)st.st_size, (int64_t)st.st_mtime)) {
        snprintf(out, 65, "%s", json_string_value(json_object_get(e, "sha256")));
        json_decref(root);
        return 0;
    }
    if (sha256_file_hex(abs, out) != 0) {
        json_decref(root);
        return err_out(err, errlen, "%s: cannot read it: %s", file, strerror(errno));
    }
    if (cache_path) {
        json_object_del(files, abs);
        json_object_set_new(files, abs, json_pack("{s:s,s:I,s:I}", "sha256", out, "bytes", (json_int_t)st.st_size,
                                                 "mtime", (json_int_t)st.st_mtime));
        trim(files);
        /* The hash is right even when the cache cannot be written: it is
         * computed again next time. */
        char why[256];
        (void)save(cache_path, root, why, sizeof why);
    }
    json_decref(root);
    return 0;
}
