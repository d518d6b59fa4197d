#!/usr/bin/env bash
# How long `gpupool plan` takes to read a real-sized GGUF header, against a
# plain `cat` of the same bytes.  The synthetic model has a 152k-token
# tokenizer (tokens, scores, types, 151k merges), 160 layers and 3,683
# tensors, and a 100+ GB data region that is a hole (no disk used), so the
# header is as big as a large real model's.
# Usage: bench/plan_parse.sh [runs]   (default 20).  Builds build-bench/.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-20}
OUT=bench/out
mkdir -p "$OUT"
make -s B=build-bench build-bench/gpupool >/dev/null
BIN=build-bench/gpupool

cat >"$OUT/gen.c" <<'C'
#include <stdio.h>
#include "unit/gguf_writer.h"
int main(int argc, char **argv)
{
    if (argc != 3) return 2;
    gw w;
    gw_init(&w, 3);
    enum { VOCAB = 151936, MERGES = 151387, LAYERS = 160 };
    gw_llama c = {LAYERS, 5120, 25600, 64, 8, 128, VOCAB, 0, 12 /* Q4_K */, false};
    gw_llama_kv(&w, "qwen3", &c, 40960);
    char **tok = malloc(sizeof *tok * VOCAB);
    static char pool[VOCAB][16];
    for (int i = 0; i < VOCAB; i++) { snprintf(pool[i], 16, "tok%d", i); tok[i] = pool[i]; }
    gw_kv_arr_str(&w, "tokenizer.ggml.tokens", (const char *const *)tok, VOCAB);
    static char mpool[MERGES][24];
    char **mer = malloc(sizeof *mer * MERGES);
    for (int i = 0; i < MERGES; i++) { snprintf(mpool[i], 24, "t%d m%d", i, i + 1); mer[i] = mpool[i]; }
    gw_kv_arr_str(&w, "tokenizer.ggml.merges", (const char *const *)mer, MERGES);
    uint32_t *types = calloc(VOCAB, 4);
    gw_kv_arr_u32(&w, "tokenizer.ggml.token_type", types, VOCAB);
    gw_kv_arr_u32(&w, "tokenizer.ggml.scores", types, VOCAB);
    gw_kv_str(&w, "tokenizer.chat_template", "{% for m in messages %}{{ m.content }}{% endfor %}");
    /* 24 tensors per layer: the 10 llama ones plus 14 small extras. */
    gw_llama_tensors(&w, &c);
    char n[64];
    for (int il = 0; il < LAYERS; il++)
        for (int k = 0; k < 14; k++) {
            snprintf(n, sizeof n, "blk.%d.extra_%d.weight", il, k);
            gw_tensor(&w, n, 0, 1, 5120, 1, 1);
        }
    size_t hl;
    uint8_t *h = gw_header(&w, &hl);
    FILE *f = fopen(argv[2], "wb");
    fwrite(h, 1, hl, f);
    fclose(f);
    char path[256];
    gw_write_file(&w, path, sizeof path);
    if (rename(path, argv[1]) != 0) return 1;
    printf("%zu %llu\n", hl, (unsigned long long)w.n_tensors);
    return 0;
}
C
cc -O2 -Itests -o "$OUT/gen" "$OUT/gen.c"
read -r HDR NT < <("$OUT/gen" "$OUT/big.gguf" "$OUT/big.header")
SIZE=$(stat -c %s "$OUT/big.gguf")

now() { date +%s%N; }
"$BIN" plan --json "$OUT/big.gguf" >/dev/null   # warm the page cache
cat "$OUT/big.header" >/dev/null
# gpupool links libcurl, OpenSSL, SQLite and libmicrohttpd; their dynamic
# loading is timed separately (--version) so the parse itself shows.
t0=$(now); for _ in $(seq "$RUNS"); do "$BIN" plan --json "$OUT/big.gguf" >/dev/null; done; t1=$(now)
for _ in $(seq "$RUNS"); do cat "$OUT/big.header" >/dev/null; done; t2=$(now)
for _ in $(seq "$RUNS"); do "$BIN" --version >/dev/null; done; t3=$(now)
plan_us=$(( (t1 - t0) / RUNS / 1000 ))
cat_us=$(( (t2 - t1) / RUNS / 1000 ))
start_us=$(( (t3 - t2) / RUNS / 1000 ))
ms() { awk -v u="$1" 'BEGIN{printf "%.2f ms", u/1000}'; }
echo "file:     $(awk -v s="$SIZE" 'BEGIN{printf "%.1f GB", s/1e9}') (sparse), header $(awk -v h="$HDR" 'BEGIN{printf "%.1f MB", h/1e6}'), $NT tensors, $RUNS runs each, warm cache"
echo "plan:     $(ms "$plan_us") per run (gpupool plan --json, whole process)"
echo "startup:  $(ms "$start_us") per run (gpupool --version: exec + shared libraries)"
echo "parse:    $(ms $(( plan_us - start_us ))) per run (plan - startup: read, parse, estimate, JSON)"
echo "cat:      $(ms "$cat_us") per run (cat of the same header bytes, whole process)"
echo "ratio:    $(awk -v a="$plan_us" -v b="$cat_us" 'BEGIN{printf "%.1f", a/b}')x whole process, $(awk -v a="$plan_us" -v s="$start_us" -v b="$cat_us" 'BEGIN{printf "%.1f", (a-s)/b}')x parse alone, against cat"
[ -n "${KEEP:-}" ] || rm -f "$OUT/big.gguf" "$OUT/big.header"
