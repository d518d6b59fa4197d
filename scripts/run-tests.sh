#!/usr/bin/env bash
# Runs every unit and end-to-end test binary of a build (default build-asan),
# the OpenAPI document's validation, and each fuzz target over its seeds and
# past crashes (fuzz/replay.c), and prints one closing line:
# "N passed, N failed".
set -u
B=${1:-build-asan}
export GPUPOOL_BIN="$B/gpupool"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
passed=0 failed=0 failed_bins=()
run() { # binary [arguments]
  local bin=$1 out rc n f
  out=$("$@" 2>&1); rc=$?
  printf '%s\n' "$out" | grep -E '^\[ *(RUN|OK|PASSED|FAILED|ERROR|SKIPPED) *\]|^\[=+\]|error:|Failure' | grep -v '^\[ RUN'
  n=$(printf '%s\n' "$out" | sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' | tail -1)
  f=$(printf '%s\n' "$out" | sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' | tail -1)
  passed=$((passed + ${n:-0}))
  if [ "$rc" -ne 0 ]; then
    failed=$((failed + ${f:-1})); failed_bins+=("$bin")
    # Each failed test's own output (its message, and the logs a test
    # prints on failure), then the end, where sanitizer reports land.
    printf '%s\n' "$out" | awk '
      /^\[ RUN      \] /  { name = $4; n = 0; delete keep }
      name != ""          { if (n < 300) keep[n++] = $0 }
      /^\[  FAILED  \] [^0-9]/ && $4 == name { print "---- output of " name " ----"; for (i = 0; i < n; i++) print keep[i]; name = "" }
      /^\[       OK \] / { name = "" }'
    printf '%s\n' "$out" | tail -60
  fi
}
start=$(date +%s)
for t in "$B"/tests/test_*; do [ -x "$t" ] && run "$t"; done
run tests/openapi/validate.sh
seeds="$B/fuzz/inputs"
rm -rf "$seeds" && mkdir -p "$seeds/corpus-gguf"
for s in fuzz/run_*.sh; do FUZZ_SEED_ONLY="$seeds" "$s" >/dev/null 2>&1 || echo "error: $s could not write its seeds"; done
"$B/fuzz/seeds" "$seeds/corpus-gguf" >/dev/null || echo "error: $B/fuzz/seeds could not write the GGUF seeds"
for t in "$B"/fuzz/fuzz_*; do [ -x "$t" ] && run "$t" "$seeds/corpus-${t##*/fuzz_}" "fuzz/regress/${t##*/fuzz_}"; done
for t in "$B"/e2e/test_*; do [ -x "$t" ] && run "$t"; done
echo
[ ${#failed_bins[@]} -gt 0 ] && echo "failing: ${failed_bins[*]}"
echo "suite time: $(( $(date +%s) - start ))s"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ ${#failed_bins[@]} -eq 0 ]
