#!/usr/bin/env bash
# bench/plan_vs_llamacpp.sh - the VRAM planner against a real llama-server.
#
# For each setting it starts llama-server on 127.0.0.1 with the model on the
# CPU (-ngl 0, --no-warmup), waits until the context is created, reads the
# sizes it prints (model buffer, KV buffer, compute buffer), stops it, runs
# `gpupool plan MODEL --json` with the matching settings and prints, per
# setting, planner vs llama.cpp and the error in percent
# ((planner - llama.cpp) / llama.cpp) for weights, KV cache, compute buffer
# and their total.  Targets: KV exact, weights within 1 %, total within 5 %.
#
# llama.cpp is not a dependency: this script neither downloads nor builds
# it.  Give it a llama-server binary you built yourself:
#
#   LLAMA_SERVER=/path/to/llama-server bench/plan_vs_llamacpp.sh
#
# Env:
#   LLAMA_SERVER  llama-server binary (required)
#   MODEL         a GGUF file; default: one made by bench/make_test_gguf.c
#                 (a ~1.1B Llama shape, zero weights in a file hole, 780 KB on disk)
#   WTYPE         f16 (default) or q8_0: weight type of the generated model
#   SETTINGS      space-separated CTX:NP:FA:CACHE[:nokvu] (CTX is llama-server's
#                 -c, the total; FA on|off; CACHE f16|q8_0|...; nokvu = leave out
#                 --kv-unified, as a bare `-c C -np P` command line does)
#   THREADS       llama-server -t (default 2)
#   GPUPOOL       gpupool binary (default build-bench/gpupool, built if missing)
#
# Exit status: 0 all targets met, 3 a target missed (rows marked info are not
# checked), 1 something failed to run.  Logs: bench/out/plan-vs-llamacpp/.
#
# The weights and the KV cache do not depend on the device, so llama.cpp's CPU
# figures check the planner's GPU figures directly.  The compute buffer does:
# the planner estimates a GPU's buffer with every layer offloaded; on the CPU
# ggml-alloc measures one graph that also holds the embedding lookup; see
# docs/planner.md, "Measured against llama.cpp".
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT="$ROOT/bench/out/plan-vs-llamacpp"
BIN=${GPUPOOL:-$ROOT/build-bench/gpupool}
WTYPE=${WTYPE:-f16}
THREADS=${THREADS:-2}
SETTINGS=${SETTINGS:-"2048:1:off:f16 2048:1:on:f16 8192:2:off:f16 8192:2:on:f16 16384:4:off:f16 16384:4:on:f16 16384:4:on:q8_0 4800:4:on:f16:nokvu"}

die() { echo "plan_vs_llamacpp.sh: $*" >&2; exit 1; }

[ -n "${LLAMA_SERVER:-}" ] || die "set LLAMA_SERVER=/path/to/llama-server (this script does not build llama.cpp)"
[ -x "$LLAMA_SERVER" ] || die "$LLAMA_SERVER is not executable"
command -v python3 >/dev/null || die "python3 is needed to print the table"
command -v cc >/dev/null || [ -n "${MODEL:-}" ] || die "cc is needed to make the test model (or set MODEL)"

mkdir -p "$OUT"
if [ ! -x "$BIN" ]; then
  [ -z "${GPUPOOL:-}" ] || die "$BIN is not executable"
  make -C "$ROOT" B=build-bench build-bench/gpupool >/dev/null || die "gpupool build failed"
fi
if [ -z "${MODEL:-}" ]; then
  cc -std=c17 -O1 -I "$ROOT/tests/unit" "$ROOT/bench/make_test_gguf.c" -o "$OUT/make_test_gguf" ||
    die "could not build bench/make_test_gguf.c"
  MODEL="$OUT/test-llama-$WTYPE.gguf"
  "$OUT/make_test_gguf" "$MODEL" "$WTYPE" >/dev/null || die "could not write $MODEL"
fi
[ -r "$MODEL" ] || die "cannot read $MODEL"

# Flags that changed across llama.cpp versions.
HELP=$("$LLAMA_SERVER" --help 2>&1 || true)
FA_VALUE=0; grep -q -- '--flash-attn \[on|off|auto\]' <<<"$HELP" && FA_VALUE=1
KVU=0; grep -q -- '--kv-unified' <<<"$HELP" && KVU=1
FIT=0; grep -q -- '--fit \[on|off\]' <<<"$HELP" && FIT=1
LV=0; grep -q -- '--log-verbosity' <<<"$HELP" && LV=1  # newer builds print the sizes only at -lv 4

SRV_PID=""
cleanup() {
  if [ -n "$SRV_PID" ]; then
    kill "$SRV_PID" 2>/dev/null || true
    wait "$SRV_PID" 2>/dev/null || true
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

ROWS="$OUT/rows.txt"
: >"$ROWS"
for st in $SETTINGS; do
  IFS=: read -r C P FA CT NOKVU <<<"$st"
  [ $((C % P)) -eq 0 ] || die "setting $st: CTX must be a multiple of NP"
  tag="c${C}-np${P}-fa${FA}-${CT}${NOKVU:+-$NOKVU}"
  log="$OUT/$tag.llama.log" json="$OUT/$tag.plan.json"

  args=(-m "$MODEL" --host 127.0.0.1 --port "$(free_port)" -c "$C" -np "$P" -ngl 0 -ub 512
        -ctk "$CT" -ctv "$CT" -t "$THREADS" --no-warmup)
  if [ "$FA_VALUE" = 1 ]; then args+=(-fa "$FA"); elif [ "$FA" = on ]; then args+=(-fa); fi
  if [ -z "$NOKVU" ]; then
    [ "$KVU" = 1 ] || die "this llama-server has no --kv-unified; use :nokvu settings only"
    args+=(--kv-unified)
  fi
  [ "$FIT" = 1 ] && args+=(-fit off)
  [ "$LV" = 1 ] && args+=(-lv 4)
  echo "llama-server ${args[*]}" >"$log"
  "$LLAMA_SERVER" "${args[@]}" >>"$log" 2>&1 &
  SRV_PID=$!
  ok=0
  for _ in $(seq 1200); do  # up to 120 s
    if grep -q 'graph splits\|model loaded\|server is listening' "$log"; then ok=1; break; fi
    kill -0 "$SRV_PID" 2>/dev/null || break
    sleep 0.1
  done
  sleep 0.2
  kill "$SRV_PID" 2>/dev/null || true
  wait "$SRV_PID" 2>/dev/null || true
  SRV_PID=""
  [ "$ok" = 1 ] || die "llama-server did not load the model for $st (see $log)"

  pargs=(plan "$MODEL" --ctx $((C / P)) --parallel "$P" --ubatch 512 --cache-type-k "$CT" --cache-type-v "$CT" --json)
  [ "$FA" = on ] && pargs+=(--flash-attn)
  "$BIN" "${pargs[@]}" >"$json" || die "gpupool plan failed for $st"
  echo "$st $log $json" >>"$ROWS"
done

python3 - "$ROWS" "$MODEL" "$LLAMA_SERVER" <<'EOF'
import json, re, sys

rows_file, model, server = sys.argv[1:4]
MiB = 1024 * 1024

def llama_sizes(log):
    w = kv = comp = outb = 0.0
    cells = None
    for line in open(log, errors="replace"):
        m = re.search(r"(\S+) model buffer size\s*=\s*([\d.]+) MiB", line)
        if m: w += float(m.group(2))
        m = re.search(r"(\S+) KV buffer size\s*=\s*([\d.]+) MiB", line)
        if m: kv += float(m.group(2))
        m = re.search(r"(\S+) compute buffer size\s*=\s*([\d.]+) MiB", line)
        if m: comp += float(m.group(2))
        m = re.search(r"(\S+)\s+output buffer size\s*=\s*([\d.]+) MiB", line)
        if m: outb += float(m.group(2))
        # "(  2048 cells,  16 layers,  4/1 seqs)": cells per stream, n_seq_max/n_stream
        m = re.search(r"llama_kv_cache: size = .*\(\s*(\d+) cells,.*?(\d+)/(\d+) seqs", line)
        if m: cells = (cells or 0) + int(m.group(1)) * int(m.group(3))
    return w, kv, comp, outb, cells

def plan_sizes(path):
    j = json.load(open(path))
    w = sum(d.get("weights", 0) for d in j["devices"]) / MiB
    kv = sum(d.get("kv_cache", 0) for d in j["devices"]) / MiB
    comp = sum(d.get("compute", 0) for d in j["devices"]) / MiB
    return w, kv, comp, j["kv_cells"]

def err(p, l):
    return (p - l) / l * 100.0 if l else float("nan")

print(f"model: {model}")
print(f"llama-server: {server}")
print("sizes in MiB; err = (planner - llama.cpp) / llama.cpp; llama.cpp runs on the CPU (-ngl 0)\n")
hdr = (f"{'setting (-c,-np,-fa,cache)':<30} {'cells p/l':>11} | {'weights p':>9} {'l':>9} {'err%':>6} | "
       f"{'KV p':>8} {'l':>8} {'err%':>6} | {'compute p':>9} {'l':>8} {'err%':>7} | "
       f"{'total p':>8} {'l':>8} {'err%':>6} | {'out buf':>7} | check")
print(hdr)
print("-" * len(hdr))
missed = False
for line in open(rows_file):
    st, log, js = line.split()
    C, P, FA, CT, *rest = st.split(":")
    info = bool(rest)
    lw, lkv, lc, lout, lcells = llama_sizes(log)
    pw, pkv, pc, pcells = plan_sizes(js)
    lt, pt = lw + lkv + lc, pw + pkv + pc
    ew, ekv, ec, et = err(pw, lw), err(pkv, lkv), err(pc, lc), err(pt, lt)
    # llama.cpp prints two decimals: "exact" means within that rounding.
    kv_ok = abs(pkv - lkv) <= 0.006
    ok = kv_ok and abs(ew) <= 1.0 and abs(et) <= 5.0
    verdict = "info" if info else ("ok" if ok else "MISSED")
    if not info and not ok:
        missed = True
    name = f"{C},{P},{FA},{CT}" + (",no-kvu" if info else "")
    print(f"{name:<30} {pcells:>5}/{lcells if lcells is not None else '?':>5} | {pw:9.2f} {lw:9.2f} {ew:+6.2f} | "
          f"{pkv:8.2f} {lkv:8.2f} {ekv:+6.2f} | {pc:9.2f} {lc:8.2f} {ec:+7.2f} | "
          f"{pt:8.2f} {lt:8.2f} {et:+6.2f} | {lout:7.2f} | {verdict}")
print("\ntotal = weights + KV + compute (the planner's overhead and margin are left out);")
print("out buf = llama.cpp's host logits buffer, which the planner does not count.")
sys.exit(3 if missed else 0)
EOF
