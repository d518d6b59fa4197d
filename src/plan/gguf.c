/* plan/gguf: the GGUF header reader.  One pass over the front of the file:
 * magic, version, counts, metadata, tensor infos; then the checks that need
 * the whole picture (alignment, data bounds).  Reads go through a small
 * bounded reader so that every length the file claims is compared with the
 * bytes that actually remain before anything is allocated for it. */
#include "plan/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "plan/ggml_types.h"

#define RD_BUFSZ (1u << 20)

/* A reader over either memory or a file descriptor.  For a file, size comes
 * from fstat, so "how much is left" is known up front either way. */
typedef struct rd {
    const uint8_t *mem;
    int fd;
    uint8_t *fbuf;
    size_t flen, fpos;      /* valid bytes in fbuf, read position in fbuf */
    uint64_t pos, size;
    char *err;
    size_t errlen;
    bool failed;
} rd;

__attribute__((format(printf, 2, 3))) static void fail(rd *r, const char *fmt, ...)
{
    if (r->failed) return;  /* the first error is the one that names the cause */
    r->failed = true;
    if (!r->err || !r->errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err, r->errlen, fmt, ap);
    va_end(ap);
    /* Names come from the file: keep the message on one line, whatever
     * bytes they hold. */
    for (char *c = r->err; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
}

static bool rd_need(rd *r, uint64_t n, const char *what)
{
    if (r->failed) return false;
    if (n > r->size - r->pos) {
        fail(r, "truncated: %s needs %" PRIu64 " bytes at offset %" PRIu64 " but the file ends at %" PRIu64,
             what, n, r->pos, r->size);
        return false;
    }
    return true;
}

static bool rd_fill(rd *r)
{
    ssize_t got;
    do got = read(r->fd, r->fbuf, RD_BUFSZ);
    while (got < 0 && errno == EINTR);
    if (got <= 0) {
        fail(r, "read error at offset %" PRIu64 ": %s", r->pos, got < 0 ? strerror(errno) : "unexpected end of file");
        return false;
    }
    r->flen = (size_t)got;
    r->fpos = 0;
    return true;
}

static bool rd_bytes(rd *r, void *dst, uint64_t n, const char *what)
{
    if (!rd_need(r, n, what)) return false;
    if (r->mem) {
        memcpy(dst, r->mem + r->pos, n);
        r->pos += n;
        return true;
    }
    uint8_t *d = dst;
    while (n) {
        if (r->fpos == r->flen && !rd_fill(r)) return false;
        size_t take = r->flen - r->fpos;
        if (take > n) take = (size_t)n;
        memcpy(d, r->fbuf + r->fpos, take);
        r->fpos += take;
        r->pos += take;
        d += take;
        n -= take;
    }
    return true;
}

static bool rd_skip(rd *r, uint64_t n, const char *what)
{
    if (!rd_need(r, n, what)) return false;
    if (!r->mem) {
        if (n <= r->flen - r->fpos) {
            r->fpos += (size_t)n;
        } else {
            /* Past the buffer: seek, and let the next read refill. */
            if (lseek(r->fd, (off_t)(r->pos + n), SEEK_SET) < 0) {
                fail(r, "seek error at offset %" PRIu64 ": %s", r->pos + n, strerror(errno));
                return false;
            }
            r->flen = r->fpos = 0;
        }
    }
    r->pos += n;
    return true;
}

/* GGUF is little-endian; decode explicitly so the reader is too. */
static uint64_t le(const uint8_t *p, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static bool rd_u32(rd *r, uint32_t *out, const char *what)
{
    uint8_t b[4];
    if (!rd_bytes(r, b, 4, what)) return false;
    *out = (uint32_t)le(b, 4);
    return true;
}

static bool rd_u64(rd *r, uint64_t *out, const char *what)
{
    uint8_t b[8];
    if (!rd_bytes(r, b, 8, what)) return false;
    *out = le(b, 8);
    return true;
}

/* Size in bytes of a scalar of this type; 0 for string, array and unknown. */
static unsigned scalar_size(uint32_t t)
{
    switch (t) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
    case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_FLOAT32: return 4;
    case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64: case GGUF_TYPE_FLOAT64: return 8;
    default: return 0;
    }
}

const char *gguf_type_name(uint32_t t)
{
    static const char *names[GGUF_TYPE_COUNT] = {"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
                                                 "bool", "string", "array", "uint64", "int64", "float64"};
    return t < GGUF_TYPE_COUNT ? names[t] : "unknown";
}

static void decode_scalar(uint32_t t, const uint8_t *p, gguf_kv *kv)
{
    unsigned n = scalar_size(t);
    uint64_t raw = le(p, n);
    switch (t) {
    case GGUF_TYPE_INT8: kv->v.i = (int8_t)raw; break;
    case GGUF_TYPE_INT16: kv->v.i = (int16_t)raw; break;
    case GGUF_TYPE_INT32: kv->v.i = (int32_t)raw; break;
    case GGUF_TYPE_INT64: kv->v.i = (int64_t)raw; break;
    case GGUF_TYPE_FLOAT32: {
        uint32_t w = (uint32_t)raw;
        float fl;
        memcpy(&fl, &w, 4);
        kv->v.f = fl;
        break;
    }
    case GGUF_TYPE_FLOAT64: memcpy(&kv->v.f, &raw, 8); break;
    default: kv->v.u = raw; break;
    }
}

/* A string: u64 length then bytes.  keep_max bounds what is copied out;
 * longer strings are skipped (*out stays NULL) but their length is kept. */
static bool rd_string(rd *r, char **out, uint64_t *len_out, uint64_t keep_max, const char *what)
{
    uint64_t len;
    *out = NULL;
    if (!rd_u64(r, &len, what)) return false;
    if (!rd_need(r, len, what)) return false;
    if (len_out) *len_out = len;
    if (len > keep_max) return rd_skip(r, len, what);
    char *s = malloc(len + 1);
    if (!s) {
        fail(r, "out of memory reading %s", what);
        return false;
    }
    if (!rd_bytes(r, s, len, what)) {
        free(s);
        return false;
    }
    s[len] = 0;
    *out = s;
    return true;
}

/* Skip one array's elements (used for string arrays and nested arrays),
 * keeping nothing.  depth bounds recursion on arrays of arrays. */
static bool skip_array_body(rd *r, uint32_t et, uint64_t n, unsigned depth, const char *what)
{
    if (depth > GGUF_MAX_ARRAY_DEPTH) {
        fail(r, "%s: arrays nested deeper than %d", what, GGUF_MAX_ARRAY_DEPTH);
        return false;
    }
    unsigned es = scalar_size(et);
    if (es) {
        if (n > UINT64_MAX / es) {
            fail(r, "%s: array of %" PRIu64 " elements is too large", what, n);
            return false;
        }
        return rd_skip(r, n * es, what);
    }
    if (et == GGUF_TYPE_STRING) {
        /* Each element is at least its 8-byte length: refuse counts the
         * remaining bytes cannot hold before looping over them. */
        if (!rd_need(r, n > UINT64_MAX / 8 ? UINT64_MAX : n * 8, what)) return false;
        for (uint64_t i = 0; i < n; i++) {
            uint64_t len;
            if (!rd_u64(r, &len, what) || !rd_skip(r, len, what)) return false;
        }
        return true;
    }
    if (et == GGUF_TYPE_ARRAY) {
        if (!rd_need(r, n > UINT64_MAX / 12 ? UINT64_MAX : n * 12, what)) return false;
        for (uint64_t i = 0; i < n; i++) {
            uint32_t it;
            uint64_t in;
            if (!rd_u32(r, &it, what) || !rd_u64(r, &in, what)) return false;
            if (it >= GGUF_TYPE_COUNT) {
                fail(r, "%s: nested array has unknown element type %" PRIu32, what, it);
                return false;
            }
            if (!skip_array_body(r, it, in, depth + 1, what)) return false;
        }
        return true;
    }
    fail(r, "%s: array has unknown element type %" PRIu32, what, et);
    return false;
}

static bool read_value(rd *r, gguf_kv *kv, const char *what)
{
    uint8_t b[8];
    unsigned n = scalar_size(kv->type);
    if (n) {
        if (!rd_bytes(r, b, n, what)) return false;
        decode_scalar(kv->type, b, kv);
        return true;
    }
    if (kv->type == GGUF_TYPE_STRING) return rd_string(r, &kv->str, &kv->str_len, GGUF_KEEP_STRING, what);
    if (kv->type != GGUF_TYPE_ARRAY) {
        fail(r, "%s: unknown value type %" PRIu32, what, kv->type);
        return false;
    }
    if (!rd_u32(r, &kv->arr_type, what) || !rd_u64(r, &kv->arr_n, what)) return false;
    if (kv->arr_type >= GGUF_TYPE_COUNT) {
        fail(r, "%s: array has unknown element type %" PRIu32, what, kv->arr_type);
        return false;
    }
    unsigned es = scalar_size(kv->arr_type);
    if (es && kv->arr_n <= GGUF_KEEP_ARRAY) {
        uint64_t bytes = kv->arr_n * es;
        if (!rd_need(r, bytes, what)) return false;
        kv->arr = malloc(bytes ? bytes : 1);
        if (!kv->arr) {
            fail(r, "out of memory reading %s", what);
            return false;
        }
        return rd_bytes(r, kv->arr, bytes, what);
    }
    return skip_array_body(r, kv->arr_type, kv->arr_n, 1, what);
}

/* --- duplicate detection: an open-addressing set of names ---------------
 * Slots hold indices (+1), not pointers: the arrays they index into grow by
 * realloc while the set is in use. */

typedef struct nameset {
    uint64_t *slot;
    size_t cap;
    const gguf_file *f;
    bool tensors;   /* names are tensor names, else metadata keys */
} nameset;

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static bool nameset_init(nameset *ns, uint64_t n, const gguf_file *f, bool tensors)
{
    size_t cap = 16;
    while (cap < n * 2) cap *= 2;
    ns->slot = calloc(cap, sizeof *ns->slot);
    ns->cap = cap;
    ns->f = f;
    ns->tensors = tensors;
    return ns->slot != NULL;
}

static const char *nameset_name(const nameset *ns, uint64_t i)
{
    return ns->tensors ? ns->f->tensors[i].name : ns->f->kv[i].key;
}

/* Adds entry idx; false if an equal name is already present. */
static bool nameset_add(nameset *ns, uint64_t idx)
{
    const char *name = nameset_name(ns, idx);
    size_t i = hash_str(name) & (ns->cap - 1);
    while (ns->slot[i]) {
        if (!strcmp(nameset_name(ns, ns->slot[i] - 1), name)) return false;
        i = (i + 1) & (ns->cap - 1);
    }
    ns->slot[i] = idx + 1;
    return true;
}

/* --- the file ------------------------------------------------------------ */

static void kv_clear(gguf_kv *kv)
{
    free(kv->key);
    free(kv->str);
    free(kv->arr);
}

void gguf_free(gguf_file *f)
{
    if (!f) return;
    for (uint64_t i = 0; i < f->n_kv; i++) kv_clear(&f->kv[i]);
    free(f->kv);
    free(f->tensors);
    free(f);
}

/* Grow an array one element at a time (doubling), so memory follows what
 * was actually read rather than what the file claims. */
static bool grow(rd *r, void **arr, uint64_t *cap, uint64_t need, size_t elem, const char *what)
{
    if (need <= *cap) return true;
    uint64_t nc = *cap ? *cap * 2 : 16;
    while (nc < need) nc *= 2;
    void *p = realloc(*arr, nc * elem);
    if (!p) {
        fail(r, "out of memory reading %s", what);
        return false;
    }
    *arr = p;
    *cap = nc;
    return true;
}

static bool read_header(rd *r, gguf_file *f, uint64_t *n_kv, uint64_t *n_tensors)
{
    uint8_t magic[4];
    if (!rd_bytes(r, magic, 4, "the magic number")) return false;
    if (memcmp(magic, "GGUF", 4)) {
        fail(r, "not a GGUF file (magic bytes %02x %02x %02x %02x, want \"GGUF\")", magic[0], magic[1], magic[2],
             magic[3]);
        return false;
    }
    if (!rd_u32(r, &f->version, "the version")) return false;
    if (f->version == 1) {
        fail(r, "GGUF version 1 is not supported (re-convert the model with a current llama.cpp)");
        return false;
    }
    if (f->version != 2 && f->version != 3) {
        uint32_t v = f->version;
        uint32_t swapped = (v >> 24) | ((v >> 8) & 0xff00) | ((v << 8) & 0xff0000) | (v << 24);
        if (swapped >= 1 && swapped <= 3)
            fail(r, "big-endian GGUF files are not supported");
        else
            fail(r, "unsupported GGUF version %" PRIu32 " (versions 2 and 3 are)", v);
        return false;
    }
    if (!rd_u64(r, n_tensors, "the tensor count") || !rd_u64(r, n_kv, "the metadata count")) return false;
    if (*n_tensors > GGUF_MAX_TENSORS) {
        fail(r, "tensor count %" PRIu64 " is over the limit of %u", *n_tensors, GGUF_MAX_TENSORS);
        return false;
    }
    if (*n_kv > GGUF_MAX_KV) {
        fail(r, "metadata count %" PRIu64 " is over the limit of %u", *n_kv, GGUF_MAX_KV);
        return false;
    }
    return true;
}

static bool read_metadata(rd *r, gguf_file *f, uint64_t n_kv)
{
    uint64_t cap = 0;
    nameset seen;
    /* The minimum entry is 8 (key length) + 4 (type) + 1 (smallest value). */
    if (!rd_need(r, n_kv * 13, "the metadata entries")) return false;
    if (!nameset_init(&seen, n_kv, f, false)) {
        fail(r, "out of memory");
        return false;
    }
    bool ok = true;
    for (uint64_t i = 0; ok && i < n_kv; i++) {
        char what[96];
        snprintf(what, sizeof what, "metadata entry %" PRIu64 " (key)", i);
        if (!(ok = grow(r, (void **)&f->kv, &cap, i + 1, sizeof *f->kv, what))) break;
        gguf_kv *kv = &f->kv[i];
        memset(kv, 0, sizeof *kv);
        uint64_t klen = 0;
        if (!(ok = rd_string(r, &kv->key, &klen, GGUF_MAX_KEY, what))) break;
        f->n_kv = i + 1;  /* from here on the entry is ours to free */
        if (!kv->key) {
            fail(r, "metadata entry %" PRIu64 ": key of %" PRIu64 " bytes is over the limit of %u", i, klen,
                 GGUF_MAX_KEY);
            ok = false;
            break;
        }
        if (strlen(kv->key) != klen) {
            fail(r, "metadata entry %" PRIu64 ": key contains a NUL byte", i);
            ok = false;
            break;
        }
        if (!nameset_add(&seen, i)) {
            fail(r, "duplicate metadata key '%s'", kv->key);
            ok = false;
            break;
        }
        snprintf(what, sizeof what, "metadata '%.60s'", kv->key);
        if (!(ok = rd_u32(r, &kv->type, what))) break;
        if (kv->type >= GGUF_TYPE_COUNT) {
            fail(r, "metadata '%.60s' has unknown value type %" PRIu32, kv->key, kv->type);
            ok = false;
            break;
        }
        ok = read_value(r, kv, what);
    }
    free(seen.slot);
    return ok;
}

static bool read_tensor_infos(rd *r, gguf_file *f, uint64_t n_tensors)
{
    uint64_t cap = 0;
    nameset seen;
    /* Minimum info: 8+1 name, 4 n_dims, 8 one dim, 4 type, 8 offset. */
    if (!rd_need(r, n_tensors * 33, "the tensor infos")) return false;
    if (!nameset_init(&seen, n_tensors, f, true)) {
        fail(r, "out of memory");
        return false;
    }
    bool ok = true;
    for (uint64_t i = 0; ok && i < n_tensors; i++) {
        char what[96];
        snprintf(what, sizeof what, "tensor info %" PRIu64, i);
        if (!(ok = grow(r, (void **)&f->tensors, &cap, i + 1, sizeof *f->tensors, what))) break;
        gguf_tensor *t = &f->tensors[i];
        memset(t, 0, sizeof *t);
        uint64_t nlen;
        if (!(ok = rd_u64(r, &nlen, what))) break;
        if (nlen >= GGUF_MAX_NAME) {
            fail(r, "tensor info %" PRIu64 ": name of %" PRIu64 " bytes is over ggml's limit of %d", i, nlen,
                 GGUF_MAX_NAME - 1);
            ok = false;
            break;
        }
        if (!(ok = rd_bytes(r, t->name, nlen, what))) break;
        t->name[nlen] = 0;
        f->n_tensors = i + 1;
        if (strlen(t->name) != nlen) {
            fail(r, "tensor info %" PRIu64 ": name contains a NUL byte", i);
            ok = false;
            break;
        }
        if (!nameset_add(&seen, i)) {
            fail(r, "duplicate tensor name '%s'", t->name);
            ok = false;
            break;
        }
        snprintf(what, sizeof what, "tensor '%s'", t->name);
        if (!(ok = rd_u32(r, &t->n_dims, what))) break;
        if (t->n_dims == 0 || t->n_dims > GGUF_MAX_DIMS) {
            fail(r, "tensor '%s' has %" PRIu32 " dimensions (1 to %d allowed)", t->name, t->n_dims, GGUF_MAX_DIMS);
            ok = false;
            break;
        }
        uint64_t nel = 1;
        for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
            t->ne[d] = 1;
            if (d < t->n_dims && !(ok = rd_u64(r, &t->ne[d], what))) break;
            /* ggml holds dimensions as int64_t and their product likewise. */
            if (t->ne[d] > (uint64_t)INT64_MAX || (t->ne[d] && nel > (uint64_t)INT64_MAX / t->ne[d])) {
                fail(r, "tensor '%s' has too many elements (dimension %" PRIu32 " = %" PRIu64 ")", t->name, d,
                     t->ne[d]);
                ok = false;
                break;
            }
            nel *= t->ne[d];
        }
        if (!ok) break;
        if (!(ok = rd_u32(r, &t->type, what))) break;
        const ggml_type_info *ti = ggml_type_get(t->type);
        if (!ti) {
            fail(r, "tensor '%s' has unknown ggml type %" PRIu32, t->name, t->type);
            ok = false;
            break;
        }
        uint64_t row;
        if (!ggml_type_nbytes(t->type, t->ne[0], &row)) {
            fail(r, "tensor '%s': row of %" PRIu64 " is not a whole number of %s blocks (%" PRIu32 ")", t->name,
                 t->ne[0], ti->name, ti->blck);
            ok = false;
            break;
        }
        uint64_t rows = t->ne[1] * t->ne[2] * t->ne[3];  /* bounded by nel above */
        if (rows && row > UINT64_MAX / rows) {
            fail(r, "tensor '%s' is too large", t->name);
            ok = false;
            break;
        }
        t->nbytes = row * rows;
        ok = rd_u64(r, &t->offset, what);
    }
    free(seen.slot);
    return ok;
}

/* The checks that need every tensor info and the data start. */
static bool check_layout(rd *r, gguf_file *f)
{
    const gguf_kv *al = gguf_find(f, "general.alignment");
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    if (al) {
        uint64_t a;
        if (al->type != GGUF_TYPE_UINT32 || !gguf_kv_uint(al, &a)) {
            fail(r, "general.alignment must be a uint32 (it is %s)", gguf_type_name(al->type));
            return false;
        }
        if (a == 0 || (a & (a - 1))) {
            fail(r, "general.alignment %" PRIu64 " is not a power of two", a);
            return false;
        }
        f->alignment = (uint32_t)a;
    }
    uint64_t pad = (f->alignment - r->pos % f->alignment) % f->alignment;
    f->data_offset = r->pos + pad;
    if (f->data_offset > f->file_size) {
        fail(r, "truncated: tensor data would start at offset %" PRIu64 " but the file ends at %" PRIu64,
             f->data_offset, f->file_size);
        return false;
    }
    uint64_t data_size = f->file_size - f->data_offset;
    f->tensor_bytes = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        if (t->offset % f->alignment) {
            fail(r, "tensor '%s' offset %" PRIu64 " is not a multiple of the alignment %" PRIu32, t->name, t->offset,
                 f->alignment);
            return false;
        }
        if (t->offset > data_size || t->nbytes > data_size - t->offset) {
            fail(r, "truncated: tensor '%s' (%" PRIu64 " bytes at data offset %" PRIu64
                    ") runs past the end of the file (%" PRIu64 " bytes of data)",
                 t->name, t->nbytes, t->offset, data_size);
            return false;
        }
        f->tensor_bytes += t->nbytes;  /* each <= data_size, at most 1e6 of them: no overflow */
    }
    return true;
}

static gguf_file *parse(rd *r)
{
    gguf_file *f = calloc(1, sizeof *f);
    if (!f) {
        fail(r, "out of memory");
        return NULL;
    }
    f->file_size = r->size;
    uint64_t n_kv, n_tensors;
    if (read_header(r, f, &n_kv, &n_tensors) && read_metadata(r, f, n_kv) && read_tensor_infos(r, f, n_tensors) &&
        check_layout(r, f))
        return f;
    gguf_free(f);
    return NULL;
}

gguf_file *gguf_read_mem(const void *data, size_t len, char *err, size_t errlen)
{
    rd r = {.mem = data, .fd = -1, .size = len, .err = err, .errlen = errlen};
    if (err && errlen) err[0] = 0;
    if (!data && len) {
        fail(&r, "no data");
        return NULL;
    }
    static const uint8_t empty[1];
    if (!data) r.mem = empty;
    return parse(&r);
}

gguf_file *gguf_read_file(const char *path, char *err, size_t errlen)
{
    rd r = {.fd = -1, .err = err, .errlen = errlen};
    if (err && errlen) err[0] = 0;
    r.fd = open(path, O_RDONLY | O_CLOEXEC);
    if (r.fd < 0) {
        fail(&r, "cannot open: %s", strerror(errno));
        return NULL;
    }
    struct stat st;
    gguf_file *f = NULL;
    if (fstat(r.fd, &st) < 0) {
        fail(&r, "cannot stat: %s", strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
        fail(&r, "not a regular file");
    } else if (!(r.fbuf = malloc(RD_BUFSZ))) {
        fail(&r, "out of memory");
    } else {
        r.size = (uint64_t)st.st_size;
        f = parse(&r);
    }
    free(r.fbuf);
    close(r.fd);
    return f;
}

/* --- lookups -------------------------------------------------------------- */

const gguf_kv *gguf_find(const gguf_file *f, const char *key)
{
    for (uint64_t i = 0; f && i < f->n_kv; i++)
        if (!strcmp(f->kv[i].key, key)) return &f->kv[i];
    return NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name)
{
    for (uint64_t i = 0; f && i < f->n_tensors; i++)
        if (!strcmp(f->tensors[i].name, name)) return &f->tensors[i];
    return NULL;
}

static bool int_to_uint(uint32_t type, uint64_t u, int64_t i, uint64_t *out)
{
    switch (type) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_UINT16: case GGUF_TYPE_UINT32: case GGUF_TYPE_UINT64: case GGUF_TYPE_BOOL:
        *out = u;
        return true;
    case GGUF_TYPE_INT8: case GGUF_TYPE_INT16: case GGUF_TYPE_INT32: case GGUF_TYPE_INT64:
        if (i < 0) return false;
        *out = (uint64_t)i;
        return true;
    default:
        return false;
    }
}

bool gguf_kv_uint(const gguf_kv *kv, uint64_t *out)
{
    return kv && int_to_uint(kv->type, kv->v.u, kv->v.i, out);
}

bool gguf_kv_float(const gguf_kv *kv, double *out)
{
    if (!kv) return false;
    if (kv->type == GGUF_TYPE_FLOAT32 || kv->type == GGUF_TYPE_FLOAT64) {
        *out = kv->v.f;
        return true;
    }
    uint64_t u;
    if (kv->type == GGUF_TYPE_INT8 || kv->type == GGUF_TYPE_INT16 || kv->type == GGUF_TYPE_INT32 ||
        kv->type == GGUF_TYPE_INT64) {
        *out = (double)kv->v.i;
        return true;
    }
    if (!gguf_kv_uint(kv, &u)) return false;
    *out = (double)u;
    return true;
}

const char *gguf_kv_str(const gguf_kv *kv)
{
    return kv && kv->type == GGUF_TYPE_STRING ? kv->str : NULL;
}

static bool arr_elem(const gguf_kv *kv, uint64_t i, gguf_kv *tmp)
{
    if (!kv || kv->type != GGUF_TYPE_ARRAY || !kv->arr || i >= kv->arr_n) return false;
    unsigned es = scalar_size(kv->arr_type);
    memset(tmp, 0, sizeof *tmp);
    tmp->type = kv->arr_type;
    decode_scalar(kv->arr_type, (const uint8_t *)kv->arr + i * es, tmp);
    return true;
}

bool gguf_arr_uint(const gguf_kv *kv, uint64_t i, uint64_t *out)
{
    gguf_kv tmp;
    return arr_elem(kv, i, &tmp) && gguf_kv_uint(&tmp, out);
}

bool gguf_arr_float(const gguf_kv *kv, uint64_t i, double *out)
{
    gguf_kv tmp;
    return arr_elem(kv, i, &tmp) && gguf_kv_float(&tmp, out);
}
