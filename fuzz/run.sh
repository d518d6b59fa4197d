#!/usr/bin/env bash
# Fuzz the GGUF reader with libFuzzer (+ASan/UBSan) for a bounded time.
# Not part of CI.  Usage: fuzz/run.sh [seconds]   (default 60)
# Crashes land in fuzz/out/ (crash-*), the grown corpus in fuzz/corpus-run/.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-${FUZZ_SECONDS:-60}}
OUT=fuzz/out
CORPUS=fuzz/corpus-run
mkdir -p "$OUT" "$CORPUS"

CC=${FUZZ_CC:-}
if [ -z "$CC" ]; then
    for c in clang clang-14 clang-15 clang-16; do
        if command -v "$c" >/dev/null; then CC=$c; break; fi
    done
fi
probe() { echo 'int LLVMFuzzerTestOneInput(const char*d,unsigned long n){(void)d;(void)n;return 0;}' \
    | "$CC" -x c -fsanitize=fuzzer - -o "$OUT/probe" 2>/dev/null; }
if [ -z "$CC" ] || ! probe; then
    echo "fuzz/run.sh: installing clang and libFuzzer (apt)" >&2
    SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq clang-14 libclang-rt-14-dev
    CC=clang-14
    probe || { echo "fuzz/run.sh: libFuzzer still unavailable" >&2; exit 2; }
fi

SRC="src/plan/ggml_types.c src/plan/gguf.c src/plan/arch.c src/plan/vram.c src/plan/presets.c src/util/err.c"
FLAGS="-std=c17 -D_GNU_SOURCE -g -O1 -Isrc -Itests -fno-omit-frame-pointer"
"$CC" $FLAGS -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    fuzz/fuzz_gguf.c $SRC -o "$OUT/fuzz_gguf" -lm
"$CC" $FLAGS fuzz/seeds.c -o "$OUT/seeds"
"$OUT/seeds" "$CORPUS"

echo "fuzz/run.sh: fuzzing for ${SECS}s with $CC" >&2
# rss_limit: a hostile header must never make the reader allocate much.
"$OUT/fuzz_gguf" "$CORPUS" -max_total_time="$SECS" -rss_limit_mb=512 -malloc_limit_mb=256 \
    -max_len=65536 -artifact_prefix="$OUT/" -print_final_stats=1
