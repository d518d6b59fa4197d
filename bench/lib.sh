# bench/lib.sh: what the benchmarks that start their own pool share.  Source it
# after setting TMP (a scratch directory, removed at exit), OUT (where the
# logs go) and defining die.  Every process started goes into PIDS; at exit
# they are stopped and waited for.
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# wait_port FILE [PID]: prints the port a process wrote to FILE once it is
# there (15 s at most); PID (default: the last one started) must not exit first.
wait_port() {
  local pid=${2:-${PIDS[-1]}}
  for _ in $(seq 150); do
    [ -s "$1" ] && { cat "$1"; return; }
    kill -0 "$pid" 2>/dev/null || die "pid $pid exited before listening (see logs in $OUT)"
    sleep 0.1
  done
  die "no port in $1 (see logs in $OUT)"
}
