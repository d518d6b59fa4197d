#!/usr/bin/env bash
# Fuzz what peer file sharing parses (http/range, worker/peerauth) with
# libFuzzer (+ASan/UBSan) for a bounded time.  Not part of CI.
# Usage: fuzz/run_peerfiles.sh [seconds]   (default 60)
# Crashes land in fuzz/out/peerfiles-crash-*, the corpus in fuzz/out/corpus-peerfiles/.
# Needs clang with libFuzzer (fuzz/run.sh installs it when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-${FUZZ_SECONDS:-60}}
. fuzz/lib.sh
CORPUS=$OUT/corpus-peerfiles
mkdir -p "$CORPUS"
fuzz_find_cc fuzz/run_peerfiles.sh
fuzz_build peerfiles "src/http/range.c src/worker/peerauth.c src/util/ids.c src/util/err.c" "libcrypto"

# Seeds: an 8-byte file size, then the text.
seed() { { printf '\x00\x10\x00\x00\x00\x00\x00\x00'; printf '%s' "$2"; } >"$CORPUS/seed-$1"; }
seed open   'bytes=100-'
seed closed 'bytes=0-1023'
seed suffix 'bytes=-500'
seed multi  'bytes=0-1,5-9'
seed cr     'bytes 10-19/4096'
seed star   'bytes */4096'
seed token  '1700000000.0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef'

fuzz_run peerfiles "$CORPUS" "$SECS"
