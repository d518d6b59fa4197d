#!/usr/bin/env bash
# Fuzz util/json_skim (through call_sample_parse_answer, the engine-answer
# reader) against jansson with libFuzzer (+ASan/UBSan) for a bounded time.
# Not part of CI.
# Usage: fuzz/run_json_skim.sh [seconds]   (default 60)
# Crashes land in fuzz/out/json_skim-crash-*, the corpus in fuzz/out/corpus-json_skim/.
# Needs clang with libFuzzer (fuzz/run.sh installs it when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-${FUZZ_SECONDS:-60}}
. fuzz/lib.sh
CORPUS=$OUT/corpus-json_skim
mkdir -p "$CORPUS"
fuzz_find_cc fuzz/run_json_skim.sh
fuzz_build json_skim "src/util/json_skim.c src/sched/profile.c" "jansson" -lm

seed() { printf '%s' "$2" >"$CORPUS/seed-$1"; }
seed answer '{"id":"x","choices":[{"index":0,"message":{"role":"assistant","content":"hi \"q\" \u00e9"}}],"usage":{"prompt_tokens":3,"completion_tokens":42},"timings":{"prompt_ms":12.5,"predicted_ms":4.1e2}}'
seed dup    '{"usage":{"completion_tokens":5},"usage":{"completion_tokens":-6},"timings":[1,{"a":null}]}'
seed nested '{"a":[true,false,null,{"usage":{"completion_tokens":1}}],"timings":{"prompt_ms":-0.0E-0}}'
seed bad    '{"usage":{"completion_tokens":05},}'

fuzz_run json_skim "$CORPUS" "$SECS"
