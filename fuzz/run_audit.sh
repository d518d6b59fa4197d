#!/usr/bin/env bash
# Fuzz the audit log's and webhooks' parsers of outside data (api/audit_rec,
# api/webhook_rec) with libFuzzer (+ASan/UBSan) for a bounded time.  Not part
# of CI.  Usage: fuzz/run_audit.sh [seconds]   (default 60)
# Crashes land in fuzz/out/audit-crash-*, the corpus in fuzz/out/corpus-audit/.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-${FUZZ_SECONDS:-60}}
. fuzz/lib.sh
CORPUS=$OUT/corpus-audit
mkdir -p "$CORPUS"
fuzz_find_cc fuzz/run_audit.sh
fuzz_build audit "src/api/audit_rec.c src/api/webhook_rec.c src/policy/detect.c src/policy/redact.c src/util/ids.c" \
    "libpcre2-8 jansson libcrypto"

seed() { printf '%s' "$2" >"$CORPUS/seed-$1"; }
seed json  'x{"id":"task_4111111111111111","messages":[{"content":"mail bob\u0040example.com Secret Project"}]}'
seed sse   'd data: {"x":"call 13800138000"}\n\n'
seed url   'http://[fd00::1]:8080/hook?x=1'
seed url2  'https://user@h:99999/'
seed since '15m'
seed task  '{"id":"task_abc","status":"queued"}'

fuzz_run audit "$CORPUS" "$SECS"
