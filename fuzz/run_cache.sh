#!/usr/bin/env bash
# Fuzz the semantic cache's pure parts (policy/embed, cache_key, cache_replay)
# with libFuzzer (+ASan/UBSan) for a bounded time.  Not part of CI.
# Usage: fuzz/run_cache.sh [seconds]   (default 60)
# Crashes land in fuzz/out/cache-crash-*, the corpus in fuzz/out/corpus-cache/.
# Needs clang with libFuzzer (fuzz/run.sh installs it when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-${FUZZ_SECONDS:-60}}
. fuzz/lib.sh
CORPUS=$OUT/corpus-cache
mkdir -p "$CORPUS"
fuzz_find_cc fuzz/run_cache.sh
fuzz_build cache "src/policy/embed.c src/policy/cache_key.c src/policy/cache_replay.c src/util/buf.c src/util/str.c" "jansson libcrypto" -lm

# Seeds: mixed scripts, contractions, numerals, a chat body, a stream.
seed() { printf '%s' "$2" >"$CORPUS/seed-$1"; }
seed text  'How’s it going? I can'"'"'t log in, 1,000 × 2 = 2000；怎么重置密码？二十五个 ＡＢＣ'
seed chat  '{"model":"m","temperature":0,"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"hi"}]},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"user","content":"how old is he?"}]}'
seed done  '{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"total_tokens":1}}'
printf 'data: {"id":"x","choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"}}]}\r\n\r\ndata: {"id":"x","choices":[{"index":0,"delta":{"content":"lo","tool_calls":[{"index":0,"id":"t","function":{"name":"f","arguments":"{"}}]},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n' >"$CORPUS/seed-sse"
printf '\xff\xfe \xe6\x9c \xc0\xaf don\xe2\x80\x99t' >"$CORPUS/seed-badutf8"

fuzz_run cache "$CORPUS" "$SECS"
