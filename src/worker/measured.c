/* worker/measured: see measured.h. */
#include "worker/measured.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/clock.h"
#include "util/err.h"
#include "util/opts.h"

int measured_key_for(const char *file, int ctx, int parallel, const char *ctk, const char *ctv, int flash_attn,
                     measured_key *k, char *err, size_t errlen)
{
    memset(k, 0, sizeof *k);
    char abs[PATH_MAX];
    struct stat st;
    if (!realpath(file, abs) || stat(abs, &st) != 0)
        return err_out(err, errlen, "%s: %s", file, strerror(errno));
    size_t n = strlen(abs);
    if (n >= sizeof k->file) return err_out(err, errlen, "%s: the path is too long", file);
    memcpy(k->file, abs, n + 1);
    k->file_bytes = (uint64_t)st.st_size;
    k->file_mtime_ns = timespec_ns(st.st_mtim);
    k->ctx = ctx;
    k->parallel = parallel;
    snprintf(k->cache_type_k, sizeof k->cache_type_k, "%s", ctk ? ctk : "f16");
    snprintf(k->cache_type_v, sizeof k->cache_type_v, "%s", ctv ? ctv : "f16");
    k->flash_attn = flash_attn != 0;
    return 0;
}

static int same_key(const measured_key *a, const measured_key *b)
{
    return !strcmp(a->file, b->file) && a->file_bytes == b->file_bytes && a->file_mtime_ns == b->file_mtime_ns &&
           a->ctx == b->ctx && a->parallel == b->parallel && !strcmp(a->cache_type_k, b->cache_type_k) &&
           !strcmp(a->cache_type_v, b->cache_type_v) && a->flash_attn == b->flash_attn;
}

static uint64_t u64(json_t *o, const char *k)
{
    json_int_t v = json_integer_value(json_object_get(o, k));
    return v > 0 ? (uint64_t)v : 0;
}

static const char *str(json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

static int from_json(json_t *o, measured_entry *e)
{
    memset(e, 0, sizeof *e);
    if (strlen(str(o, "file")) >= sizeof e->key.file || strlen(str(o, "cache_type_k")) >= sizeof e->key.cache_type_k ||
        strlen(str(o, "cache_type_v")) >= sizeof e->key.cache_type_v)
        return -1;
    snprintf(e->key.file, sizeof e->key.file, "%s", str(o, "file"));
    e->key.file_bytes = u64(o, "file_bytes");
    e->key.file_mtime_ns = (int64_t)u64(o, "file_mtime_ns");
    e->key.ctx = (int)u64(o, "ctx");
    e->key.parallel = (int)u64(o, "parallel");
    snprintf(e->key.cache_type_k, sizeof e->key.cache_type_k, "%s", str(o, "cache_type_k"));
    snprintf(e->key.cache_type_v, sizeof e->key.cache_type_v, "%s", str(o, "cache_type_v"));
    e->key.flash_attn = json_is_true(json_object_get(o, "flash_attn"));
    e->model_bytes = u64(o, "model_bytes");
    e->kv_bytes = u64(o, "kv_bytes");
    e->compute_bytes = u64(o, "compute_bytes");
    e->host_bytes = u64(o, "host_bytes");
    e->measured_at = (int64_t)u64(o, "measured_at");
    return e->key.file[0] && e->model_bytes ? 0 : -1;
}

static json_t *to_json(const measured_entry *e)
{
    json_t *o = measured_json(e);
    json_object_set_new(o, "file", json_string(e->key.file));
    json_object_set_new(o, "file_bytes", json_integer((json_int_t)e->key.file_bytes));
    json_object_set_new(o, "file_mtime_ns", json_integer((json_int_t)e->key.file_mtime_ns));
    json_object_set_new(o, "ctx", json_integer(e->key.ctx));
    json_object_set_new(o, "parallel", json_integer(e->key.parallel));
    json_object_set_new(o, "cache_type_k", json_string(e->key.cache_type_k));
    json_object_set_new(o, "cache_type_v", json_string(e->key.cache_type_v));
    json_object_set_new(o, "flash_attn", json_boolean(e->key.flash_attn));
    json_object_set_new(o, "measured_at", json_integer((json_int_t)e->measured_at));
    return o;
}

/* The file's entries array (a new reference), an empty one when there is no
 * file; NULL with a reason when it cannot be read. */
static json_t *load(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno == ENOENT) return json_array();
        err_out(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    json_error_t je;
    json_t *root = json_loadf(f, 0, &je);
    fclose(f);
    json_t *list = json_object_get(root, "entries");
    if (!json_is_array(list)) {
        json_decref(root);
        err_out(err, errlen, "%s: not a measurements file (%s)", path, root ? "no entries" : je.text);
        return NULL;
    }
    json_incref(list);
    json_decref(root);
    return list;
}

int measured_lookup(const char *path, const measured_key *k, measured_entry *out, char *err, size_t errlen)
{
    json_t *list = load(path, err, errlen);
    if (!list) return -1;
    int found = 0;
    size_t i;
    json_t *o;
    json_array_foreach(list, i, o) {
        measured_entry e;
        if (from_json(o, &e) == 0 && same_key(&e.key, k)) {
            *out = e;
            found = 1;
        }
    }
    json_decref(list);
    return found;
}

int measured_store(const char *path, const measured_entry *e, char *err, size_t errlen)
{
    json_t *list = load(path, err, errlen);
    if (!list) list = json_array(); /* an unreadable file is replaced, not kept failing */
    json_t *keep = json_array();
    size_t i;
    json_t *o;
    json_array_foreach(list, i, o) {
        measured_entry old;
        if (from_json(o, &old) == 0 && !same_key(&old.key, &e->key)) json_array_append(keep, o);
    }
    json_decref(list);
    while (json_array_size(keep) >= MEASURED_MAX) json_array_remove(keep, 0); /* the oldest first */
    json_array_append_new(keep, to_json(e));
    json_t *root = json_pack("{s:i, s:o}", "version", 1, "entries", keep);
    char *text = json_dumps(root, JSON_INDENT(1));
    json_decref(root);
    int rc = text ? write_file_atomic(path, text) : -1;
    free(text);
    if (rc) return err_out(err, errlen, "cannot write %s: %s", path, strerror(errno));
    return 0;
}

uint64_t measured_total(const measured_entry *e)
{
    return e->model_bytes + e->kv_bytes + e->compute_bytes;
}

json_t *measured_json(const measured_entry *e)
{
    return json_pack("{s:I, s:I, s:I, s:I, s:I}", "model_bytes", (json_int_t)e->model_bytes, "kv_bytes",
                     (json_int_t)e->kv_bytes, "compute_bytes", (json_int_t)e->compute_bytes, "total_bytes",
                     (json_int_t)measured_total(e), "host_bytes", (json_int_t)e->host_bytes);
}
