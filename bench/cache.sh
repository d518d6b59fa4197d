#!/usr/bin/env bash
# Semantic cache: lookup latency at 10k and 100k entries (384-d) against the
# memory-bandwidth floor measured by a plain scan of the same bytes in the
# same run, then hit and false-hit rates on the paraphrase set.
# Usage: bench/cache.sh [reps]   (default 41 lookups at 100k, 4x that at 10k).
# Builds an optimised, sanitizer-free library in build-cache-bench/.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${1:-41}
B=build-cache-bench
OUT=bench/out
mkdir -p "$OUT"
nice make -s B=$B CFLAGS="-O2 -g" $B/libgpupool.a >/dev/null
PKG="jansson sqlite3 libcrypto"
nice cc -std=c17 -D_GNU_SOURCE -O2 -g -Wall -Wextra -Werror -Isrc $(pkg-config --cflags $PKG) \
    bench/cache_bench.c $B/libgpupool.a $(pkg-config --libs $PKG) -lm -pthread -o "$OUT/cache_bench"
"$OUT/cache_bench" bench/data/paraphrase.tsv "$REPS" | tee "$OUT/cache.txt"
