#!/usr/bin/env bash
# Fuzz the answer, input-line and rollout-body parsers (policy/compare,
# sched/rollout) with libFuzzer (+ASan/UBSan) for a bounded time.  Not part
# of CI.
# Usage: fuzz/run_compare.sh [seconds]   (default 60)
# Crashes land in fuzz/out/compare-crash-*, the corpus in fuzz/out/corpus-compare/.
# Needs clang with libFuzzer (fuzz/run.sh installs it when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-${FUZZ_SECONDS:-60}}
. fuzz/lib.sh
CORPUS=$OUT/corpus-compare
mkdir -p "$CORPUS"
fuzz_find_cc fuzz/run_compare.sh
fuzz_build compare "src/policy/compare.c src/sched/rollout.c" "jansson" -lm

seed() { printf '%s' "$2" >"$CORPUS/seed-$1"; }
seed bare    '{"id":1,"label":"a","score":1.5,"tags":["x"]}'
seed fence   'Here:\n```json\n{"a": {"b": [1, 2.0, null]}}\n```\nok'
seed prose   'Sure! {"a": 1} and } more {'
seed chat    '{"messages":[{"role":"user","content":"hi"}],"temperature":0.2,"stream":true}'
seed prompt  '{"prompt":"x","max_tokens":3}'
seed rollout '{"name":"chat","stable":"v1","canary":"v2","steps":[5,25,50,100],"max_error_rate":0.05,"max_p95_ms":900,"window":100,"window_s":60,"min_samples":20,"auto_advance_s":1.5}'

fuzz_run compare "$CORPUS" "$SECS"
