#!/usr/bin/env bash
# Fuzz the prompt apps' parsers (apps/appcfg, jschema, template, cond, stage)
# with libFuzzer (+ASan/UBSan) for a bounded time.  Not part of CI.
# Usage: fuzz/run_apps.sh [seconds]   (default 60)
# Crashes land in fuzz/out/apps-crash-*, the corpus in fuzz/out/corpus-apps/.
# Needs clang with libFuzzer (fuzz/run.sh installs it when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-${FUZZ_SECONDS:-60}}
. fuzz/lib.sh
CORPUS=$OUT/corpus-apps
mkdir -p "$CORPUS"
fuzz_find_cc fuzz/run_apps.sh
fuzz_build apps "src/apps/appcfg.c src/apps/cond.c src/apps/jschema.c src/apps/stage.c src/apps/template.c src/util/buf.c src/util/str.c" \
    "jansson"

seed() { printf '%s' "$2" >"$CORPUS/seed-$1"; }
seed cfg    '{"apps":{"a":{"model":"m","prompt":"Hi {{text}}","input_schema":{"type":"object","required":["text"]},"output_schema":{"type":"object","properties":{"l":{"enum":["x",1]}}}}},"pipelines":{"p":{"stages":[{"name":"s","model":"m","prompt":"{{stages.s.output.l}}","if":"stages.s.output.l == '"'"'x'"'"'"}]}}}'
seed schema '{"type":["object","null"],"properties":{"a":{"type":"string","minLength":1,"maxLength":3},"b":{"items":{"type":"integer","minimum":0}}},"additionalProperties":false,"required":["a"]}'
seed tmpl   'A {{a}} \{{b}} \\{{ stages.s.n }} {{ }} {{x'
seed cond   'stages.s.n != 1.5e3'
seed fence  '```json
{"a": "x"}
```'

fuzz_run apps "$CORPUS" "$SECS"
