#!/usr/bin/env bash
# Runs every unit and end-to-end test binary of a build (default build-asan),
# and the OpenAPI document's validation, and prints one closing line:
# "N passed, N failed".
set -u
B=${1:-build-asan}
export GPUPOOL_BIN="$B/gpupool"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
passed=0 failed=0 failed_bins=()
run() {
  local bin=$1 out rc n f
  out=$("$bin" 2>&1); rc=$?
  printf '%s\n' "$out" | grep -E '^\[ *(RUN|OK|PASSED|FAILED|ERROR|SKIPPED) *\]|^\[=+\]|error:|Failure' | grep -v '^\[ RUN'
  n=$(printf '%s\n' "$out" | sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' | tail -1)
  f=$(printf '%s\n' "$out" | sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' | tail -1)
  passed=$((passed + ${n:-0}))
  if [ "$rc" -ne 0 ]; then
    failed=$((failed + ${f:-1})); failed_bins+=("$bin")
    printf '%s\n' "$out" | tail -60
  fi
}
start=$(date +%s)
for t in "$B"/tests/test_*; do [ -x "$t" ] && run "$t"; done
run tests/openapi/validate.sh
for t in "$B"/e2e/test_*; do [ -x "$t" ] && run "$t"; done
echo
[ ${#failed_bins[@]} -gt 0 ] && echo "failing: ${failed_bins[*]}"
echo "suite time: $(( $(date +%s) - start ))s"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ ${#failed_bins[@]} -eq 0 ]
