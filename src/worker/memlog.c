/* worker/memlog: see memlog.h. */
#include "worker/memlog.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum kind { K_NONE, K_MODEL, K_KV, K_COMPUTE, K_OTHER };

int memlog_is_host(const char *name)
{
    return !strncmp(name, "CPU", 3) || strstr(name, "Host") != NULL;
}

/* The token that ends just before `end` (spaces skipped), into out. */
static const char *token_before(const char *start, const char *end, char *out, size_t outlen)
{
    while (end > start && end[-1] == ' ') end--;
    const char *b = end;
    while (b > start && !isspace((unsigned char)b[-1])) b--;
    size_t n = (size_t)(end - b);
    if (n == 0 || n >= outlen) return NULL;
    memcpy(out, b, n);
    out[n] = 0;
    return b;
}

/* One line: its kind, buffer name and bytes; K_NONE when it is not a buffer line. */
static enum kind parse_line(const char *line, size_t len, char *name, size_t namelen, uint64_t *bytes)
{
    static const char key[] = " buffer size = ";
    char copy[512];
    if (len >= sizeof copy) len = sizeof copy - 1;
    memcpy(copy, line, len);
    copy[len] = 0;
    char *at = strstr(copy, key);
    if (!at) return K_NONE;
    char *end;
    double mib = strtod(at + sizeof key - 1, &end);
    while (*end == ' ') end++;
    if (end == at + sizeof key - 1 || strncmp(end, "MiB", 3) || !isfinite(mib) || mib < 0) return K_NONE;
    *bytes = (uint64_t)llround(mib * 1048576.0);
    char word[96];
    const char *w = token_before(copy, at, word, sizeof word);
    if (!w) return K_NONE;
    enum kind k = K_OTHER;
    if (!strcmp(word, "model")) k = K_MODEL;
    else if (!strcmp(word, "KV") || !strcmp(word, "RS")) k = K_KV;
    else if (!strcmp(word, "compute")) k = K_COMPUTE;
    else if (!strcmp(word, "output")) k = K_OTHER;
    else {
        /* The oldest builds: "llm_load_tensors:      CUDA0 buffer size". */
        if (!strstr(copy, "load_tensors:")) return K_NONE;
        snprintf(name, namelen, "%s", word);
        return K_MODEL;
    }
    if (!token_before(copy, w, name, namelen)) return K_NONE;
    /* A name ends with no colon; "llama_context:  output buffer" would. */
    if (name[strlen(name) - 1] == ':') return K_NONE;
    return k;
}

int memlog_parse(const char *text, size_t len, memlog_figures *out)
{
    memset(out, 0, sizeof *out);
    int models = 0, later = 0; /* model lines, and KV or compute lines, of the current pass */
    for (size_t i = 0; text && i < len;) {
        const char *line = text + i;
        const char *nl = memchr(line, '\n', len - i);
        size_t n = nl ? (size_t)(nl - line) : len - i;
        i += n + 1;
        char name[96];
        uint64_t b = 0;
        enum kind k = parse_line(line, n, name, sizeof name, &b);
        if (k == K_NONE || k == K_OTHER) continue;
        if (k == K_MODEL && later) {
            memset(out, 0, sizeof *out);
            models = later = 0;
        }
        out->lines++;
        if (k == K_MODEL) models++;
        else later++;
        if (memlog_is_host(name)) {
            out->host_bytes += b;
            continue;
        }
        out->gpu_buffers++;
        if (k == K_MODEL) out->model_bytes += b;
        else if (k == K_KV) out->kv_bytes += b;
        else out->compute_bytes += b;
    }
    return models > 0 && later > 0;
}

uint64_t memlog_gpu_total(const memlog_figures *f)
{
    return f->model_bytes + f->kv_bytes + f->compute_bytes;
}
