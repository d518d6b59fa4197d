#!/usr/bin/env bash
# Fuzz the model catalogue's parser (catalog/) and the views a parsed one
# feeds with libFuzzer (+ASan/UBSan) for a bounded time.  Not part of CI.
# Usage: fuzz/run_catalog.sh [seconds]   (default 60)
# Crashes land in fuzz/out/catalog-crash-*, the corpus in fuzz/out/corpus-catalog/.
# Needs clang with libFuzzer (fuzz/run.sh installs it when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-${FUZZ_SECONDS:-60}}
. fuzz/lib.sh
CORPUS=$OUT/corpus-catalog
mkdir -p "$CORPUS"
fuzz_find_cc fuzz/run_catalog.sh
fuzz_build catalog "src/catalog/catalog.c src/plan/ggml_types.c src/worker/residency.c src/util/err.c src/util/ids.c" \
    "jansson libcrypto" -lm

seed() { printf '%s' "$2" >"$CORPUS/seed-$1"; }
A=aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa
seed full '{"models":[{"name":"qwen2.5-7b","aliases":["qwen","q"],"engine":"llama-server","gguf":"/m/q.gguf","sha256":"'$A'","ctx":8192,"parallel":2,"cache_type_k":"q8_0","cache_type_v":"f16","keep_alive":"10m","trust":"trusted","nodes":{"box-2":{"gguf":"/d/q.gguf","ctx":4096},"box-3":{"keep_alive":-1}}}]}'
seed kinds '{"models":[{"name":"llama3:8b","engine":"ollama","ollama":"llama3:8b"},{"name":"m","engine":"vllm","dir":"/m/d"},{"name":"p","engine":"command","gguf":"/p.gguf","command":"srv {model} --port {port}","keep_alive":30}]}'
seed dup '{"models":[{"name":"a","gguf":"/a","aliases":["b"]},{"name":"b","gguf":"/b"}]}'
seed empty '{"models":[]}'

fuzz_run catalog "$CORPUS" "$SECS"
