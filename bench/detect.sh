#!/usr/bin/env bash
# Throughput of sensitive-data detection (detect_request) on a ~4 KB chat
# body against memchr over the same bytes, in one process.
# Usage: bench/detect.sh [iterations]   (default 20000).
# Builds an optimised, sanitizer-free library in build-detect-bench/.
set -euo pipefail
cd "$(dirname "$0")/.."
ITERS=${1:-20000}
B=build-detect-bench
OUT=bench/out
mkdir -p "$OUT"
make -s B=$B CFLAGS="-O2 -g" $B/libgpupool.a >/dev/null
PKG="libpcre2-8 jansson"
cc -std=c17 -D_GNU_SOURCE -O2 -g -Wall -Wextra -Werror -Isrc $(pkg-config --cflags $PKG) \
    bench/detect_bench.c $B/libgpupool.a $(pkg-config --libs $PKG) -o "$OUT/detect_bench"
"$OUT/detect_bench" "$ITERS" | tee "$OUT/detect.txt"
