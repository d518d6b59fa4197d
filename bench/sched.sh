#!/usr/bin/env bash
# bench/sched.sh - scheduling quality of the coordinator on a heterogeneous pool.
#
# What it measures: one bursty, seeded task workload (Poisson arrivals plus
# bursts above capacity; two models; two priority classes; mixed prompt and
# output lengths), replayed identically against a fresh simulated pool once
# per placement policy:
#   gpupool            the coordinator's own policy (priority queue, places a
#                      task only on a free slot, by score)
#   round-robin        what GPUStack and LiteLLM do by default
#   least-connections  what Paddler does
# and prints, per policy, p50/p95/p99 latency per priority class, overall
# p95, throughput, cold model loads and failures, then the targets:
#   overall p95  gpupool / round-robin        <= 0.6x
#   overall p95  gpupool / least-connections  <= 0.8x
#   p95 high / low priority under gpupool     <= 0.5x, under load: a run of
#                                              its own at PRIO_RATE (the pool
#                                              offered more than it can do)
# A second phase kills a node mid-run under the gpupool policy (kill -9 of
# the worker and its engines, and a node that freezes: SIGSTOP, no RST, no
# heartbeats) and checks that the tasks it was running finish within
# 3 heartbeat intervals plus their run time.
#
# The pool: three workers with fake GPUs and simulated engines of different
# speeds.  A small model is loaded on every node from the start; a large one
# is started on demand (--load, keep-alive) where the planner says it fits,
# and each start takes LOAD_MS, so a policy that scatters it pays for loads.
#   fast    16 GB (11.5 free)  small: 4 slots, ttft 60 ms, 90 tok/s   large: 2 slots, 120 ms, 45 tok/s
#   medium  12 GB  (7.5 free)  small: 3 slots, 100 ms, 55 tok/s       large: 2 slots, 200 ms, 27 tok/s
#   slow     8 GB  (3.5 free)  small: 2 slots, 180 ms, 30 tok/s       large: needs 6.8 GiB, does not fit
#
# Run:  bench/sched.sh              (builds build-bench/gpupool and the driver)
# Env:  POLICIES="gpupool round-robin least-connections"  (those `serve --help` lists)
#       SEED=1 DURATION=40 RATE=3.6 BURST_EVERY=12 BURST_LEN=4 BURST_X=3
#       LARGE_FRAC=0.2 HIGH_FRAC=0.3 DRAIN=30 POLL_MS=25
#       LOAD_MS=3000 KEEP_ALIVE=10 HB_MS=1000
#       PRIO_RATE=4.5 (the priority run's base rate; "" skips it)
#       KILL_MODES="kill stop" ("" skips the node-kill phase) KILL_DURATION=20 KILL_AT=8 KILL_RATE=1.5 KILL_LARGE_FRAC=0.1
#       KILL_MIN=3 (kill once this many tasks run on the node, at most 5 s after KILL_AT)
#       BASELINE_ARGS="--hedge-factor 0"  extra `serve` options for round-robin and least-connections
#       GPUPOOL=path  binary to use (default build-bench/gpupool, rebuilt if sources changed)
# Per-task CSVs, driver outputs and logs go to bench/out/ (gitignored).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT="$ROOT/bench/out"
BIN=${GPUPOOL:-$ROOT/build-bench/gpupool}
DRIVER="$OUT/sched_load"
SEED=${SEED:-1} DURATION=${DURATION:-40} RATE=${RATE:-3.6}
BURST_EVERY=${BURST_EVERY:-12} BURST_LEN=${BURST_LEN:-4} BURST_X=${BURST_X:-3}
LARGE_FRAC=${LARGE_FRAC:-0.2} HIGH_FRAC=${HIGH_FRAC:-0.3} DRAIN=${DRAIN:-30} POLL_MS=${POLL_MS:-25}
LOAD_MS=${LOAD_MS:-3000} KEEP_ALIVE=${KEEP_ALIVE:-10} HB_MS=${HB_MS:-1000}
KILL_MODES=${KILL_MODES-kill stop} KILL_DURATION=${KILL_DURATION:-20} KILL_AT=${KILL_AT:-8} KILL_RATE=${KILL_RATE:-1.5} KILL_LARGE_FRAC=${KILL_LARGE_FRAC:-0.1}
KILL_MIN=${KILL_MIN:-3}
PRIO_RATE=${PRIO_RATE-4.5}
TOKEN=bench-sched-token

die() { echo "sched.sh: $*" >&2; exit 1; }

# --- dependencies and builds ------------------------------------------------------
need_pkgs=()
command -v curl >/dev/null || need_pkgs+=(curl)
command -v python3 >/dev/null || need_pkgs+=(python3)
command -v pkg-config >/dev/null || need_pkgs+=(pkg-config)
pkg-config --exists libcurl jansson 2>/dev/null || need_pkgs+=(libcurl4-openssl-dev libjansson-dev)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  echo "installing ${need_pkgs[*]}"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}"
fi
mkdir -p "$OUT"
if [ -z "${GPUPOOL:-}" ]; then
  nice make -C "$ROOT" B=build-bench build-bench/gpupool >/dev/null || die "build failed"
fi
[ -x "$BIN" ] || die "$BIN is not executable"
if [ ! -x "$DRIVER" ] || [ "$ROOT/bench/sched_load.c" -nt "$DRIVER" ]; then
  # shellcheck disable=SC2046
  nice "${CC:-cc}" -std=c17 -O2 -Wall -Wextra "$ROOT/bench/sched_load.c" -o "$DRIVER" \
    $(pkg-config --cflags --libs libcurl jansson) -lm -pthread || die "cannot build the driver"
fi
if [ ! -x "$OUT/make_test_gguf" ] || [ "$ROOT/bench/make_test_gguf.c" -nt "$OUT/make_test_gguf" ]; then
  nice "${CC:-cc}" -std=c17 -O1 -I "$ROOT/tests/unit" "$ROOT/bench/make_test_gguf.c" -o "$OUT/make_test_gguf" \
    || die "cannot build make_test_gguf"
fi

# Which policies this coordinator has.
HELP=$("$BIN" serve --help 2>&1 || true)
if grep -q -- '--placement' <<<"$HELP"; then
  POLICIES=${POLICIES:-gpupool round-robin least-connections}
  KILL_POLICY=gpupool
  if [ -z "${BASELINE_ARGS+x}" ]; then
    BASELINE_ARGS=""; grep -q -- '--hedge-factor' <<<"$HELP" && BASELINE_ARGS="--hedge-factor 0"
  fi
else
  echo "note: this coordinator has no --placement option; running its built-in policy only (as 'default')"
  POLICIES=default
  KILL_POLICY=default
fi

# --- processes and cleanup -------------------------------------------------------------
TMP=$(mktemp -d /tmp/gpupool-sched.XXXXXX)
. "$ROOT/bench/lib.sh"   # PIDS, wait_port, and the exit trap that calls cleanup
FROZEN=()      # processes a kill phase stopped (SIGSTOP) or killed
# lib.sh's cleanup, plus the frozen processes (a stopped one ignores SIGTERM).
cleanup() {
  for p in "${FROZEN[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || gone "$p"; done
  rm -rf "$TMP"
}

# The large model: a Llama-shaped GGUF (22 layers, Q8_0; the data region is
# a hole) that the planner sizes at about 6.8 GiB for ctx 4096 x 2 slots.
GGUF="$TMP/large.gguf"
"$OUT/make_test_gguf" "$GGUF" q8_0 22 4096 14336 32 8 32000 >/dev/null || die "cannot write $GGUF"
NEED=$("$BIN" plan "$GGUF" --ctx 4096 --parallel 2 2>/dev/null | sed -n 's/^needs \([0-9.]* GiB\).*/\1/p' || true)
[ -n "$NEED" ] || NEED="?"

# An engine that takes LOAD_MS to "load its model", then serves it as the
# simulator at the node's speed for that model.
ENGINE_SH="$TMP/engine.sh"
cat >"$ENGINE_SH" <<EOF
#!/bin/sh
# NAME PORT PARALLEL TTFT_MS TPS LOAD_MS
sleep "\$(awk -v m="\$6" 'BEGIN{printf "%.3f", m/1000}')"
exec "$BIN" sim-engine --model "\$1" --single-model --listen "127.0.0.1:\$2" --slots "\$3" --ttft-ms "\$4" --tps "\$5"
EOF
chmod +x "$ENGINE_SH"

# name  gpu(name:total:free)  small: slots ttft tps   large: parallel ttft tps
NODES=(
  "fast   RTX-4080:16:11.5   4 60 90    2 120 45"
  "medium RTX-3060:12:7.5    3 100 55   2 200 27"
  "slow   GTX-1070:8:3.5     2 180 30   2 360 15"
)

declare -A WPID NODE_ID
CPORT="" CPID=""
POOL_PIDS=()

# start_pool TAG POLICY: a coordinator and the three workers, all ready.
start_pool() {
  local tag=$1 policy=$2 d="$TMP/$1"
  mkdir -p "$d"
  local pl=(); [ "$policy" = default ] || pl=(--placement "$policy")
  # The baselines route as those gateways do: no hedged second attempts.
  local extra=()
  case $policy in round-robin|least-connections) read -r -a extra <<<"$BASELINE_ARGS"; pl+=("${extra[@]}");; esac
  "$BIN" serve --listen 127.0.0.1:0 --port-file "$d/cport" --data "$d/data" --join-token "$TOKEN" \
    --heartbeat-ms "$HB_MS" --missed-heartbeats 3 --queue-max 4096 --queue-timeout-ms 600000 \
    "${pl[@]}" >"$OUT/sched-$tag-coord.log" 2>&1 &
  CPID=$!; PIDS+=("$CPID"); POOL_PIDS=("$CPID")
  CPORT=$(wait_port "$d/cport" "$CPID")
  local line name gpu ss st sp lp lt lk
  for line in "${NODES[@]}"; do
    read -r name gpu ss st sp lp lt lk <<<"$line"
    GPUPOOL_MACHINE_ID="bench-sched-$name" "$BIN" worker --coordinator "http://127.0.0.1:$CPORT" \
      --join-token "$TOKEN" --listen 127.0.0.1:0 --port-file "$d/wport-$name" --name "$name" \
      --heartbeat-ms "$HB_MS" --fake-gpu "${gpu//-/ }" --engine sim \
      --sim-args "--model small:4.5 --slots $ss --ttft-ms $st --tps $sp --seed $SEED" \
      --load "large=$GGUF,ctx=4096,parallel=$lp,keep-alive=$KEEP_ALIVE" \
      --engine-cmd "$ENGINE_SH {name} {port} {parallel} $lt $lk $LOAD_MS" --load-timeout-ms 60000 \
      >"$OUT/sched-$tag-worker-$name.log" 2>&1 &
    WPID[$name]=$!; PIDS+=($!); POOL_PIDS+=($!)
    disown "$!"   # a kill phase kills workers: no "Killed" notice from bash
  done
  for line in "${NODES[@]}"; do read -r name _ <<<"$line"; wait_port "$TMP/$tag/wport-$name" "${WPID[$name]}" >/dev/null; done
  local ok=""
  for _ in $(seq 150); do
    if ok=$(curl -fsS --max-time 2 "http://127.0.0.1:$CPORT/v1/nodes" | python3 -c '
import json,sys
d=json.load(sys.stdin)["data"]
r=[n for n in d if n["state"]=="ready" and "small" in n.get("models",[])]
if len(r)==3: print(" ".join("%s=%s" % (n["name"],n["id"]) for n in r))' 2>/dev/null) && [ -n "$ok" ]; then
      break
    fi
    ok=""; sleep 0.2
  done
  [ -n "$ok" ] || die "the $tag pool did not get three ready nodes (see $OUT/sched-$tag-*.log)"
  local kv
  for kv in $ok; do NODE_ID[${kv%%=*}]=${kv#*=}; done
}

# gone PID: until PID has exited (disowned workers cannot be waited for), deadline 10 s
gone() {
  for _ in $(seq 100); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$1" 2>/dev/null || true
}

stop_pool() {
  local p
  for p in "${POOL_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${POOL_PIDS[@]}"; do wait "$p" 2>/dev/null || gone "$p"; done
  POOL_PIDS=()
}

# cold_loads TAG: engine starts the workers logged, and the coordinator's
# gpupool_cold_starts_total if it has that metric ("-" if not).
cold_loads() {
  local n m
  n=$(cat "$OUT/sched-$1-worker-"*.log | grep -c 'engine for .* is up' || true)
  m=$(curl -fsS --max-time 5 "http://127.0.0.1:$CPORT/metrics" 2>/dev/null |
      awk '$1 ~ /^gpupool_cold_starts_total/ {s+=$NF; f=1} END{if(f) printf "%d", s; else print "-"}')
  echo "$n $m"
}

LOAD_ARGS=(--seed "$SEED" --rate "$RATE" --duration "$DURATION" --burst-every "$BURST_EVERY"
  --burst-len "$BURST_LEN" --burst-x "$BURST_X" --large-frac "$LARGE_FRAC" --high-frac "$HIGH_FRAC"
  --models "small,large" --drain "$DRAIN" --poll-ms "$POLL_MS" --hb-ms "$HB_MS")

# --- the workload, and what the pool can do --------------------------------------------
echo "pool: fast 16 GB / medium 12 GB / slow 8 GB (fake GPUs, simulated engines); 'small' preloaded everywhere,"
echo "      'large' started on demand (needs $NEED; ${LOAD_MS} ms per start, keep-alive ${KEEP_ALIVE} s; fits fast and medium only)"
DESC=$("$DRIVER" "${LOAD_ARGS[@]}" --describe)
echo "$DESC"
# What the pool can do at this workload's mean output length: per engine,
# slots / (ttft + (tokens - 1) / tps), summed per model; the mix then caps it.
awk -v lf="$LARGE_FRAC" -v rate="$RATE" -v bx="$BURST_X" -v dur="$DURATION" \
    -v n="$(sed -n 's/.*, \([0-9]*\) tasks in.*/\1/p' <<<"$DESC")" \
    -v mt="$(sed -n 's/.*mean max_tokens \([0-9.]*\).*/\1/p' <<<"$DESC")" '
BEGIN {
  cs = 4 / (0.060 + (mt - 1) / 90) + 3 / (0.100 + (mt - 1) / 55) + 2 / (0.180 + (mt - 1) / 30)
  cl = 2 / (0.120 + (mt - 1) / 45) + 2 / (0.200 + (mt - 1) / 27)
  cap = cs / (1 - lf); if (cl / lf < cap) cap = cl / lf
  off = n / dur
  printf "capacity: about %.2f small/s + %.2f large/s, %.2f tasks/s at this mix; offered %.2f/s on average (%.0f%%), %.2f/s in bursts (%.0f%%)\n",
    cs, cl, cap, off, 100 * off / cap, rate * bx, 100 * rate * bx / cap
}'
echo "$(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); heartbeat ${HB_MS} ms; polling every ${POLL_MS} ms"
echo

# --- one run per policy ------------------------------------------------------------
declare -A SUM LOADS COLD
for policy in $POLICIES; do
  echo "== $policy"
  start_pool "$policy" "$policy"
  "$DRIVER" "${LOAD_ARGS[@]}" --url "http://127.0.0.1:$CPORT" --label "$policy" \
    --csv "$OUT/sched-$policy.csv" >"$OUT/sched-$policy.txt" 2>"$OUT/sched-$policy.err" || true
  grep -v '^SUMMARY' "$OUT/sched-$policy.txt" | sed 's/^/   /'
  SUM[$policy]=$(grep '^SUMMARY' "$OUT/sched-$policy.txt" || true)
  [ -n "${SUM[$policy]}" ] || die "the driver gave no summary for $policy (see $OUT/sched-$policy.err)"
  read -r "LOADS[$policy]" "COLD[$policy]" <<<"$(cold_loads "$policy")"
  stop_pool
done

# --- priority under load: the same workload, offered faster than the pool serves -----
# At the default rate queues stay short, and a high-priority answer's p95 is
# mostly its own service time (a 256-token answer of the large model takes
# 5.8 s on the fastest node), so priority can only show where work waits.
PSUM=""
if [ -n "$PRIO_RATE" ]; then
  echo "== priority under load: $KILL_POLICY at base rate $PRIO_RATE/s"
  start_pool prio "$KILL_POLICY"
  PRIO_ARGS=()
  for ((i = 0; i < ${#LOAD_ARGS[@]}; i++)); do
    if [ "${LOAD_ARGS[$i]}" = --rate ]; then PRIO_ARGS+=(--rate "$PRIO_RATE"); i=$((i + 1)); else PRIO_ARGS+=("${LOAD_ARGS[$i]}"); fi
  done
  "$DRIVER" "${PRIO_ARGS[@]}" --url "http://127.0.0.1:$CPORT" --label prio \
    --csv "$OUT/sched-prio.csv" >"$OUT/sched-prio.txt" 2>"$OUT/sched-prio.err" || true
  grep -v '^SUMMARY' "$OUT/sched-prio.txt" | sed 's/^/   /'
  PSUM=$(grep '^SUMMARY' "$OUT/sched-prio.txt" || true)
  stop_pool
fi

# --- node kill ------------------------------------------------------------------------
declare -A KSUM
for mode in $KILL_MODES; do
  case $mode in kill) sig=9;; stop) sig=19;; *) die "unknown KILL_MODES entry '$mode' (kill, stop)";; esac
  tag="kill-$mode"
  echo "== node failure under $KILL_POLICY: $([ "$mode" = kill ] && echo "kill -9 of" || echo "SIGSTOP (freeze) of") the fast worker and its engines, from ${KILL_AT} s once ${KILL_MIN} tasks run there"
  start_pool "$tag" "$KILL_POLICY"
  "$DRIVER" --seed "$((SEED + 1))" --rate "$KILL_RATE" --duration "$KILL_DURATION" --burst-x 1 \
    --large-frac "$KILL_LARGE_FRAC" --high-frac "$HIGH_FRAC" --models small,large --drain "$DRAIN" \
    --poll-ms "$POLL_MS" --hb-ms "$HB_MS" --url "http://127.0.0.1:$CPORT" --label "$tag" --csv "$OUT/sched-$tag.csv" \
    --kill-at "$KILL_AT" --kill-node "${NODE_ID[fast]}" --kill-pids "${WPID[fast]}" --kill-children \
    --kill-min "$KILL_MIN" --kill-signal "$sig" --kill-record "$TMP/$tag.pids" >"$OUT/sched-$tag.txt" 2>"$OUT/sched-$tag.err" || true
  if [ -s "$TMP/$tag.pids" ]; then
    IFS=, read -r -a killed <"$TMP/$tag.pids"
    FROZEN+=("${killed[@]}")
    for p in "${killed[@]}"; do kill -KILL "$p" 2>/dev/null || true; done   # SIGKILL ends stopped ones too
  fi
  grep -v '^SUMMARY' "$OUT/sched-$tag.txt" | sed 's/^/   /'
  KSUM[$mode]=$(grep '^SUMMARY' "$OUT/sched-$tag.txt" || true)
  [ -n "${KSUM[$mode]}" ] || die "the driver gave no summary for $tag (see $OUT/sched-$tag.err)"
  stop_pool
done

# --- report --------------------------------------------------------------------------
field() { sed -n "s/.* $2=\([^ ]*\).*/\1/p" <<<"$1"; }
{
  echo
  printf '%-18s %-5s %9s %9s %9s %9s %8s %6s %6s %6s %6s  %s\n' policy prio p50_ms p95_ms p99_ms all_p95 tasks/s \
    loads cold_m failed unfin "tasks per node"
  for policy in $POLICIES; do
    s=${SUM[$policy]}
    printf '%-18s %-5s %9s %9s %9s %9s %8.2f %6s %6s %6s %6s  %s\n' "$policy" high "$(field "$s" hi_p50)" \
      "$(field "$s" hi_p95)" "$(field "$s" hi_p99)" "$(field "$s" all_p95)" "$(field "$s" thr)" \
      "${LOADS[$policy]}" "${COLD[$policy]}" "$(( $(field "$s" failed) + $(field "$s" refused) ))" \
      "$(field "$s" unfinished)" "$(field "$s" nodes)"
    printf '%-18s %-5s %9s %9s %9s\n' "" low "$(field "$s" lo_p50)" "$(field "$s" lo_p95)" "$(field "$s" lo_p99)"
  done
  echo
  echo "loads: engine starts in the worker logs ('engine for large is up'); cold_m: gpupool_cold_starts_total ('-': no such metric)"
  echo "'>=': some tasks were still unfinished when the drain ended; they count with the time they had waited, so the figure is a lower bound"
  s=${SUM[${POLICIES%% *}]}
  echo "polling resolution: a round every $(field "$s" poll_ms) ms on average (p99 $(field "$s" poll_p99_ms) ms);" \
    "client latency exceeds the coordinator's finished_at-created_at by $(field "$s" extra_p50_ms) ms (median)"
  echo

  # ratio NUM DEN TARGET LABEL: NUM and DEN may carry '>=' (lower bounds).
  ratio() {
    local a=$1 b=$2
    awk -v a="$a" -v b="$b" -v t="$3" -v l="$4" 'BEGIN{
      la = sub(/^>=/, "", a); lb = sub(/^>=/, "", b)
      if (a == "-" || b == "-" || b + 0 == 0) { printf "%-44s:    n/a\n", l; exit }
      r = a / b
      if (la && lb) { printf "%-44s:   ?     (both lower bounds) target <= %.2fx  UNKNOWN\n", l, t; exit }
      pre = la ? ">=" : lb ? "<=" : "  "
      v = (la ? (r > t ? "MISS" : "UNKNOWN") : (r <= t ? "PASS" : (lb ? "UNKNOWN" : "MISS")))
      printf "%-44s: %s%.2fx  (target <= %.2fx)  %s\n", l, pre, r, t, v }'
  }
  if [ "$POLICIES" = default ]; then
    echo "policy ratios: n/a (the coordinator has no --placement option; only its built-in policy ran)"
    g=${SUM[default]}
  else
    g=${SUM[gpupool]:-}
    for other in round-robin least-connections; do
      t=0.60; [ $other = least-connections ] && t=0.80
      if [ -n "$g" ] && [ -n "${SUM[$other]:-}" ]; then
        ratio "$(field "$g" all_p95)" "$(field "${SUM[$other]}" all_p95)" $t "overall p95 gpupool / $other"
      fi
    done
  fi
  [ -n "$g" ] && printf '%-44s: %.2fx  (for reference; the target is under load)\n' \
    "p95 high / low priority, rate $RATE/s" "$(awk -v a="$(field "$g" hi_p95 | tr -d '>=')" -v b="$(field "$g" lo_p95 | tr -d '>=')" 'BEGIN{print (b > 0 ? a / b : 0)}')"
  [ -n "$PSUM" ] && ratio "$(field "$PSUM" hi_p95)" "$(field "$PSUM" lo_p95)" 0.50 "p95 high / low under load, rate $PRIO_RATE/s"
  for mode in $KILL_MODES; do
    k=${KSUM[$mode]}
    v=$([ "$(field "$k" kill_ok)" = 1 ] && echo PASS || echo MISS)
    worst="worst: $(field "$k" worst_slack_ms) ms against the bound"
    case $worst in *nan*) worst="none of them finished";; esac
    printf '%-44s: %s task(s) (%s sent there after the kill); %s  %s\n' \
      "node $([ "$mode" = kill ] && echo "kill -9" || echo "freeze"): done <= 3 x ${HB_MS} ms + run" \
      "$(field "$k" victims)" "$(field "$k" sent_after)" "$worst" "$v"
  done
} | tee "$OUT/sched-summary.txt"

bad=0
for policy in $POLICIES; do bad=$(( bad + $(field "${SUM[$policy]}" failed) + $(field "${SUM[$policy]}" refused) )); done
[ "$bad" -eq 0 ] || { echo "warning: $bad task(s) failed or were refused (see $OUT/sched-*.csv)"; exit 2; }
