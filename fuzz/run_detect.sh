#!/usr/bin/env bash
# Fuzz the sensitive-data detector (policy/detect, policy/redact) with
# libFuzzer (+ASan/UBSan) for a bounded time.  Not part of CI.
# Usage: fuzz/run_detect.sh [seconds]   (default 60)
# Crashes land in fuzz/out/detect-crash-*, the corpus in fuzz/out/corpus-detect/.
# Needs clang with libFuzzer (fuzz/run.sh installs it when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-${FUZZ_SECONDS:-60}}
. fuzz/lib.sh
CORPUS=$OUT/corpus-detect
mkdir -p "$CORPUS"
fuzz_find_cc fuzz/run_detect.sh
fuzz_build detect "src/policy/detect.c src/policy/redact.c" "libpcre2-8 jansson"

# Seeds: the shapes the detectors look for, in and around CJK and JSON.
seed() { printf '%s' "$2" >"$CORPUS/seed-$1"; }
seed id    '我的身份证号是11010119900307777X，谢谢'
seed mob   '手机 +86 138-0013-8000 / 008613912345678'
seed card  '卡号 6222 0212 3456 7890 123 或 4111-1111-1111-1111'
seed mail  '联系 zhang.san+tag@mail.example.com.cn。'
seed kw    '这是机密 SECRET project EMP-123456 token: abc'
seed chat  '{"model":"m","messages":[{"role":"system","content":"机密"},{"role":"user","content":[{"type":"text","text":"a@b.cn"}]},{"role":"assistant","tool_calls":[{"function":{"arguments":"{\"p\":\"\\u673a\\u5bc6 13800138000\"}"}}]}],"prompt":["x"],"input":"y"}'
printf '\xff\xfe 13800138000 \xe6\x9c \xc0\xaf' >"$CORPUS/seed-badutf8"

fuzz_run detect "$CORPUS" "$SECS"
