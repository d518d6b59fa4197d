#!/usr/bin/env bash
# bench/coldstart.sh - what a cold start costs: request to first token when
# the worker must start the model's engine first, against the same request
# when the engine is already up, in one run, as a ratio.
#
# A worker with one --load model whose engine is `gpupool sim-engine` started
# with llama-server's flags: it reads the GGUF header (a 1.1 B Llama made by
# bench/make_test_gguf.c, F16, 2.2 GB of which only the header is on disk),
# "loads" for the file's size at LOAD_GBPS, prints llama.cpp's buffer lines
# (which the worker reads as measured memory) and answers with TTFT_MS to
# the first token.  Each round: a streamed request while the engine is
# stopped (cold), then WARM streamed requests while it runs (warm), the last
# with keep_alive 0 so the engine stops again; then wait until the
# coordinator sees it stopped.  Time to first token is curl's
# time_starttransfer: the coordinator answers a stream only once the first
# event has come.
#
# Run:  bench/coldstart.sh          (builds build-bench/gpupool if missing)
# Env:  ROUNDS=5 WARM=3 LOAD_GBPS=2 TTFT_MS=50  GPUPOOL=path (binary to use)
# Logs go to bench/out/ (gitignored).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT="$ROOT/bench/out"
BIN=${GPUPOOL:-$ROOT/build-bench/gpupool}
ROUNDS=${ROUNDS:-5} WARM=${WARM:-3} LOAD_GBPS=${LOAD_GBPS:-2} TTFT_MS=${TTFT_MS:-50}
TOKEN=bench-token MODEL=bench-llama

die() { echo "coldstart.sh: $*" >&2; exit 1; }
command -v curl >/dev/null || die "needs curl"
command -v python3 >/dev/null || die "needs python3"
if [ ! -x "$BIN" ]; then
  [ -z "${GPUPOOL:-}" ] || die "$BIN is not executable"
  make -C "$ROOT" B=build-bench build-bench/gpupool >/dev/null || die "build failed"
fi

TMP=$(mktemp -d /tmp/gpupool-coldstart.XXXXXX)
mkdir -p "$OUT"
. "$ROOT/bench/lib.sh"

# The model file: real Llama metadata and shapes, the weights a hole.
cc -std=c17 -O1 -I "$ROOT/tests/unit" "$ROOT/bench/make_test_gguf.c" -o "$TMP/make_test_gguf" ||
  die "could not build bench/make_test_gguf.c"
"$TMP/make_test_gguf" "$TMP/model.gguf" f16 >/dev/null || die "could not write the model"

"$BIN" serve --listen 127.0.0.1:0 --port-file "$TMP/cport" --data "$TMP/data" --join-token "$TOKEN" \
  --heartbeat-ms 200 >"$OUT/coldstart-coordinator.log" 2>&1 &
PIDS+=($!)
CPORT=$(wait_port "$TMP/cport")
BASE="http://127.0.0.1:$CPORT"
CMD="{self} sim-engine -m {model} --alias {name} --host 127.0.0.1 --port {port} -c {ctx_total} -np {parallel}"
CMD="$CMD --kv-unified -ngl 999 -ctk {cache_type_k} -ctv {cache_type_v} -fa {flash_attn}"
CMD="$CMD --load-gbps $LOAD_GBPS --ttft-ms $TTFT_MS --tps 200"
GPUPOOL_MACHINE_ID=coldstart-bench "$BIN" worker --coordinator "$BASE" --join-token "$TOKEN" \
  --listen 127.0.0.1:0 --port-file "$TMP/wport" --heartbeat-ms 200 --fake-gpu "Bench GPU:24:22" \
  --data "$TMP/worker" --load "$MODEL=$TMP/model.gguf,ctx=2048,keep-alive=600" --engine-cmd "$CMD" \
  >"$OUT/coldstart-worker.log" 2>&1 &
PIDS+=($!)
wait_port "$TMP/wport" >/dev/null

# state MODEL: the engine's state as the coordinator last heard it.
state() {
  curl -fsS --max-time 2 "$BASE/v1/nodes" 2>/dev/null | python3 -c '
import json, sys
for n in json.load(sys.stdin).get("data", []):
    for e in n.get("engines", []):
        if e.get("model") == sys.argv[1]: print(e.get("state", "")); sys.exit()
print("")' "$1"
}
wait_state() {
  for _ in $(seq 200); do [ "$(state "$MODEL")" = "$1" ] && return; sleep 0.05; done
  die "the engine never became $1 (see $OUT/coldstart-worker.log)"
}
wait_state stopped

# ttft [EXTRA_JSON]: ms from request to first token of a streamed chat.
ttft() {
  local body="{\"model\":\"$MODEL\",\"stream\":true,\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]$1}"
  local out
  out=$(curl -sS -N --max-time 120 -o "$TMP/answer" -w '%{http_code} %{time_starttransfer}' "$BASE/v1/chat/completions" \
    -H 'Content-Type: application/json' -d "$body") || die "request failed"
  [ "${out%% *}" = 200 ] || die "HTTP ${out%% *}: $(head -c 300 "$TMP/answer")"
  grep -q '\[simulated\]' "$TMP/answer" || die "no simulated answer: $(head -c 300 "$TMP/answer")"
  python3 -c 'import sys; print(f"{float(sys.argv[1]) * 1000:.1f}")' "${out#* }"
}

echo "cold start vs warm: $ROUNDS rounds, $WARM warm requests each; 2.2 GB model file at $LOAD_GBPS GB/s," \
  "engine TTFT $TTFT_MS ms (simulated engine)"
COLD=() WARMS=()
for r in $(seq "$ROUNDS"); do
  c=$(ttft "")
  COLD+=("$c")
  line="round $r: cold ${c} ms, warm"
  for i in $(seq "$WARM"); do
    extra=""
    [ "$i" -eq "$WARM" ] && extra=',"keep_alive":0'   # the last one lets the engine go
    w=$(ttft "$extra")
    WARMS+=("$w")
    line="$line ${w}"
  done
  echo "$line ms"
  wait_state stopped
done

python3 - "${COLD[*]}" "${WARMS[*]}" <<'EOF'
import statistics, sys
cold = [float(x) for x in sys.argv[1].split()]
warm = [float(x) for x in sys.argv[2].split()]
c, w = statistics.median(cold), statistics.median(warm)
print(f"\ncold start  median {c:8.1f} ms  (min {min(cold):.1f}, max {max(cold):.1f})")
print(f"warm        median {w:8.1f} ms  (min {min(warm):.1f}, max {max(warm):.1f})")
print(f"cold/warm   {c / w:8.1f}x")
print(f"cold - warm {c - w:8.1f} ms  (the engine's start: load time plus the worker's start-up and checks)")
EOF
starts=$(grep -c "is up at" "$OUT/coldstart-worker.log" || true)
echo "engine starts in the worker's log: $starts (one per round expected: $ROUNDS)"
grep -m1 "measured on the GPU" "$OUT/coldstart-worker.log" | sed 's/.*\[worker\] /worker: /' || true
