#!/usr/bin/env bash
# Fuzz http/wire (the upstream answer reader) with libFuzzer (+ASan/UBSan)
# for a bounded time.  Not part of CI.
# Usage: fuzz/run_wire.sh [seconds]   (default 60)
# Crashes land in fuzz/out/wire-crash-*, the corpus in fuzz/out/corpus-wire/.
# Needs clang with libFuzzer (fuzz/run.sh installs it when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-${FUZZ_SECONDS:-60}}
. fuzz/lib.sh
CORPUS=$OUT/corpus-wire
mkdir -p "$CORPUS"
fuzz_find_cc fuzz/run_wire.sh
fuzz_build wire "src/http/wire.c src/util/buf.c src/util/str.c" "jansson"

# Seeds (the first byte picks how the rest is split).
seed() { printf "$2" >"$CORPUS/seed-$1"; }
seed length  '\003HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n{"a":1}'
seed chunked '\005HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4;x=1\r\nabcd\r\n0\r\nT: t\r\n\r\n'
seed close   '\001HTTP/1.0 200 OK\r\nConnection: close\r\n\r\nto the end'
seed interim '\002HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n'

fuzz_run wire "$CORPUS" "$SECS"
