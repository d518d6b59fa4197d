/* plan/gguf: a bounded reader for GGUF model files (versions 2 and 3).
 *
 * It reads the header, every metadata entry and every tensor info, and stops
 * where the tensor data begins, so a 40 GB file answers as fast as a 4 MB one.
 * Everything it is told by the file is checked before it is trusted: lengths
 * and counts against the bytes that remain, dimensions and offsets against
 * overflow, tensor data against the end of the file.  A bad file gets one
 * line of error text naming what is wrong and where; nothing it can contain
 * makes the reader allocate more than a small multiple of the bytes it has
 * actually read. */
#ifndef GPUPOOL_PLAN_GGUF_H
#define GPUPOOL_PLAN_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum gguf_vtype {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
    GGUF_TYPE_COUNT = 13,
};

/* Limits.  ggml itself caps tensor names at 63 bytes and dimensions at 4. */
#define GGUF_MAX_DIMS 4
#define GGUF_MAX_NAME 64                 /* tensor name incl. NUL */
#define GGUF_MAX_KEY (64u * 1024)        /* key length */
#define GGUF_MAX_TENSORS 1000000u
#define GGUF_MAX_KV 1000000u
#define GGUF_MAX_ARRAY_DEPTH 8           /* arrays of arrays */
#define GGUF_KEEP_STRING (1u << 20)      /* longer string values are skipped */
#define GGUF_KEEP_ARRAY (1u << 20)       /* longer numeric arrays are skipped */
#define GGUF_DEFAULT_ALIGNMENT 32

typedef struct gguf_kv {
    char *key;
    uint32_t type;          /* enum gguf_vtype */
    union {
        uint64_t u;         /* UINT*, BOOL */
        int64_t i;          /* INT* */
        double f;           /* FLOAT* */
    } v;
    char *str;              /* STRING, NUL-terminated; NULL if over GGUF_KEEP_STRING */
    uint64_t str_len;
    uint32_t arr_type;      /* ARRAY: element type */
    uint64_t arr_n;         /* ARRAY: element count (always known) */
    void *arr;              /* ARRAY of numbers or bools, raw little-endian
                             * elements; NULL for strings, nested arrays and
                             * arrays over GGUF_KEEP_ARRAY */
} gguf_kv;

typedef struct gguf_tensor {
    char name[GGUF_MAX_NAME];
    uint32_t n_dims;
    uint64_t ne[GGUF_MAX_DIMS];   /* unused dimensions are 1 */
    uint32_t type;                /* enum ggml_type */
    uint64_t offset;              /* from the start of the data section */
    uint64_t nbytes;
} gguf_tensor;

typedef struct gguf_file {
    uint32_t version;
    uint32_t alignment;
    uint64_t n_kv;
    gguf_kv *kv;
    uint64_t n_tensors;
    gguf_tensor *tensors;
    uint64_t data_offset;   /* where tensor data starts */
    uint64_t file_size;
    uint64_t tensor_bytes;  /* sum of all tensors' nbytes */
} gguf_file;

/* Parse a file or an in-memory image.  On failure: NULL, and err holds one
 * line (no trailing newline). */
gguf_file *gguf_read_file(const char *path, char *err, size_t errlen);
gguf_file *gguf_read_mem(const void *data, size_t len, char *err, size_t errlen);
void gguf_free(gguf_file *f);

const gguf_kv *gguf_find(const gguf_file *f, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);

/* Typed views of one value.  The integer views accept every integer type
 * (and bool) whose value fits; arrays answer per element. */
bool gguf_kv_uint(const gguf_kv *kv, uint64_t *out);
bool gguf_kv_float(const gguf_kv *kv, double *out);
const char *gguf_kv_str(const gguf_kv *kv);
bool gguf_arr_uint(const gguf_kv *kv, uint64_t i, uint64_t *out);
bool gguf_arr_float(const gguf_kv *kv, uint64_t i, double *out);

const char *gguf_type_name(uint32_t vtype);

#endif
