/* test_gguf: the ggml type table and the GGUF reader — every value type,
 * both versions, alignment, and one-line errors for truncated, malformed and
 * hostile files. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#include "plan/ggml_types.h"
#include "plan/gguf.h"
#include "unit/gguf_writer.h"

#define GiB (1024.0 * 1024 * 1024)

/* --- ggml types ----------------------------------------------------------- */

static void test_type_table(void **state)
{
    (void)state;
    static const struct { uint32_t t; const char *name; uint32_t blck, size; } want[] = {
        {GGML_TYPE_F32, "f32", 1, 4},        {GGML_TYPE_F16, "f16", 1, 2},        {GGML_TYPE_BF16, "bf16", 1, 2},
        {GGML_TYPE_Q4_0, "q4_0", 32, 18},    {GGML_TYPE_Q4_1, "q4_1", 32, 20},    {GGML_TYPE_Q5_0, "q5_0", 32, 22},
        {GGML_TYPE_Q5_1, "q5_1", 32, 24},    {GGML_TYPE_Q8_0, "q8_0", 32, 34},    {GGML_TYPE_Q8_1, "q8_1", 32, 36},
        {GGML_TYPE_Q2_K, "q2_K", 256, 84},   {GGML_TYPE_Q3_K, "q3_K", 256, 110},  {GGML_TYPE_Q4_K, "q4_K", 256, 144},
        {GGML_TYPE_Q5_K, "q5_K", 256, 176},  {GGML_TYPE_Q6_K, "q6_K", 256, 210},  {GGML_TYPE_Q8_K, "q8_K", 256, 292},
        {GGML_TYPE_IQ2_XXS, "iq2_xxs", 256, 66}, {GGML_TYPE_IQ2_XS, "iq2_xs", 256, 74},
        {GGML_TYPE_IQ3_XXS, "iq3_xxs", 256, 98}, {GGML_TYPE_IQ1_S, "iq1_s", 256, 50},
        {GGML_TYPE_IQ4_NL, "iq4_nl", 32, 18},    {GGML_TYPE_IQ3_S, "iq3_s", 256, 110},
        {GGML_TYPE_IQ2_S, "iq2_s", 256, 82},     {GGML_TYPE_IQ4_XS, "iq4_xs", 256, 136},
        {GGML_TYPE_IQ1_M, "iq1_m", 256, 56},     {GGML_TYPE_TQ1_0, "tq1_0", 256, 54},
        {GGML_TYPE_TQ2_0, "tq2_0", 256, 66},     {GGML_TYPE_MXFP4, "mxfp4", 32, 17},
        {GGML_TYPE_I8, "i8", 1, 1}, {GGML_TYPE_I16, "i16", 1, 2}, {GGML_TYPE_I32, "i32", 1, 4},
        {GGML_TYPE_I64, "i64", 1, 8}, {GGML_TYPE_F64, "f64", 1, 8},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const ggml_type_info *t = ggml_type_get(want[i].t);
        assert_non_null(t);
        assert_string_equal(t->name, want[i].name);
        assert_int_equal(t->blck, want[i].blck);
        assert_int_equal(t->size, want[i].size);
        assert_int_equal(ggml_type_from_name(want[i].name), want[i].t);
    }
    /* Removed ids are not types. */
    for (uint32_t t = 4; t <= 5; t++) assert_null(ggml_type_get(t));
    for (uint32_t t = 31; t <= 33; t++) assert_null(ggml_type_get(t));
    for (uint32_t t = 36; t <= 38; t++) assert_null(ggml_type_get(t));
    assert_null(ggml_type_get(GGML_TYPE_COUNT));
    assert_int_equal(ggml_type_from_name("Q8_0"), GGML_TYPE_Q8_0);
    assert_int_equal(ggml_type_from_name("nope"), -1);
}

static void test_type_bytes(void **state)
{
    (void)state;
    uint64_t b;
    /* 7.0 billion weights: 13.04 GiB at F16, 3.67 GiB at Q4_0. */
    assert_true(ggml_type_nbytes(GGML_TYPE_F16, 7000000000ull, &b));
    assert_int_equal(b, 14000000000ull);
    assert_true(fabs((double)b / GiB - 13.04) < 0.005);
    assert_true(ggml_type_nbytes(GGML_TYPE_Q4_0, 7000000000ull, &b));
    assert_int_equal(b, 7000000000ull / 32 * 18);
    assert_true(fabs((double)b / GiB - 3.67) < 0.005);
    /* q8_0 is 34/32 bytes per element, not 1. */
    assert_true(ggml_type_nbytes(GGML_TYPE_Q8_0, 4096, &b));
    assert_int_equal(b, 4352);
    /* Rows must be whole blocks; overflow is refused. */
    assert_false(ggml_type_nbytes(GGML_TYPE_Q4_K, 100, &b));
    assert_false(ggml_type_nbytes(GGML_TYPE_F64, UINT64_MAX / 4, &b));
    assert_false(ggml_type_nbytes(99, 32, &b));
}

/* --- round trip ----------------------------------------------------------- */

static void all_types_model(gw *w, uint32_t version)
{
    gw_init(w, version);
    gw_kv_str(w, "general.architecture", "llama");
    gw_kv_raw(w, "t.u8", GW_U8, 200, 1);
    gw_kv_raw(w, "t.i8", GW_I8, (uint8_t)-5, 1);
    gw_kv_raw(w, "t.u16", GW_U16, 60000, 2);
    gw_kv_raw(w, "t.i16", GW_I16, (uint16_t)-300, 2);
    gw_kv_u32(w, "t.u32", 4000000000u);
    gw_kv_i32(w, "t.i32", -70000);
    gw_kv_f32(w, "t.f32", 0.5f);
    gw_kv_bool(w, "t.bool", true);
    gw_kv_u64(w, "t.u64", 1ull << 40);
    gw_kv_raw(w, "t.i64", GW_I64, (uint64_t)-(1ll << 40), 8);
    gw_kv_f64(w, "t.f64", -2.25);
    gw_kv_str(w, "t.str", "hello");
    static const uint32_t arr[] = {1, 2, 3};
    gw_kv_arr_u32(w, "t.arr_u32", arr, 3);
    static const bool bools[] = {true, false};
    gw_kv_arr_bool(w, "t.arr_bool", bools, 2);
    static const char *const strs[] = {"a", "bc", ""};
    gw_kv_arr_str(w, "t.arr_str", strs, 3);
    /* An array of arrays: [[7, 8], []] of int32. */
    gw_key(w, "t.nested", GW_ARR);
    gw_le(&w->kv, GW_ARR, 4);
    gw_le(&w->kv, 2, 8);
    gw_le(&w->kv, GW_I32, 4);
    gw_le(&w->kv, 2, 8);
    gw_le(&w->kv, 7, 4);
    gw_le(&w->kv, 8, 4);
    gw_le(&w->kv, GW_I32, 4);
    gw_le(&w->kv, 0, 8);
    gw_tensor(w, "a", 0, 1, 8, 1, 1);
    gw_tensor(w, "b", 2, 2, 64, 3, 1);     /* Q4_0: 2 blocks per row */
    gw_tensor(w, "c", 14, 3, 256, 2, 2);   /* Q6_K */
}

static void check_all_types(const gguf_file *f)
{
    uint64_t u;
    double d;
    assert_true(gguf_kv_uint(gguf_find(f, "t.u8"), &u)); assert_int_equal(u, 200);
    assert_int_equal(gguf_find(f, "t.i8")->v.i, -5);
    assert_false(gguf_kv_uint(gguf_find(f, "t.i8"), &u));
    assert_true(gguf_kv_uint(gguf_find(f, "t.u16"), &u)); assert_int_equal(u, 60000);
    assert_int_equal(gguf_find(f, "t.i16")->v.i, -300);
    assert_true(gguf_kv_uint(gguf_find(f, "t.u32"), &u)); assert_int_equal(u, 4000000000u);
    assert_int_equal(gguf_find(f, "t.i32")->v.i, -70000);
    assert_true(gguf_kv_float(gguf_find(f, "t.f32"), &d)); assert_true(d == 0.5);
    assert_true(gguf_kv_uint(gguf_find(f, "t.bool"), &u)); assert_int_equal(u, 1);
    assert_true(gguf_kv_uint(gguf_find(f, "t.u64"), &u)); assert_int_equal(u, 1ull << 40);
    assert_int_equal(gguf_find(f, "t.i64")->v.i, -(1ll << 40));
    assert_true(gguf_kv_float(gguf_find(f, "t.f64"), &d)); assert_true(d == -2.25);
    assert_string_equal(gguf_kv_str(gguf_find(f, "t.str")), "hello");
    const gguf_kv *a = gguf_find(f, "t.arr_u32");
    assert_int_equal(a->arr_n, 3);
    assert_true(gguf_arr_uint(a, 2, &u)); assert_int_equal(u, 3);
    assert_false(gguf_arr_uint(a, 3, &u));
    a = gguf_find(f, "t.arr_bool");
    assert_true(gguf_arr_uint(a, 0, &u)); assert_int_equal(u, 1);
    assert_true(gguf_arr_uint(a, 1, &u)); assert_int_equal(u, 0);
    a = gguf_find(f, "t.arr_str");
    assert_int_equal(a->type, GGUF_TYPE_ARRAY);
    assert_int_equal(a->arr_type, GGUF_TYPE_STRING);
    assert_int_equal(a->arr_n, 3);
    a = gguf_find(f, "t.nested");
    assert_int_equal(a->arr_type, GGUF_TYPE_ARRAY);
    assert_int_equal(a->arr_n, 2);
    assert_null(gguf_find(f, "t.missing"));

    assert_int_equal(f->n_tensors, 3);
    const gguf_tensor *t = gguf_find_tensor(f, "b");
    assert_non_null(t);
    assert_int_equal(t->n_dims, 2);
    assert_int_equal(t->ne[0], 64);
    assert_int_equal(t->ne[1], 3);
    assert_int_equal(t->ne[2], 1);
    assert_int_equal(t->nbytes, 3 * 2 * 18);
    t = gguf_find_tensor(f, "c");
    assert_int_equal(t->nbytes, 4 * 210);
    assert_int_equal(f->data_offset % 32, 0);
    assert_int_equal(f->tensor_bytes, 32 + 108 + 840);
}

static void test_roundtrip_v3_and_v2(void **state)
{
    (void)state;
    for (uint32_t v = 2; v <= 3; v++) {
        gw w;
        all_types_model(&w, v);
        size_t len;
        uint8_t *img = gw_image(&w, &len);
        char err[256];
        gguf_file *f = gguf_read_mem(img, len, err, sizeof err);
        if (!f) fail_msg("v%u: %s", v, err);
        assert_int_equal(f->version, v);
        check_all_types(f);
        gguf_free(f);

        /* The same through the file reader. */
        char path[256];
        gw_write_file(&w, path, sizeof path);
        f = gguf_read_file(path, err, sizeof err);
        if (!f) fail_msg("file v%u: %s", v, err);
        check_all_types(f);
        gguf_free(f);
        unlink(path);
        free(img);
        gw_free(&w);
    }
}

static void test_alignment(void **state)
{
    (void)state;
    gw w;
    gw_init(&w, 3);
    w.alignment = 64;
    gw_kv_u32(&w, "general.alignment", 64);
    gw_tensor(&w, "x", 0, 1, 3, 1, 1);    /* 12 bytes, next offset 64 */
    gw_tensor(&w, "y", 0, 1, 3, 1, 1);
    size_t len;
    uint8_t *img = gw_image(&w, &len);
    char err[256];
    gguf_file *f = gguf_read_mem(img, len, err, sizeof err);
    if (!f) fail_msg("%s", err);
    assert_int_equal(f->alignment, 64);
    assert_int_equal(f->data_offset % 64, 0);
    assert_int_equal(gguf_find_tensor(f, "y")->offset, 64);
    gguf_free(f);
    free(img);
    gw_free(&w);
}

/* A 40 GB model answers at once: only the header is read. */
static void test_big_sparse_file(void **state)
{
    (void)state;
    gw w;
    gw_init(&w, 3);
    gw_kv_str(&w, "general.architecture", "llama");
    char n[64];
    for (int i = 0; i < 40; i++) {
        snprintf(n, sizeof n, "blk.%d.w", i);
        gw_tensor(&w, n, 1, 2, 32768, 16384, 1);  /* 1 GiB each */
    }
    char path[256], err[256];
    gw_write_file(&w, path, sizeof path);
    struct timeval t0, t1;
    gettimeofday(&t0, NULL);
    gguf_file *f = gguf_read_file(path, err, sizeof err);
    gettimeofday(&t1, NULL);
    if (!f) fail_msg("%s", err);
    assert_int_equal(f->tensor_bytes, 40ull << 30);
    double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_usec - t0.tv_usec) / 1e3;
    assert_true(ms < 1000);
    gguf_free(f);
    unlink(path);
    gw_free(&w);
}

/* --- bad files ------------------------------------------------------------ */

/* Parse bytes that must fail; the error must be one line and contain want. */
static void expect_error(const uint8_t *p, size_t len, const char *want)
{
    char err[512];
    memset(err, 'x', sizeof err);
    gguf_file *f = gguf_read_mem(p, len, err, sizeof err);
    if (f) fail_msg("parsed, but wanted an error containing '%s'", want);
    assert_true(strlen(err) > 0 && strlen(err) < sizeof err);
    assert_null(strchr(err, '\n'));
    if (!strstr(err, want)) fail_msg("error '%s' lacks '%s'", err, want);
}

static uint8_t *image_of(gw *w, size_t *len)
{
    uint8_t *img = gw_image(w, len);
    gw_free(w);
    return img;
}

static void test_truncated_everywhere(void **state)
{
    (void)state;
    gw w;
    all_types_model(&w, 3);
    size_t hl;
    uint8_t *h = gw_header(&w, &hl);
    /* Every cut inside the header is a truncation, named as such. */
    size_t end = 4 + 4 + 8 + 8 + w.kv.len + w.ti.len;
    for (size_t cut = 0; cut < end; cut++) expect_error(h, cut, "truncated");
    /* Header complete but the tensor data is missing. */
    expect_error(h, hl, "runs past the end of the file");
    free(h);
    gw_free(&w);
}

static void test_bad_headers(void **state)
{
    (void)state;
    uint8_t b[64] = {0};
    expect_error(b, 0, "truncated");
    memcpy(b, "GGML", 4);
    expect_error(b, 24, "not a GGUF file");
    memcpy(b, "GGUF", 4);
    b[4] = 1;
    expect_error(b, 24, "version 1 is not supported");
    b[4] = 4;
    expect_error(b, 24, "unsupported GGUF version 4");
    b[4] = 0;
    b[7] = 3;
    expect_error(b, 24, "big-endian");
    b[7] = 0;
    b[4] = 3;
    /* Counts far beyond the limits, and counts the bytes cannot hold. */
    memset(b + 8, 0xff, 8);
    expect_error(b, 24, "tensor count");
    memset(b + 8, 0, 8);
    memset(b + 16, 0xff, 8);
    expect_error(b, 24, "metadata count");
    b[16] = 0x40, b[17] = 0x42, b[18] = 0x0f; /* 1e6 entries */
    memset(b + 19, 0, 5);
    expect_error(b, 24, "truncated");
}

static void test_hostile_lengths(void **state)
{
    (void)state;
    gw w;
    size_t len;
    uint8_t *img;

    /* A string value claiming 2^63 bytes. */
    gw_init(&w, 3);
    gw_key(&w, "k", GW_STR);
    gw_le(&w.kv, 1ull << 63, 8);
    img = image_of(&w, &len);
    expect_error(img, len, "truncated");
    free(img);

    /* Arrays claiming 2^62 uint64s (2^65 bytes), 2^60 of them, 2^61 strings. */
    gw_init(&w, 3);
    gw_key(&w, "k", GW_ARR);
    gw_le(&w.kv, GW_U64, 4);
    gw_le(&w.kv, 1ull << 62, 8);
    img = image_of(&w, &len);
    expect_error(img, len, "elements is too large");
    free(img);
    gw_init(&w, 3);
    gw_key(&w, "k", GW_ARR);
    gw_le(&w.kv, GW_U64, 4);
    gw_le(&w.kv, 1ull << 60, 8);
    img = image_of(&w, &len);
    expect_error(img, len, "truncated");
    free(img);
    gw_init(&w, 3);
    gw_key(&w, "k", GW_ARR);
    gw_le(&w.kv, GW_STR, 4);
    gw_le(&w.kv, 1ull << 61, 8);
    img = image_of(&w, &len);
    expect_error(img, len, "truncated");
    free(img);

    /* A key of 2^40 bytes. */
    gw_init(&w, 3);
    w.n_kv = 1;
    gw_le(&w.kv, 1ull << 40, 8);
    img = image_of(&w, &len);
    expect_error(img, len, "truncated");
    free(img);

    /* Arrays nested deeper than the limit. */
    gw_init(&w, 3);
    gw_key(&w, "deep", GW_ARR);
    for (int i = 0; i < 20; i++) {
        gw_le(&w.kv, GW_ARR, 4);
        gw_le(&w.kv, 1, 8);
    }
    gw_le(&w.kv, GW_U8, 4);
    gw_le(&w.kv, 0, 8);
    img = image_of(&w, &len);
    expect_error(img, len, "nested deeper");
    free(img);
}

static void test_malformed_values(void **state)
{
    (void)state;
    gw w;
    size_t len;
    uint8_t *img;

    gw_init(&w, 3);
    gw_key(&w, "k", 13);
    gw_le(&w.kv, 0, 8);
    img = image_of(&w, &len);
    expect_error(img, len, "unknown value type 13");
    free(img);

    gw_init(&w, 3);
    gw_key(&w, "k", GW_ARR);
    gw_le(&w.kv, 77, 4);
    gw_le(&w.kv, 1, 8);
    img = image_of(&w, &len);
    expect_error(img, len, "unknown element type 77");
    free(img);

    gw_init(&w, 3);
    gw_kv_u32(&w, "dup", 1);
    gw_kv_u32(&w, "dup", 2);
    img = image_of(&w, &len);
    expect_error(img, len, "duplicate metadata key 'dup'");
    free(img);

    gw_init(&w, 3);
    gw_kv_u32(&w, "general.alignment", 48);
    img = image_of(&w, &len);
    expect_error(img, len, "not a power of two");
    free(img);

    gw_init(&w, 3);
    gw_kv_str(&w, "general.alignment", "32");
    img = image_of(&w, &len);
    expect_error(img, len, "general.alignment must be a uint32");
    free(img);
}

static void test_malformed_tensors(void **state)
{
    (void)state;
    gw w;
    size_t len;
    uint8_t *img;

    gw_init(&w, 3);
    gw_tensor(&w, "same", 0, 1, 4, 1, 1);
    gw_tensor(&w, "same", 0, 1, 4, 1, 1);
    img = image_of(&w, &len);
    expect_error(img, len, "duplicate tensor name 'same'");
    free(img);

    gw_init(&w, 3);
    gw_tensor(&w, "a_name_that_is_much_longer_than_the_sixty_three_bytes_ggml_allows", 0, 1, 4, 1, 1);
    img = image_of(&w, &len);
    expect_error(img, len, "over ggml's limit of 63");
    free(img);

    /* Hand-built infos for what the writer would not produce. */
    struct { uint32_t n_dims; uint64_t ne0, ne1; uint32_t type; uint64_t offset; const char *want; } bad[] = {
        {5, 4, 1, 0, 0, "has 5 dimensions"},
        {0, 4, 1, 0, 0, "has 0 dimensions"},
        {1, 4, 1, 99, 0, "unknown ggml type 99"},
        {1, 4, 1, 4, 0, "unknown ggml type 4"},
        {1, 100, 1, GGML_TYPE_Q4_0, 0, "not a whole number of q4_0 blocks"},
        {2, 1ull << 40, 1ull << 40, 0, 0, "too many elements"},
        {2, 1ull << 63, 1, 0, 0, "too many elements"},
        {1, 4, 1, 0, 7, "not a multiple of the alignment"},
        {1, 4, 1, 0, 1ull << 62, "runs past the end"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        gw_init(&w, 3);
        w.n_tensors = 1;
        gw_str(&w.ti, "t");
        gw_le(&w.ti, bad[i].n_dims, 4);
        uint32_t nd = bad[i].n_dims > 4 ? 4 : bad[i].n_dims;
        for (uint32_t d = 0; d < nd; d++) gw_le(&w.ti, d == 0 ? bad[i].ne0 : d == 1 ? bad[i].ne1 : 1, 8);
        gw_le(&w.ti, bad[i].type, 4);
        gw_le(&w.ti, bad[i].offset, 8);
        w.data_size = 64;
        img = image_of(&w, &len);
        expect_error(img, len, bad[i].want);
        free(img);
    }
}

static void test_file_errors(void **state)
{
    (void)state;
    char err[256];
    assert_null(gguf_read_file("/nonexistent/x.gguf", err, sizeof err));
    assert_non_null(strstr(err, "cannot open"));
    assert_null(gguf_read_file("/tmp", err, sizeof err));
    assert_non_null(strstr(err, "not a regular file"));
    /* A real file cut short inside the tensor data (an interrupted download). */
    gw w;
    gw_init(&w, 3);
    gw_kv_str(&w, "general.architecture", "llama");
    gw_tensor(&w, "big", 1, 2, 4096, 4096, 1);
    char path[256];
    gw_write_file(&w, path, sizeof path);
    assert_int_equal(truncate(path, 4096), 0);
    assert_null(gguf_read_file(path, err, sizeof err));
    assert_non_null(strstr(err, "tensor 'big'"));
    assert_non_null(strstr(err, "runs past the end of the file"));
    unlink(path);
    gw_free(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_type_table),
        cmocka_unit_test(test_type_bytes),
        cmocka_unit_test(test_roundtrip_v3_and_v2),
        cmocka_unit_test(test_alignment),
        cmocka_unit_test(test_big_sparse_file),
        cmocka_unit_test(test_truncated_everywhere),
        cmocka_unit_test(test_bad_headers),
        cmocka_unit_test(test_hostile_lengths),
        cmocka_unit_test(test_malformed_values),
        cmocka_unit_test(test_malformed_tensors),
        cmocka_unit_test(test_file_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
