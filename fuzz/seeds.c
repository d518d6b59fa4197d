/* seeds: writes a starting corpus for fuzz_gguf (small but real-looking
 * models of several architectures) into the directory given. */
#include <stdio.h>

#include "unit/gguf_writer.h"

static void save(gw *w, const char *dir, const char *name)
{
    char path[512];
    size_t len;
    uint8_t *img = gw_image(w, &len);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(img, 1, len, f) != len) abort();
    fclose(f);
    free(img);
    gw_free(w);
}

int main(int argc, char **argv)
{
    if (argc != 2) return 2;
    gw w;
    gw_llama tiny = {2, 64, 128, 4, 2, 16, 100, 0, 0, false};
    gw_init(&w, 3);
    gw_llama_kv(&w, "llama", &tiny, 512);
    gw_llama_tensors(&w, &tiny);
    save(&w, argv[1], "llama");

    gw_llama moe = {2, 64, 64, 4, 4, 16, 100, 4, 0, true};
    gw_init(&w, 2);
    gw_llama_kv(&w, "llama", &moe, 512);
    gw_llama_tensors(&w, &moe);
    save(&w, argv[1], "moe-v2");

    gw_init(&w, 3);
    gw_llama_kv(&w, "gemma2", &tiny, 512);
    gw_kv_u32(&w, "gemma2.attention.sliding_window", 64);
    static const bool pat[] = {true, false};
    gw_kv_arr_bool(&w, "gemma2.attention.sliding_window_pattern", pat, 2);
    static const uint32_t kvh[] = {2, 0};
    gw_kv_arr_u32(&w, "gemma2.attention.head_count_kv", kvh, 2);
    static const char *const toks[] = {"<s>", "a", "b"};
    gw_kv_arr_str(&w, "tokenizer.ggml.tokens", toks, 3);
    gw_kv_u32(&w, "general.alignment", 64);
    w.alignment = 64;
    gw_llama_tensors(&w, &tiny);
    save(&w, argv[1], "gemma2-swa");

    gw_init(&w, 3);
    gw_kv_str(&w, "general.architecture", "mamba");
    gw_kv_u32(&w, "mamba.block_count", 2);
    gw_kv_u32(&w, "mamba.embedding_length", 64);
    gw_kv_u32(&w, "mamba.ssm.conv_kernel", 4);
    gw_kv_u32(&w, "mamba.ssm.inner_size", 128);
    gw_kv_u32(&w, "mamba.ssm.state_size", 16);
    gw_tensor(&w, "token_embd.weight", 0, 2, 64, 100, 1);
    save(&w, argv[1], "mamba");

    gw_init(&w, 3);
    gw_kv_str(&w, "general.architecture", "deepseek2");
    gw_kv_u32(&w, "deepseek2.block_count", 2);
    gw_kv_u32(&w, "deepseek2.embedding_length", 64);
    gw_kv_u32(&w, "deepseek2.attention.head_count", 4);
    gw_kv_u32(&w, "deepseek2.attention.head_count_kv", 1);
    gw_kv_u32(&w, "deepseek2.attention.key_length", 96);
    gw_kv_u32(&w, "deepseek2.attention.value_length", 64);
    gw_kv_u32(&w, "deepseek2.attention.key_length_mla", 48);
    gw_kv_u32(&w, "deepseek2.attention.value_length_mla", 32);
    gw_tensor(&w, "token_embd.weight", 8, 2, 64, 100, 1);
    gw_tensor(&w, "blk.0.ffn_up_exps.weight", 12, 3, 256, 4, 4);
    save(&w, argv[1], "mla");
    return 0;
}
