#!/usr/bin/env bash
# bench/batch.sh - how close a batch gets to the pool's capacity.
#
# One batch of N short chat items (POST /v1/batches) over three simulated
# workers of different speeds, once per placement policy, each on a fresh
# pool in the same run.  Prints per policy the wall time from submission to
# the batch's completion, the ideal wall time (total work / total capacity:
# items / sum over nodes of slots / per-item service time, where a node's
# service time is ttft + max_tokens / tps), the ratio of the two, and how the
# items spread over the nodes.
#
#   fast    4 slots, ttft 20 ms, 400 tok/s
#   medium  3 slots, ttft 40 ms, 200 tok/s
#   slow    2 slots, ttft 80 ms, 100 tok/s
#
# Run:  bench/batch.sh              (builds build-bench/gpupool)
# Env:  N=2000 MAX_TOKENS=8 POLICIES="gpupool round-robin" POLL_MS=50
#       GPUPOOL=path  binary to use (default build-bench/gpupool, rebuilt if sources changed)
# Logs go to bench/out/ (gitignored).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT="$ROOT/bench/out"
BIN=${GPUPOOL:-$ROOT/build-bench/gpupool}
N=${N:-2000} MAX_TOKENS=${MAX_TOKENS:-8} POLL_MS=${POLL_MS:-50}
POLICIES=${POLICIES:-gpupool round-robin}
TOKEN=bench-batch-token
# name slots ttft_ms tps
NODES=("fast 4 20 400" "medium 3 40 200" "slow 2 80 100")

die() { echo "batch.sh: $*" >&2; exit 1; }
command -v curl >/dev/null && command -v python3 >/dev/null || die "needs curl and python3"
mkdir -p "$OUT"
if [ -z "${GPUPOOL:-}" ]; then
  nice make -C "$ROOT" B=build-bench build-bench/gpupool >/dev/null || die "build failed"
fi
[ -x "$BIN" ] || die "$BIN is not executable"

TMP=$(mktemp -d /tmp/gpupool-batch.XXXXXX)
. "$ROOT/bench/lib.sh"

# The batch body, written once and sent to every pool.
python3 - "$N" "$MAX_TOKENS" >"$TMP/batch.json" <<'EOF'
import json, sys
n, mt = int(sys.argv[1]), int(sys.argv[2])
print(json.dumps({"type": "chat", "model": "sim-llama-8b", "max_attempts": 5,
                  "inputs": [{"custom_id": "i%d" % i, "body": {"messages": [{"role": "user", "content": "item %d" % i}],
                                                                "max_tokens": mt}} for i in range(n)]}))
EOF

IDEAL_MS=$(python3 -c "
import sys
n, mt = $N, $MAX_TOKENS
cap = 0.0
for line in '''$(printf '%s\n' "${NODES[@]}")'''.splitlines():
    name, slots, ttft, tps = line.split()
    cap += int(slots) / ((int(ttft) + mt / float(tps) * 1000) / 1000.0)
print(int(n / cap * 1000))")

run_policy() {
  local policy=$1 d="$TMP/$1"
  mkdir -p "$d"
  "$BIN" serve --listen 127.0.0.1:0 --port-file "$d/cport" --data "$d/data" --join-token "$TOKEN" \
    --placement "$policy" --hedge-factor 0 >"$OUT/batch-$policy-coord.log" 2>&1 &
  local cpid=$!; PIDS+=("$cpid")
  local cport; cport=$(wait_port "$d/cport" "$cpid")
  local line name slots ttft tps
  for line in "${NODES[@]}"; do
    read -r name slots ttft tps <<<"$line"
    GPUPOOL_MACHINE_ID="bench-batch-$name" "$BIN" worker --coordinator "http://127.0.0.1:$cport" \
      --join-token "$TOKEN" --listen 127.0.0.1:0 --port-file "$d/wport-$name" --name "$name" \
      --fake-gpu "RTX 3060:12:10" --engine sim --sim-args "--slots $slots --ttft-ms $ttft --tps $tps" \
      >"$OUT/batch-$policy-worker-$name.log" 2>&1 &
    PIDS+=($!)
  done
  for _ in $(seq 150); do
    n=$(curl -fsS --max-time 2 "http://127.0.0.1:$cport/v1/nodes" | python3 -c '
import json,sys; print(sum(1 for x in json.load(sys.stdin)["data"] if x["state"]=="ready"))' 2>/dev/null || echo 0)
    [ "$n" = 3 ] && break
    sleep 0.2
  done
  [ "$n" = 3 ] || die "the $policy pool did not get three ready nodes (see $OUT/batch-$policy-*.log)"
  python3 - "http://127.0.0.1:$cport" "$TMP/batch.json" "$policy" "$IDEAL_MS" "$POLL_MS" <<'EOF'
import collections, json, sys, time, urllib.request
base, body_path, policy, ideal_ms, poll = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
def call(method, path, data=None):
    rq = urllib.request.Request(base + path, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(rq, timeout=120) as r:
        return json.loads(r.read())
body = open(body_path, "rb").read()
t0 = time.monotonic()
b = call("POST", "/v1/batches", body)
accepted = time.monotonic()
while b["status"] == "in_progress":
    time.sleep(poll / 1000.0)
    b = call("GET", "/v1/batches/" + b["id"])
wall = (time.monotonic() - t0) * 1000
c = b["request_counts"]
# Which node ran each item: its task's node.
nodes = collections.Counter()
names = {n["id"]: n["name"] for n in call("GET", "/v1/nodes")["data"]}
for it in call("GET", "/v1/batches/%s/results" % b["id"])["data"]:
    t = call("GET", "/v1/tasks/" + it["task_id"])
    nodes[names.get(t["node"], t["node"])] += 1
spread = " ".join("%s=%d" % kv for kv in sorted(nodes.items()))
print("%-12s wall %6.0f ms  ideal %6d ms  ratio %.2fx  submit %4.0f ms  ok %d failed %d  %s" % (
    policy, wall, ideal_ms, wall / ideal_ms, (accepted - t0) * 1000, c["completed"], c["failed"], spread))
EOF
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  PIDS=()
}

echo "== a batch of $N chat items (max_tokens $MAX_TOKENS) over: ${NODES[*]} (name slots ttft_ms tps)"
for policy in $POLICIES; do run_policy "$policy"; done
