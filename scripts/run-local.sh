#!/usr/bin/env bash
# `make run`: a local pool on this machine — one coordinator and one worker.
# The worker uses the GPU and engine it finds (llama-server :8080, vLLM :8000,
# Ollama :11434); with none it serves the engine simulator and says so.
# Ctrl-C stops both.  GPUPOOL_PORT and GPUPOOL_DATA change the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=build/gpupool
PORT=${GPUPOOL_PORT:-8420}
DATA=${GPUPOOL_DATA:-./gpupool-data}
WORKER_PORT=${GPUPOOL_WORKER_PORT:-$((PORT + 1))}
mkdir -p "$DATA"

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

"$BIN" serve --listen "127.0.0.1:$PORT" --data "$DATA" &
pids+=($!)
for _ in $(seq 100); do [ -s "$DATA/join-token" ] && curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break; sleep 0.1; done
curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null || { echo "the coordinator did not start (is port $PORT free?)" >&2; exit 1; }

"$BIN" worker --coordinator "http://127.0.0.1:$PORT" --join-token-file "$DATA/join-token" \
    --listen "127.0.0.1:$WORKER_PORT" --name "$(hostname)-local" &
pids+=($!)
for _ in $(seq 100); do
  models=$(curl -sf "http://127.0.0.1:$PORT/v1/models" || true)
  case "$models" in *'"id"'*) break ;; esac
  sleep 0.1
done
model=$(printf '%s' "$models" | sed -n 's/.*"id":"\([^"]*\)".*/\1/p' | head -1)
cat <<MSG

  gpupool is running: http://127.0.0.1:$PORT   (Ctrl-C stops it)
  model: ${model:-none yet}   nodes: curl http://127.0.0.1:$PORT/v1/nodes

  curl http://127.0.0.1:$PORT/v1/chat/completions -d '{"model":"${model:-MODEL}","messages":[{"role":"user","content":"hello"}]}'
  curl http://127.0.0.1:$PORT/v1/tasks -d '{"type":"chat","model":"${model:-MODEL}","input":{"messages":[{"role":"user","content":"hello"}]}}'

MSG
wait -n "${pids[@]}"
