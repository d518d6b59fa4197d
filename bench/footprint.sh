#!/usr/bin/env bash
# bench/footprint.sh - memory footprint of the gpupool coordinator.
#
# What it measures: the coordinator's resident memory (VmRSS from
# /proc/PID/status) at three points of one run, plus its on-disk store:
#   baseline   right after start, no node, no task           (the baseline)
#   nodes      with NODES (100) registered nodes heartbeating every second
#   tasks      the same plus TASKS (10,000) stored async tasks, all finished
# and the peak (VmHWM), the ratios to the baseline and the size of the store
# directory (gpupool.db + WAL).
#
# The nodes are simulated: a small Python driver (stdlib only) registers them
# on the control-plane API the workers use (POST /internal/v1/register) and
# keeps them alive (POST /internal/v1/heartbeat, ~1 s), each with a unique
# fingerprint.  Every node's address is one real, fast `gpupool sim-engine`
# (--ttft-ms 0 --tps 0), so dispatched tasks really run and succeed.  No
# worker processes are started (100 of them would swamp a 2-core machine).
#
# Run:  bench/footprint.sh      (builds build-bench/gpupool if missing)
# Env:  NODES=100 TASKS=10000 CONCURRENCY=4 (task submitters)  GPUPOOL=binary
# Logs go to bench/out/ (gitignored).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT="$ROOT/bench/out"
BIN=${GPUPOOL:-$ROOT/build-bench/gpupool}
NODES=${NODES:-100} TASKS=${TASKS:-10000} CONCURRENCY=${CONCURRENCY:-4}
MODEL=sim-llama-8b TOKEN=bench-footprint-token

die() { echo "footprint.sh: $*" >&2; exit 1; }

need_pkgs=()
command -v curl >/dev/null || need_pkgs+=(curl)
command -v python3 >/dev/null || need_pkgs+=(python3)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}"
fi
if [ ! -x "$BIN" ]; then
  [ -z "${GPUPOOL:-}" ] || die "$BIN is not executable"
  make -C "$ROOT" B=build-bench build-bench/gpupool >/dev/null || die "build failed"
fi

TMP=$(mktemp -d /tmp/gpupool-footprint.XXXXXX)
mkdir -p "$OUT"
. "$ROOT/bench/lib.sh"   # PIDS, cleanup at exit, wait_port
kib() { awk -v k="$2" '$1==k":"{print $2}' "/proc/$1/status"; }   # kib PID VmRSS
metric() { curl -fsS --max-time 5 "http://127.0.0.1:$CPORT/metrics" | awk -v m="$1" '$1==m{print $2; f=1} END{if(!f) print 0}'; }

# The driver: `nodes URL N SIMURL READYFILE` registers and heartbeats forever;
# `tasks URL N CONC` submits N tasks over CONC keep-alive connections.
cat >"$TMP/driver.py" <<'EOF'
import http.client, json, os, sys, threading, time, urllib.parse
TOKEN = os.environ["TOKEN"]; MODEL = os.environ["MODEL"]
def conn(url):
    u = urllib.parse.urlsplit(url); return http.client.HTTPConnection(u.hostname, u.port, timeout=10)
def post(c, path, body, bearer=None):
    h = {"Content-Type": "application/json"}
    if bearer: h["Authorization"] = "Bearer " + bearer
    c.request("POST", path, json.dumps(body), h); r = c.getresponse(); data = r.read()
    return r.status, (json.loads(data) if data else {})
def nodes(url, n, sim, ready):
    c = conn(url); state = []
    for i in range(n):
        rep = {"name": "sim-node-%03d" % i, "fingerprint": "%064x" % (0xb0b0 + i),
               "address": sim, "inflight": 0, "ready": True,
               "gpus": [{"index": 0, "name": "Simulated GPU", "uuid": "GPU-sim-%03d" % i,
                         "total_bytes": 24 << 30, "free_bytes": 20 << 30}],
               "engines": [{"kind": "sim", "url": sim, "healthy": True, "models": [MODEL], "slots": 4}]}
        st, ans = post(c, "/internal/v1/register", rep, TOKEN)
        if st != 200: sys.exit("register %d: HTTP %d %s" % (i, st, ans))
        state.append([rep, ans["node_id"], ans["node_token"], 0])
    open(ready, "w").write("%d\n" % n)
    while True:
        t0 = time.time()
        for s in state:
            rep, nid, tok, seq = s; s[3] = seq = seq + 1
            try:
                st, ans = post(c, "/internal/v1/heartbeat", dict(rep, node_id=nid, seq=seq), tok)
                if st == 200 and ans.get("node_token"): s[2] = ans["node_token"]
                elif st != 200: print("heartbeat %s: HTTP %d %s" % (nid, st, ans), flush=True)
            except Exception as e:
                print("heartbeat error:", e, flush=True); c.close(); c = conn(url)
        time.sleep(max(0.0, 1.0 - (time.time() - t0)))
def tasks(url, n, conc):
    body = {"type": "chat", "model": MODEL, "input": {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}}
    ok = [0] * conc; bad = []
    def run(k):
        c = conn(url)
        for _ in range(k[1]):
            st, ans = post(c, "/v1/tasks", body)
            if st == 202: ok[k[0]] += 1
            else: bad.append((st, ans))
    per = [(i, n // conc + (1 if i < n % conc else 0)) for i in range(conc)]
    th = [threading.Thread(target=run, args=(p,)) for p in per]
    t0 = time.time(); [t.start() for t in th]; [t.join() for t in th]
    dt = time.time() - t0
    print("submitted %d tasks in %.1f s (%.0f/s), %d refused %s" % (sum(ok), dt, sum(ok) / dt, len(bad), bad[:1]))
    sys.exit(0 if sum(ok) == n else 1)
if sys.argv[1] == "nodes": nodes(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5])
else: tasks(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
EOF
export TOKEN MODEL

# A fast simulator that answers every dispatched task.
"$BIN" sim-engine --listen 127.0.0.1:0 --port-file "$TMP/eport" --ttft-ms 0 --tps 0 --slots 64 \
  --model "$MODEL" >"$OUT/footprint-sim.log" 2>&1 &
PIDS+=($!)
EPORT=$(wait_port "$TMP/eport")

"$BIN" serve --listen 127.0.0.1:0 --port-file "$TMP/cport" --data "$TMP/data" --join-token "$TOKEN" \
  --heartbeat-ms 1000 --missed-heartbeats 5 >"$OUT/footprint-coord.log" 2>&1 &
CPID=$!; PIDS+=($CPID)
CPORT=$(wait_port "$TMP/cport")
for _ in $(seq 100); do curl -fsS --max-time 1 "http://127.0.0.1:$CPORT/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
curl -fsS --max-time 1 "http://127.0.0.1:$CPORT/healthz" >/dev/null || die "coordinator not healthy"
sleep 1
RSS0=$(kib "$CPID" VmRSS)
echo "baseline: coordinator pid $CPID, VmRSS $RSS0 KiB"

# 1) NODES simulated nodes, kept alive.
python3 "$TMP/driver.py" nodes "http://127.0.0.1:$CPORT" "$NODES" "http://127.0.0.1:$EPORT" "$TMP/ready" \
  >"$OUT/footprint-driver.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 300); do [ -s "$TMP/ready" ] && break; kill -0 "${PIDS[-1]}" 2>/dev/null || break; sleep 0.1; done
[ -s "$TMP/ready" ] || die "nodes did not register (see $OUT/footprint-driver.log)"
sleep 4   # a few heartbeat rounds
READY=$(metric 'gpupool_nodes{state="ready"}')
[ "$READY" -eq "$NODES" ] || die "$READY of $NODES nodes are ready"
RSS1=$(kib "$CPID" VmRSS)
echo "nodes:    $READY ready, VmRSS $RSS1 KiB"

# 2) TASKS tasks, submitted then run to completion on the simulator.
python3 "$TMP/driver.py" tasks "http://127.0.0.1:$CPORT" "$TASKS" "$CONCURRENCY" | tee "$OUT/footprint-tasks.log" \
  || die "task submission failed"
deadline=$((SECONDS + 150))
while :; do
  done_n=$(( $(metric 'gpupool_tasks{state="succeeded"}') + $(metric 'gpupool_tasks{state="failed"}') ))
  [ "$done_n" -ge "$TASKS" ] && break
  [ $SECONDS -lt $deadline ] || die "only $done_n of $TASKS tasks finished in time"
  sleep 1
done
FAILED=$(metric 'gpupool_tasks{state="failed"}')
sleep 3   # let finished dispatch threads exit
READY2=$(metric 'gpupool_nodes{state="ready"}')
RSS2=$(kib "$CPID" VmRSS); HWM=$(kib "$CPID" VmHWM); THREADS=$(kib "$CPID" Threads)
STORE=$(du -sk "$TMP/data" | cut -f1)
FILES=$(cd "$TMP/data" && ls -l | awk 'NR>1{printf "%s=%dKiB ", $NF, $5/1024}')
kill -0 "$CPID" 2>/dev/null || die "the coordinator died"

{
  echo
  printf '%-44s %10s %8s\n' "coordinator (VmRSS)" KiB "x base"
  printf '%-44s %10d %8.2f\n' "baseline (just started)" "$RSS0" 1
  printf '%-44s %10d %8.2f\n' "with $NODES nodes" "$RSS1" "$(awk -v a="$RSS1" -v b="$RSS0" 'BEGIN{print a/b}')"
  printf '%-44s %10d %8.2f\n' "with $NODES nodes + $TASKS tasks (finished)" "$RSS2" "$(awk -v a="$RSS2" -v b="$RSS0" 'BEGIN{print a/b}')"
  printf '%-44s %10d %8.2f\n' "peak during the run (VmHWM)" "$HWM" "$(awk -v a="$HWM" -v b="$RSS0" 'BEGIN{print a/b}')"
  echo "growth per node: $(( (RSS1 - RSS0) / NODES )) KiB; per task (not linear, see README): $(awk -v a="$RSS2" -v b="$RSS1" -v n="$TASKS" 'BEGIN{printf "%.2f", (a-b)/n}') KiB"
  echo "tasks failed: $FAILED of $TASKS; nodes still ready: $READY2; coordinator threads now: $THREADS"
  echo "store on disk: $STORE KiB ($FILES)"
} | tee "$OUT/footprint-summary.txt"
