/* gguf_writer: a test-only GGUF writer (header-only, static functions).
 *
 * Tests describe a model (metadata + tensor infos with real shapes) and get
 * either the bytes in memory or a file whose tensor data region is a hole
 * made with ftruncate: a "70 GB" model costs no disk and no time, and the
 * reader's end-of-file checks still see the real size.  Kept independent of
 * the reader so the two cannot share a misreading of the format. */
#ifndef GPUPOOL_TESTS_GGUF_WRITER_H
#define GPUPOOL_TESTS_GGUF_WRITER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Each test uses a different subset. */
#define GW_FN static __attribute__((unused))

typedef struct gw_bytes {
    uint8_t *p;
    size_t len, cap;
} gw_bytes;

typedef struct gw {
    uint32_t version;
    uint32_t alignment;
    uint64_t n_kv, n_tensors;
    gw_bytes kv, ti;
    uint64_t data_size;     /* next tensor offset */
} gw;

GW_FN void gw_put(gw_bytes *b, const void *p, size_t n)
{
    if (b->len + n > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 4096;
        while (nc < b->len + n) nc *= 2;
        b->p = realloc(b->p, nc);
        if (!b->p) abort();
        b->cap = nc;
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
}

GW_FN void gw_le(gw_bytes *b, uint64_t v, unsigned n)
{
    uint8_t t[8];
    for (unsigned i = 0; i < n; i++) t[i] = (uint8_t)(v >> (8 * i));
    gw_put(b, t, n);
}

GW_FN void gw_str(gw_bytes *b, const char *s)
{
    gw_le(b, strlen(s), 8);
    gw_put(b, s, strlen(s));
}

GW_FN void gw_init(gw *w, uint32_t version)
{
    memset(w, 0, sizeof *w);
    w->version = version;
    w->alignment = 32;
}

GW_FN void gw_free(gw *w)
{
    free(w->kv.p);
    free(w->ti.p);
    memset(w, 0, sizeof *w);
}

/* GGUF value types, spelled out here rather than taken from the reader. */
enum { GW_U8, GW_I8, GW_U16, GW_I16, GW_U32, GW_I32, GW_F32, GW_BOOL, GW_STR, GW_ARR, GW_U64, GW_I64, GW_F64 };

GW_FN void gw_key(gw *w, const char *key, uint32_t type)
{
    w->n_kv++;
    gw_str(&w->kv, key);
    gw_le(&w->kv, type, 4);
}

/* A scalar of any numeric type, given as its raw bits. */
GW_FN void gw_kv_raw(gw *w, const char *key, uint32_t type, uint64_t bits, unsigned size)
{
    gw_key(w, key, type);
    gw_le(&w->kv, bits, size);
}

GW_FN void gw_kv_u32(gw *w, const char *key, uint32_t v) { gw_kv_raw(w, key, GW_U32, v, 4); }
GW_FN void gw_kv_u64(gw *w, const char *key, uint64_t v) { gw_kv_raw(w, key, GW_U64, v, 8); }
GW_FN void gw_kv_i32(gw *w, const char *key, int32_t v) { gw_kv_raw(w, key, GW_I32, (uint32_t)v, 4); }
GW_FN void gw_kv_bool(gw *w, const char *key, bool v) { gw_kv_raw(w, key, GW_BOOL, v, 1); }

GW_FN void gw_kv_f32(gw *w, const char *key, float v)
{
    uint32_t bits;
    memcpy(&bits, &v, 4);
    gw_kv_raw(w, key, GW_F32, bits, 4);
}

GW_FN void gw_kv_f64(gw *w, const char *key, double v)
{
    uint64_t bits;
    memcpy(&bits, &v, 8);
    gw_kv_raw(w, key, GW_F64, bits, 8);
}

GW_FN void gw_kv_str(gw *w, const char *key, const char *v)
{
    gw_key(w, key, GW_STR);
    gw_str(&w->kv, v);
}

GW_FN void gw_kv_arr_u32(gw *w, const char *key, const uint32_t *v, uint64_t n)
{
    gw_key(w, key, GW_ARR);
    gw_le(&w->kv, GW_U32, 4);
    gw_le(&w->kv, n, 8);
    for (uint64_t i = 0; i < n; i++) gw_le(&w->kv, v[i], 4);
}

GW_FN void gw_kv_arr_bool(gw *w, const char *key, const bool *v, uint64_t n)
{
    gw_key(w, key, GW_ARR);
    gw_le(&w->kv, GW_BOOL, 4);
    gw_le(&w->kv, n, 8);
    for (uint64_t i = 0; i < n; i++) gw_le(&w->kv, v[i], 1);
}

GW_FN void gw_kv_arr_str(gw *w, const char *key, const char *const *v, uint64_t n)
{
    gw_key(w, key, GW_ARR);
    gw_le(&w->kv, GW_STR, 4);
    gw_le(&w->kv, n, 8);
    for (uint64_t i = 0; i < n; i++) gw_str(&w->kv, v[i]);
}

/* ggml type sizes, again independent of the reader's table. */
GW_FN uint64_t gw_type_bytes(uint32_t type, uint64_t n)
{
    switch (type) {
    case 0: return n * 4;             /* F32 */
    case 1: case 30: return n * 2;    /* F16, BF16 */
    case 2: return n / 32 * 18;       /* Q4_0 */
    case 8: return n / 32 * 34;       /* Q8_0 */
    case 12: return n / 256 * 144;    /* Q4_K */
    case 14: return n / 256 * 210;    /* Q6_K */
    default: abort();
    }
}

/* A tensor info; the offset follows the previous tensor, padded. */
GW_FN void gw_tensor(gw *w, const char *name, uint32_t type, uint32_t n_dims, uint64_t ne0, uint64_t ne1,
                      uint64_t ne2)
{
    uint64_t ne[3] = {ne0, ne1, ne2};
    w->n_tensors++;
    gw_str(&w->ti, name);
    gw_le(&w->ti, n_dims, 4);
    uint64_t nel = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        gw_le(&w->ti, ne[d], 8);
        nel *= ne[d];
    }
    gw_le(&w->ti, type, 4);
    gw_le(&w->ti, w->data_size, 8);
    w->data_size += gw_type_bytes(type, nel);
    w->data_size = (w->data_size + w->alignment - 1) / w->alignment * w->alignment;
}

/* The header bytes, padded to the alignment (the caller frees). */
GW_FN uint8_t *gw_header(gw *w, size_t *len)
{
    gw_bytes b = {0};
    gw_put(&b, "GGUF", 4);
    gw_le(&b, w->version, 4);
    gw_le(&b, w->n_tensors, 8);
    gw_le(&b, w->n_kv, 8);
    gw_put(&b, w->kv.p ? w->kv.p : (uint8_t *)"", w->kv.len);
    gw_put(&b, w->ti.p ? w->ti.p : (uint8_t *)"", w->ti.len);
    while (b.len % w->alignment) gw_put(&b, "", 1);
    *len = b.len;
    return b.p;
}

/* Header plus zero-filled data, all in memory (small models only). */
GW_FN uint8_t *gw_image(gw *w, size_t *len)
{
    size_t hl;
    uint8_t *h = gw_header(w, &hl);
    uint8_t *img = calloc(1, hl + w->data_size + 1);
    if (!img) abort();
    memcpy(img, h, hl);
    free(h);
    *len = hl + w->data_size;
    return img;
}

/* Write to a fresh temp file: the header, then a hole for the data.
 * Returns the path (static storage, one per call site's buffer). */
GW_FN void gw_write_file(gw *w, char *path, size_t pathlen)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(path, pathlen, "%s/gguf_test_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0) abort();
    size_t hl;
    uint8_t *h = gw_header(w, &hl);
    if (write(fd, h, hl) != (ssize_t)hl) abort();
    free(h);
    if (ftruncate(fd, (off_t)(hl + w->data_size)) < 0) abort();
    close(fd);
}

/* The tensors of a llama-style decoder, with real shapes.  n_expert > 0
 * stacks Mixtral-style experts; tied leaves out output.weight. */
typedef struct gw_llama {
    uint32_t n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim, n_vocab;
    uint32_t n_expert;
    uint32_t wtype;         /* type of the big matrices */
    bool tied;
} gw_llama;

GW_FN void gw_llama_tensors(gw *w, const gw_llama *c)
{
    char n[64];
    uint64_t q = (uint64_t)c->n_head * c->head_dim, kv = (uint64_t)c->n_head_kv * c->head_dim;
    gw_tensor(w, "token_embd.weight", c->wtype, 2, c->n_embd, c->n_vocab, 1);
    for (uint32_t il = 0; il < c->n_layer; il++) {
#define T(suffix, type, nd, a, b, cc)                          \
    do {                                                        \
        snprintf(n, sizeof n, "blk.%u.%s", il, suffix);         \
        gw_tensor(w, n, type, nd, a, b, cc);                    \
    } while (0)
        T("attn_norm.weight", 0, 1, c->n_embd, 1, 1);
        T("attn_q.weight", c->wtype, 2, c->n_embd, q, 1);
        T("attn_k.weight", c->wtype, 2, c->n_embd, kv, 1);
        T("attn_v.weight", c->wtype, 2, c->n_embd, kv, 1);
        T("attn_output.weight", c->wtype, 2, q, c->n_embd, 1);
        T("ffn_norm.weight", 0, 1, c->n_embd, 1, 1);
        if (c->n_expert) {
            T("ffn_gate_inp.weight", 0, 2, c->n_embd, c->n_expert, 1);
            T("ffn_gate_exps.weight", c->wtype, 3, c->n_embd, c->n_ff, c->n_expert);
            T("ffn_up_exps.weight", c->wtype, 3, c->n_embd, c->n_ff, c->n_expert);
            T("ffn_down_exps.weight", c->wtype, 3, c->n_ff, c->n_embd, c->n_expert);
        } else {
            T("ffn_gate.weight", c->wtype, 2, c->n_embd, c->n_ff, 1);
            T("ffn_up.weight", c->wtype, 2, c->n_embd, c->n_ff, 1);
            T("ffn_down.weight", c->wtype, 2, c->n_ff, c->n_embd, 1);
        }
#undef T
    }
    gw_tensor(w, "output_norm.weight", 0, 1, c->n_embd, 1, 1);
    if (!c->tied) gw_tensor(w, "output.weight", c->wtype, 2, c->n_embd, c->n_vocab, 1);
}

/* The matching metadata for architecture `arch`. */
GW_FN void gw_llama_kv(gw *w, const char *arch, const gw_llama *c, uint32_t ctx_train)
{
    char k[128];
#define K(suffix) (snprintf(k, sizeof k, "%s.%s", arch, suffix), k)
    gw_kv_str(w, "general.architecture", arch);
    gw_kv_str(w, "general.name", "test model");
    gw_kv_u32(w, "general.file_type", 1);
    gw_kv_u32(w, K("block_count"), c->n_layer);
    gw_kv_u32(w, K("context_length"), ctx_train);
    gw_kv_u32(w, K("embedding_length"), c->n_embd);
    gw_kv_u32(w, K("feed_forward_length"), c->n_ff);
    gw_kv_u32(w, K("attention.head_count"), c->n_head);
    gw_kv_u32(w, K("attention.head_count_kv"), c->n_head_kv);
    gw_kv_u32(w, K("attention.key_length"), c->head_dim);
    gw_kv_u32(w, K("attention.value_length"), c->head_dim);
    gw_kv_f32(w, K("attention.layer_norm_rms_epsilon"), 1e-5f);
    gw_kv_u32(w, K("vocab_size"), c->n_vocab);
    if (c->n_expert) {
        gw_kv_u32(w, K("expert_count"), c->n_expert);
        gw_kv_u32(w, K("expert_used_count"), 2);
    }
#undef K
}

#endif
