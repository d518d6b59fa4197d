#!/usr/bin/env bash
# Validates docs/openapi.json with a real OpenAPI 3.1 validator, Redocly's
# linter (recommended rules, all as errors: tests/openapi/redocly.yaml).  The
# validator is an npm package that scripts/tools.sh installs into .tools/ when
# it is missing.  Prints cmocka's summary lines so scripts/run-tests.sh counts
# it as one test.
set -u
cd "$(dirname "$0")/../.."
name=openapi_redocly_lint
echo "[==========] openapi: 1 test(s)."
echo "[ RUN      ] $name"
fail() {
  echo "$1"
  echo "[  FAILED  ] $name"
  echo "[  FAILED  ] 1 test(s), listed below:"
  exit 1
}
scripts/tools.sh || fail "error: the validator could not be installed (see above)"
# Offline machines: no telemetry, no update check.
export REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true NO_UPDATE_NOTIFIER=1
if ! out=$(timeout 300 .tools/node_modules/.bin/redocly lint --config tests/openapi/redocly.yaml \
             --format stylish docs/openapi.json 2>&1); then
  printf '%s\n' "$out"
  fail "error: docs/openapi.json is not a valid OpenAPI 3.1 document (Failure)"
fi
echo "[       OK ] $name"
echo "[  PASSED  ] 1 test(s)."
