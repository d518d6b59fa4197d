#!/usr/bin/env bash
# bench/gateway.sh - gateway overhead of the gpupool coordinator + worker.
#
# What it measures: non-streaming chat completions (max_tokens 1) against the
# GPU-free simulator with no think time (--ttft-ms 0 --tps 0), driven by wrk
# with identical settings on three paths, all in one run:
#   gateway  wrk -> coordinator -> worker -> engine      (what we ship)
#   direct   wrk -> engine                               (floor: no proxy at all)
#   nginx2   wrk -> nginx -> nginx -> engine             (baseline: same hop count,
#            two chained nginx reverse proxies with keepalive upstreams)
# The three paths run back to back, ROUNDS times; each round's ratios are its
# own, and the medians over the rounds are reported.
# It prints req/s, p50 and p99 per path, then gateway/nginx2 and gateway/direct
# throughput ratios (target: gateway/nginx2 >= 1.0x) and the p50 the gateway
# adds over direct (target < 0.3 ms) and over the nginx chain, twice:
#   - at one connection (LAT_CONNS), where nothing queues, so the p50 added is
#     what each request pays for the two hops;
#   - under the saturating load (CONNS), where each path's p50 is mostly
#     waiting behind the other connections: CONNS / throughput.
# Then, unless
# FOOTPRINT=0, the coordinator's memory: its RSS right after the load, and
# bench/footprint.sh's figures with 100 registered simulated nodes and 10,000
# stored tasks.
#
# Run:  bench/gateway.sh            (from anywhere; builds build-bench/gpupool if missing)
# Env:  THREADS=2 CONNS=16 DURATION=6s WARMUP=2s  wrk settings, same for every path
#       ROUNDS=3        rounds of the three paths; medians of per-round figures
#       LAT_CONNS=1 LAT_DURATION=3s  the light-load latency run of each path and round
#       SLOTS=64        simulator + worker slots (keep CONNS <= SLOTS: no queueing)
#       NGINX_WORKERS=auto  worker_processes of each nginx
#       PERF=1          also `perf record -g` the coordinator during the gateway run
#       FOOTPRINT=0     skip the memory figures (bench/footprint.sh, about a minute)
#       GPUPOOL=path    binary to use (default build-bench/gpupool)
#       SERVE_ARGS="..." extra `gpupool serve` options (e.g. "--audit off" to compare)
# Raw wrk outputs (one per path and round), logs and the perf data go to
# bench/out/ (gitignored).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT="$ROOT/bench/out"
BIN=${GPUPOOL:-$ROOT/build-bench/gpupool}
THREADS=${THREADS:-2} CONNS=${CONNS:-16} DURATION=${DURATION:-6s} WARMUP=${WARMUP:-2s} ROUNDS=${ROUNDS:-3}
LAT_CONNS=${LAT_CONNS:-1} LAT_DURATION=${LAT_DURATION:-3s}
SLOTS=${SLOTS:-64} NGINX_WORKERS=${NGINX_WORKERS:-auto} PERF=${PERF:-0} FOOTPRINT=${FOOTPRINT:-1}
MODEL=sim-llama-8b TOKEN=bench-token
[ "$CONNS" -le "$SLOTS" ] || echo "note: CONNS=$CONNS > SLOTS=$SLOTS, requests will queue" >&2

die() { echo "gateway.sh: $*" >&2; exit 1; }

# --- dependencies --------------------------------------------------------------
need_pkgs=()
command -v wrk >/dev/null || need_pkgs+=(wrk)
[ -x /usr/sbin/nginx ] || command -v nginx >/dev/null || need_pkgs+=(nginx-light)
command -v curl >/dev/null || need_pkgs+=(curl)
command -v python3 >/dev/null || need_pkgs+=(python3)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  echo "installing ${need_pkgs[*]}"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}"
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
if [ ! -x "$BIN" ]; then
  [ -z "${GPUPOOL:-}" ] || die "$BIN is not executable"
  make -C "$ROOT" B=build-bench build-bench/gpupool >/dev/null || die "build failed"
fi

# --- processes and cleanup -------------------------------------------------------
TMP=$(mktemp -d /tmp/gpupool-gateway.XXXXXX)
chmod 755 "$TMP"   # nginx workers may run as another user
mkdir -p "$OUT"
. "$ROOT/bench/lib.sh"   # PIDS, cleanup at exit, wait_port

free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }

# wait_ok URL [GREP]: until URL answers 200 (and contains GREP), deadline 30 s
wait_ok() {
  for _ in $(seq 300); do
    if body=$(curl -fsS --max-time 1 "$2" 2>/dev/null); then
      [ -z "${3:-}" ] || grep -q "$3" <<<"$body" && return 0
    fi
    sleep 0.1
  done
  die "$1 did not become ready at $2"
}

# Engine: one fast simulator that all three paths share.
"$BIN" sim-engine --listen 127.0.0.1:0 --port-file "$TMP/eport" --ttft-ms 0 --tps 0 \
  --slots "$SLOTS" --model "$MODEL" >"$OUT/gateway-sim.log" 2>&1 &
EPID=$!; PIDS+=($EPID)
EPORT=$(wait_port "$TMP/eport")
wait_ok engine "http://127.0.0.1:$EPORT/v1/models" "$MODEL"

# Coordinator + worker: queue large enough that nothing is refused.
"$BIN" serve --listen 127.0.0.1:0 --port-file "$TMP/cport" --data "$TMP/data" --join-token "$TOKEN" \
  --queue-max 4096 --queue-timeout-ms 60000 ${SERVE_ARGS:-} >"$OUT/gateway-coord.log" 2>&1 &
CPID=$!; PIDS+=($CPID)
CPORT=$(wait_port "$TMP/cport")
"$BIN" worker --coordinator "http://127.0.0.1:$CPORT" --join-token "$TOKEN" --listen 127.0.0.1:0 \
  --port-file "$TMP/wport" --engine "openai=http://127.0.0.1:$EPORT" --slots "$SLOTS" \
  >"$OUT/gateway-worker.log" 2>&1 &
WPID=$!; PIDS+=($WPID)
wait_port "$TMP/wport" >/dev/null
wait_ok coordinator "http://127.0.0.1:$CPORT/v1/models" "$MODEL"

# Two chained nginx instances (front -> back -> engine), keepalive upstreams.
NG_BACK=$(free_port) NG_FRONT=$(free_port)
nginx_conf() { # name listen-port upstream-port
  local d="$TMP/$1"; mkdir -p "$d/logs"
  local user=""; [ "$(id -u)" -eq 0 ] && user="user root root;"
  cat >"$d/nginx.conf" <<EOF
$user
worker_processes $NGINX_WORKERS;
daemon off;
pid $d/nginx.pid;
error_log $d/logs/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $d/body; proxy_temp_path $d/proxy;
  fastcgi_temp_path $d/fcgi; uwsgi_temp_path $d/uwsgi; scgi_temp_path $d/scgi;
  keepalive_requests 1000000;
  upstream up { server 127.0.0.1:$3; keepalive 128; keepalive_requests 1000000; }
  server {
    listen 127.0.0.1:$2;
    location / {
      proxy_pass http://up;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering on;
    }
  }
}
EOF
  "$NGINX" -p "$d" -c "$d/nginx.conf" -e "$d/logs/error.log" >"$OUT/gateway-nginx-$1.log" 2>&1 &
  PIDS+=($!)
}
nginx_conf back "$NG_BACK" "$EPORT"
NGB_PID=${PIDS[-1]}
nginx_conf front "$NG_FRONT" "$NG_BACK"
NGF_PID=${PIDS[-1]}
wait_ok nginx-chain "http://127.0.0.1:$NG_FRONT/v1/models" "$MODEL"

# --- load --------------------------------------------------------------------------
cat >"$TMP/chat.lua" <<EOF
wrk.method = "POST"
wrk.body = '{"model":"$MODEL","messages":[{"role":"user","content":"hi"}],"max_tokens":1}'
wrk.headers["Content-Type"] = "application/json"
EOF
port_of() { case $1 in gateway) echo "$CPORT";; direct) echo "$EPORT";; nginx2) echo "$NG_FRONT";; esac; }
for path in gateway direct nginx2; do  # each must answer a chat before we load it
  p=$(port_of $path)
  curl -fsS --max-time 5 -H 'Content-Type: application/json' \
    -d "{\"model\":\"$MODEL\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":1}" \
    "http://127.0.0.1:$p/v1/chat/completions" >/dev/null || die "$path does not answer chats"
done

# to_ms VALUE-WITH-UNIT  (wrk prints 812.00us, 1.23ms, 1.01s, 1.2m)
to_ms() { awk -v v="$1" 'BEGIN{ n=v+0; u=v; sub(/^[0-9.]+/,"",u);
  f=(u=="us")?0.001:(u=="ms")?1:(u=="s")?1000:(u=="m")?60000:-1;
  if (f<0) { print "nan"; exit 1 } printf "%.3f", n*f }'; }

# One round runs the three paths back to back; the paths' figures are each
# round's, and every ratio is taken within a round, then the median over the
# rounds is reported: a neighbour's burst on a shared machine then spoils one
# round, not the comparison.
# cpu_ticks PID: user + system time of the process (all its threads) and of
# its children (nginx's workers), in clock ticks.
cpu_ticks() {
  local t=0 p
  for p in "$1" $(pgrep -P "$1" 2>/dev/null); do
    t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0)))
  done
  echo "$t"
}
TICK_US=$((1000000 / $(getconf CLK_TCK)))

declare -A RPS P50 P99 ERRS
declare -A CPU1 CPU2  # CPU microseconds per request of each path's two proxies
ROUND_LOG="$TMP/rounds"
: >"$ROUND_LOG"
run_path() { # name port round
  local url="http://127.0.0.1:$2/v1/chat/completions" f="$OUT/gateway-wrk-$1-r$3.txt"
  wrk -t"$THREADS" -c"$CONNS" -d"$WARMUP" -s "$TMP/chat.lua" "$url" >/dev/null
  local perf_pid=""
  if [ "$PERF" = 1 ] && [ "$1" = gateway ] && [ "$3" = 1 ]; then
    perf record -g -o "$OUT/gateway-coord.perf.data" -p "$CPID" >/dev/null 2>&1 & perf_pid=$!
  fi
  local a=0 b=0
  case $1 in gateway) a=$CPID b=$WPID;; nginx2) a=$NGF_PID b=$NGB_PID;; esac
  local a0=0 b0=0
  [ "$a" = 0 ] || { a0=$(cpu_ticks "$a"); b0=$(cpu_ticks "$b"); }
  wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency -s "$TMP/chat.lua" "$url" >"$f"
  if [ "$a" != 0 ]; then
    local n; n=$(awk '/requests in/{print $1; exit}' "$f")
    CPU1[$1]=$(awk -v d=$(( $(cpu_ticks "$a") - a0 )) -v n="$n" -v t=$TICK_US 'BEGIN{printf "%.2f", n ? d*t/n : 0}')
    CPU2[$1]=$(awk -v d=$(( $(cpu_ticks "$b") - b0 )) -v n="$n" -v t=$TICK_US 'BEGIN{printf "%.2f", n ? d*t/n : 0}')
  fi
  if [ -n "$perf_pid" ]; then kill -INT "$perf_pid"; wait "$perf_pid" || true; fi
  RPS[$1]=$(awk '/^Requests\/sec:/{print $2}' "$f")
  P50[$1]=$(to_ms "$(awk '$1=="50%"{print $2}' "$f")")
  P99[$1]=$(to_ms "$(awk '$1=="99%"{print $2}' "$f")")
  ERRS[$1]=$(( ${ERRS[$1]:-0} + $(awk '/Non-2xx/{n+=$NF} /Socket errors/{gsub(/,/,""); n+=$4+$6+$8+$10} END{print n+0}' "$f") ))
  [ -n "${RPS[$1]}" ] || die "could not parse $f"
}
declare -A L50 L99
run_light() { # name port round: latency at LAT_CONNS connections, one wrk thread
  local url="http://127.0.0.1:$2/v1/chat/completions" f="$OUT/gateway-wrk-$1-light-r$3.txt"
  wrk -t1 -c"$LAT_CONNS" -d1s -s "$TMP/chat.lua" "$url" >/dev/null
  wrk -t1 -c"$LAT_CONNS" -d"$LAT_DURATION" --latency -s "$TMP/chat.lua" "$url" >"$f"
  L50[$1]=$(to_ms "$(awk '$1=="50%"{print $2}' "$f")")
  L99[$1]=$(to_ms "$(awk '$1=="99%"{print $2}' "$f")")
  ERRS[$1]=$(( ${ERRS[$1]:-0} + $(awk '/Non-2xx/{n+=$NF} /Socket errors/{gsub(/,/,""); n+=$4+$6+$8+$10} END{print n+0}' "$f") ))
}
echo "wrk -t$THREADS -c$CONNS -d$DURATION (warm-up $WARMUP) per path, then -t1 -c$LAT_CONNS -d$LAT_DURATION; $ROUNDS round(s); engine slots $SLOTS; $(nproc) CPUs"
for r in $(seq "$ROUNDS"); do
  for p in gateway direct nginx2; do run_path $p "$(port_of $p)" "$r"; done
  for p in gateway direct nginx2; do run_light $p "$(port_of $p)" "$r"; done
  echo "$r ${RPS[gateway]} ${P50[gateway]} ${P99[gateway]} ${RPS[direct]} ${P50[direct]} ${P99[direct]} ${RPS[nginx2]} ${P50[nginx2]} ${P99[nginx2]} ${CPU1[gateway]} ${CPU2[gateway]} ${CPU1[nginx2]} ${CPU2[nginx2]} ${L50[gateway]} ${L99[gateway]} ${L50[direct]} ${L99[direct]} ${L50[nginx2]} ${L99[nginx2]}" >>"$ROUND_LOG"
  awk -v r="$r" -v g="${RPS[gateway]}" -v n="${RPS[nginx2]}" 'BEGIN{printf "round %d: gateway %.0f req/s, nginx chain %.0f req/s (%.2fx)\n", r, g, n, g/n}'
done

# --- report ------------------------------------------------------------------------
# median COLUMN-EXPRESSION: the median over the rounds of an awk expression of
# a round's fields ($2.. as written above).
median() { awk "{print $1}" "$ROUND_LOG" | sort -g | awk '{v[NR]=$1} END{printf "%.3f", (NR%2)?v[(NR+1)/2]:(v[NR/2]+v[NR/2+1])/2}'; }
{
  printf '\nmedians over %d round(s)\n%-28s %12s %10s %10s %8s\n' "$ROUNDS" path req/s p50_ms p99_ms errors
  col=2
  for p in gateway direct nginx2; do
    case $p in gateway) d="coordinator->worker->engine";; direct) d="engine directly";; nginx2) d="nginx->nginx->engine";; esac
    printf '%-28s %12.1f %10.3f %10.3f %8d\n' "$d" "$(median "\$$col")" "$(median "\$$((col + 1))")" \
      "$(median "\$$((col + 2))")" "${ERRS[$p]}"
    col=$((col + 3))
  done
  printf '\nlatency at %d connection(s), nothing queued\n%-28s %10s %10s\n' "$LAT_CONNS" path p50_ms p99_ms
  col=15
  for d in "coordinator->worker->engine" "engine directly" "nginx->nginx->engine"; do
    printf '%-28s %10.3f %10.3f\n' "$d" "$(median "\$$col")" "$(median "\$$((col + 1))")"
    col=$((col + 2))
  done
  gn=$(median '$2/$8') gd=$(median '$2/$5') add=$(median '$3-$6') addn=$(median '$3-$9')
  ladd=$(median '$15-$17') laddn=$(median '$19-$17')
  printf '\nCPU per request (user + system, all threads)\n'
  printf '  coordinator %7.1f us + worker %7.1f us = %7.1f us\n' "$(median '$11')" "$(median '$12')" "$(median '$11+$12')"
  printf '  nginx front %7.1f us + back   %7.1f us = %7.1f us\n' "$(median '$13')" "$(median '$14')" "$(median '$13+$14')"
  printf '  gateway/nginx-chain          : %.2fx  (1.00x: the same CPU per request)\n' "$(median '($13+$14) ? ($11+$12)/($13+$14) : 0')"
  awk -v gn="$gn" -v gd="$gd" -v add="$add" -v addn="$addn" -v ladd="$ladd" -v laddn="$laddn" \
      -v lc="$LAT_CONNS" -v c="$CONNS" 'BEGIN{
    printf "\nthroughput gateway/nginx-chain : %.2fx  (target >= 1.00x) %s\n", gn, (gn>=1)?"OK":"BELOW TARGET"
    printf "throughput gateway/direct      : %.2fx\n", gd
    printf "p50 added over direct, %d conn : %+.3f ms (target < 0.300 ms) %s; nginx chain adds %+.3f ms\n", lc, ladd, (ladd<0.3)?"OK":"ABOVE TARGET", laddn
    printf "p50 added over direct, %d conns: %+.3f ms (target < 0.300 ms) %s; nginx chain adds %+.3f ms\n", c, add, (add<0.3)?"OK":"ABOVE TARGET", addn
  }'
} | tee "$OUT/gateway-summary.txt"
COORD_RSS=$(awk '$1=="VmRSS:"{print $2}' "/proc/$CPID/status" 2>/dev/null || echo 0)
echo "coordinator VmRSS after the load: $COORD_RSS KiB (1 node, no stored tasks)" | tee -a "$OUT/gateway-summary.txt"
if [ "$FOOTPRINT" = 1 ]; then
  echo; echo "coordinator memory with 100 nodes and 10,000 tasks (bench/footprint.sh):"
  GPUPOOL="$BIN" NODES=100 TASKS=10000 "$ROOT/bench/footprint.sh" >"$OUT/gateway-footprint.txt" 2>&1 \
    || { tail -5 "$OUT/gateway-footprint.txt"; die "bench/footprint.sh failed (see $OUT/gateway-footprint.txt)"; }
  sed -n '/^coordinator (VmRSS)/,$p' "$OUT/gateway-footprint.txt" | tee -a "$OUT/gateway-summary.txt"
fi
total_errs=$(( ${ERRS[gateway]} + ${ERRS[direct]} + ${ERRS[nginx2]} ))
[ "$total_errs" -eq 0 ] || { echo "warning: $total_errs failed requests (see $OUT/gateway-wrk-*.txt)"; exit 2; }
