#!/usr/bin/env bash
# bench/peerfile.sh - what a model file costs to fetch from a peer: one
# `gpupool fetch` of a GGUF from a worker's front door over loopback (token
# check, sendfile on the serving side, streaming SHA-256 and fsync on the
# fetching side), against `cp` of the same file (then fsync, so both end
# with the bytes on disk), in the same run, as MB/s and a ratio.  Since cp
# copies in the kernel (copy_file_range), `cat SRC > DST` (then fsync), which
# moves the bytes through user space as a download must, is timed too.
#
# The file: a Llama GGUF made by bench/make_test_gguf.c (SIZE picks the
# shape: 1G or 512M), its tensor region filled from /dev/urandom so every
# byte is real.  A coordinator and one worker holding it with --load; the
# worker checks it against its sha256 at start and offers it.  The source file is read once
# before the runs, so both read it from the page cache; each round writes a
# new destination file.
#
# Run:  bench/peerfile.sh          (builds build-bench/gpupool if missing)
# Env:  SIZE=1G|512M ROUNDS=3  GPUPOOL=path (binary to use)
# Logs go to bench/out/ (gitignored).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT="$ROOT/bench/out"
BIN=${GPUPOOL:-$ROOT/build-bench/gpupool}
SIZE=${SIZE:-1G} ROUNDS=${ROUNDS:-3}
TOKEN=bench-token

die() { echo "peerfile.sh: $*" >&2; exit 1; }
command -v curl >/dev/null || die "needs curl"
command -v python3 >/dev/null || die "needs python3"
if [ ! -x "$BIN" ]; then
  [ -z "${GPUPOOL:-}" ] || die "$BIN is not executable"
  make -C "$ROOT" B=build-bench build-bench/gpupool >/dev/null || die "build failed"
fi
case "$SIZE" in
  1G)   SHAPE="8 2048 5632 16 16 32000" ;;   # about 1.08 GB
  512M) SHAPE="4 2048 5632 16 16 32000" ;;   # about 0.67 GB
  *) die "SIZE is 1G or 512M" ;;
esac

TMP=$(mktemp -d "${TMPDIR:-/tmp}/gpupool-peerfile.XXXXXX")
mkdir -p "$OUT"
. "$ROOT/bench/lib.sh"

cc -std=c17 -O1 -I "$ROOT/tests/unit" "$ROOT/bench/make_test_gguf.c" -o "$TMP/make_test_gguf" ||
  die "could not build bench/make_test_gguf.c"
# shellcheck disable=SC2086
"$TMP/make_test_gguf" "$TMP/model.gguf" f16 $SHAPE >/dev/null || die "could not write the model"
BYTES=$(stat -c %s "$TMP/model.gguf")
MIB=$((BYTES / 1048576))
# Real bytes from 4 MiB on (the header is well under that).
dd if=/dev/urandom of="$TMP/model.gguf" bs=1M seek=4 count=$((MIB - 4)) conv=notrunc status=none
SHA=$(sha256sum "$TMP/model.gguf" | cut -d' ' -f1)

"$BIN" serve --listen 127.0.0.1:0 --port-file "$TMP/cport" --data "$TMP/data" --join-token "$TOKEN" \
  --heartbeat-ms 200 >"$OUT/peerfile-coordinator.log" 2>&1 &
PIDS+=($!)
CPORT=$(wait_port "$TMP/cport")
BASE="http://127.0.0.1:$CPORT"
GPUPOOL_MACHINE_ID=peerfile-bench "$BIN" worker --coordinator "$BASE" --join-token "$TOKEN" \
  --listen 127.0.0.1:0 --port-file "$TMP/wport" --heartbeat-ms 200 --fake-gpu "Bench GPU:24:22" \
  --data "$TMP/worker" --load "bench=$TMP/model.gguf,ctx=2048,sha256=$SHA" --engine-cmd "true" \
  >"$OUT/peerfile-worker.log" 2>&1 &
PIDS+=($!)
WPORT=$(wait_port "$TMP/wport")
# The worker hashes the file before it offers it.
for _ in $(seq 600); do
  grep -q "sharing bench's file with peers" "$OUT/peerfile-worker.log" && break
  sleep 0.1
done
grep -q "sharing bench's file with peers" "$OUT/peerfile-worker.log" || die "the worker never offered the file"

cat "$TMP/model.gguf" >/dev/null   # into the page cache, for both
now_ns() { date +%s%N; }
CP=() CAT=() FETCH=()
echo "peer file transfer vs cp: $BYTES bytes ($SIZE shape), $ROUNDS rounds, loopback, page cache warm"
for r in $(seq "$ROUNDS"); do
  rm -f "$TMP/cp.out" "$TMP/cat.out" "$TMP/fetch.out"
  t0=$(now_ns)
  cp "$TMP/model.gguf" "$TMP/cp.out"
  sync "$TMP/cp.out"
  ta=$(now_ns)
  cat "$TMP/model.gguf" >"$TMP/cat.out"
  sync "$TMP/cat.out"
  rm -f "$TMP/cp.out" "$TMP/cat.out"
  t1=$(now_ns)
  "$BIN" fetch --from "http://127.0.0.1:$WPORT" --sha256 "$SHA" --out "$TMP/fetch.out" --join-token "$TOKEN" \
    --quiet >>"$OUT/peerfile-fetch.log" 2>&1 || die "gpupool fetch failed (see $OUT/peerfile-fetch.log)"
  t2=$(now_ns)
  cmp -s "$TMP/model.gguf" "$TMP/fetch.out" || die "the fetched file differs"
  CP+=($((ta - t0))) CAT+=($((t1 - ta))) FETCH+=($((t2 - t1)))
  python3 -c 'import sys; b=int(sys.argv[1]); c=int(sys.argv[2]); a=int(sys.argv[3]); f=int(sys.argv[4])
print(f"round {sys.argv[5]}: cp {b/c*1e3:8.1f} MB/s   cat {b/a*1e3:8.1f} MB/s   gpupool fetch {b/f*1e3:8.1f} MB/s")' \
    "$BYTES" "$((ta - t0))" "$((t1 - ta))" "$((t2 - t1))" "$r"
done

python3 - "$BYTES" "${CP[*]}" "${CAT[*]}" "${FETCH[*]}" <<'PY'
import statistics, sys
b = int(sys.argv[1])
cp = statistics.median(int(x) for x in sys.argv[2].split())
ca = statistics.median(int(x) for x in sys.argv[3].split())
fe = statistics.median(int(x) for x in sys.argv[4].split())
print(f"\ncp + fsync     median {b / cp * 1e3:8.1f} MB/s  (copy_file_range: the kernel copies)")
print(f"cat + fsync    median {b / ca * 1e3:8.1f} MB/s  (read and write through user space)")
print(f"gpupool fetch  median {b / fe * 1e3:8.1f} MB/s  (HTTP over loopback, SHA-256 checked, fsync)")
print(f"fetch / cp     {cp / fe:8.2f}x the throughput of cp")
print(f"fetch / cat    {ca / fe:8.2f}x the throughput of cat")
PY
