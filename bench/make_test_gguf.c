/* make_test_gguf: write a Llama-architecture GGUF that llama.cpp loads, for
 * bench/plan_vs_llamacpp.sh.
 *
 * Real metadata (hyperparameters and a SentencePiece-style "llama"
 * tokenizer), real tensor shapes, and a tensor data region that is a hole
 * (ftruncate): the weights are all zero, cost no disk, and llama.cpp mmaps
 * them.  The model computes nothing useful; it exists so that llama-server
 * allocates exactly what it would for a real model of that shape.
 *
 *   make_test_gguf OUT.gguf [f16|q8_0] [n_layer n_embd n_ff n_head n_head_kv n_vocab]
 *
 * Default shape: a ~1.2B-parameter Llama (16 layers, n_embd 2048, n_ff 8192,
 * 32 heads, 8 KV heads, vocab 32000), F16.
 *
 * Build: cc -std=c17 -O1 -I tests/unit bench/make_test_gguf.c -o bench/out/make_test_gguf */
#define _GNU_SOURCE 1
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf_writer.h"

#define GGML_TYPE_F16 1
#define GGML_TYPE_Q8_0 8

static void arr_f32(gw *w, const char *key, uint64_t n, float v)
{
    uint32_t bits;
    memcpy(&bits, &v, 4);
    gw_key(w, key, GW_ARR);
    gw_le(&w->kv, GW_F32, 4);
    gw_le(&w->kv, n, 8);
    for (uint64_t i = 0; i < n; i++) gw_le(&w->kv, bits, 4);
}

static void arr_i32_types(gw *w, const char *key, uint64_t n)
{
    gw_key(w, key, GW_ARR);
    gw_le(&w->kv, GW_I32, 4);
    gw_le(&w->kv, n, 8);
    /* llama_token_type: 1 normal, 2 unknown, 3 control, 6 byte */
    for (uint64_t i = 0; i < n; i++) gw_le(&w->kv, i == 0 ? 2 : i < 3 ? 3 : i < 259 ? 6 : 1, 4);
}

static void tokens(gw *w, uint64_t n)
{
    gw_key(w, "tokenizer.ggml.tokens", GW_ARR);
    gw_le(&w->kv, GW_STR, 4);
    gw_le(&w->kv, n, 8);
    char t[32];
    for (uint64_t i = 0; i < n; i++) {
        if (i == 0) snprintf(t, sizeof t, "<unk>");
        else if (i == 1) snprintf(t, sizeof t, "<s>");
        else if (i == 2) snprintf(t, sizeof t, "</s>");
        else if (i < 259) snprintf(t, sizeof t, "<0x%02X>", (unsigned)(i - 3));
        else snprintf(t, sizeof t, "\xe2\x96\x81t%llu", (unsigned long long)i);  /* "▁tN" */
        gw_str(&w->kv, t);
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s OUT.gguf [f16|q8_0] [n_layer n_embd n_ff n_head n_head_kv n_vocab]\n", argv[0]);
        return 2;
    }
    gw_llama c = {16, 2048, 8192, 32, 8, 64, 32000, 0, GGML_TYPE_F16, false};
    if (argc > 2) {
        if (!strcmp(argv[2], "q8_0")) c.wtype = GGML_TYPE_Q8_0;
        else if (strcmp(argv[2], "f16")) {
            fprintf(stderr, "weight type must be f16 or q8_0\n");
            return 2;
        }
    }
    if (argc > 3) {
        if (argc != 9) {
            fprintf(stderr, "give all six of n_layer n_embd n_ff n_head n_head_kv n_vocab\n");
            return 2;
        }
        c.n_layer = (uint32_t)atoi(argv[3]);
        c.n_embd = (uint32_t)atoi(argv[4]);
        c.n_ff = (uint32_t)atoi(argv[5]);
        c.n_head = (uint32_t)atoi(argv[6]);
        c.n_head_kv = (uint32_t)atoi(argv[7]);
        c.n_vocab = (uint32_t)atoi(argv[8]);
        if (!c.n_layer || !c.n_head || !c.n_head_kv || c.n_vocab < 300 || c.n_embd % c.n_head) {
            fprintf(stderr, "bad shape\n");
            return 2;
        }
        c.head_dim = c.n_embd / c.n_head;
    }

    gw w;
    gw_init(&w, 3);
    gw_llama_kv(&w, "llama", &c, 131072);
    /* gw_llama_kv writes general.file_type 1 (F16) even for Q8_0 weights;
     * llama.cpp only prints that key, sizes come from the tensor infos. */
    gw_kv_u32(&w, "llama.rope.dimension_count", c.head_dim);
    gw_kv_f32(&w, "llama.rope.freq_base", 500000.0f);
    gw_kv_str(&w, "tokenizer.ggml.model", "llama");
    tokens(&w, c.n_vocab);
    arr_f32(&w, "tokenizer.ggml.scores", c.n_vocab, 0.0f);
    arr_i32_types(&w, "tokenizer.ggml.token_type", c.n_vocab);
    gw_kv_u32(&w, "tokenizer.ggml.bos_token_id", 1);
    gw_kv_u32(&w, "tokenizer.ggml.eos_token_id", 2);
    gw_kv_u32(&w, "tokenizer.ggml.unknown_token_id", 0);
    gw_kv_bool(&w, "tokenizer.ggml.add_bos_token", true);
    gw_kv_bool(&w, "tokenizer.ggml.add_eos_token", false);
    gw_llama_tensors(&w, &c);

    size_t hl;
    uint8_t *h = gw_header(&w, &hl);
    int fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        perror(argv[1]);
        return 1;
    }
    if (write(fd, h, hl) != (ssize_t)hl || ftruncate(fd, (off_t)(hl + w.data_size)) < 0) {
        perror(argv[1]);
        return 1;
    }
    close(fd);
    free(h);
    printf("%s: %s, %u layers, n_embd %u, n_ff %u, %u/%u heads, vocab %u, %llu bytes of tensor data\n", argv[1],
           c.wtype == GGML_TYPE_Q8_0 ? "q8_0" : "f16", c.n_layer, c.n_embd, c.n_ff, c.n_head, c.n_head_kv,
           c.n_vocab, (unsigned long long)w.data_size);
    gw_free(&w);
    return 0;
}
