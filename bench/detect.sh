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

# The same patterns through grep -c -P, one run a pattern, over a file of the
# same mixed text (as the gateway's detector runs one pass a rule): the
# built-ins as bytes (LC_ALL=C, as detect compiles them), the keywords and
# the regex as UTF-8 and caseless (as detect compiles configured rules).
G="$OUT/detect-grep"
mkdir -p "$G"
"$OUT/detect_bench" --grep "$G" | tee -a "$OUT/detect.txt" | grep -v '^DETECT_MBPS'
det=$(sed -n 's/^DETECT_MBPS //p' "$OUT/detect.txt" | tail -1)
size=$(stat -c %s "$G/text")
grep -c '' "$G/text" >/dev/null   # the page cache, warm for both
best=""
for round in 1 2 3; do
  t0=$(date +%s.%N)
  n=0
  while IFS= read -r pat; do
    n=$((n + 1))
    if [ "$n" -le 4 ]; then LC_ALL=C grep -c -P -- "$pat" "$G/text" >/dev/null || true
    else LC_ALL=C.UTF-8 grep -c -i -P -- "$pat" "$G/text" >/dev/null || true; fi
  done <"$G/patterns"
  t=$(echo "$(date +%s.%N) - $t0" | bc -l)
  if [ -z "$best" ] || [ "$(echo "$t < $best" | bc -l)" = 1 ]; then best=$t; fi
done
awk -v s="$size" -v t="$best" -v d="$det" -v n="$(wc -l <"$G/patterns")" 'BEGIN {
  g = s / 1e6 / t
  printf "grep -c -P, %d patterns one after another: %.1f MB/s (best of 3)\n", n, g
  printf "ratio detect_text / grep: %.2fx\n", d / g }' | tee -a "$OUT/detect.txt"
