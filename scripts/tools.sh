#!/usr/bin/env bash
# Installs the npm tools the tests use into .tools/ (git-ignored) at the
# repository root, when they are missing or not the pinned version.  Safe to
# run again.  Today that is one: Redocly's CLI, the OpenAPI validator
# (tests/openapi/validate.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS=.tools
REDOCLY_VERSION=1.34.20 # the 1.x line still runs on Debian 12's Node.js 18
have=$(node -e "try{console.log(require('./$TOOLS/node_modules/@redocly/cli/package.json').version)}catch(e){}" 2>/dev/null || true)
[ "$have" = "$REDOCLY_VERSION" ] && exit 0
if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
  echo "tools: node and npm are needed for the OpenAPI validator; scripts/deps.sh installs them" >&2
  exit 1
fi
echo "tools: installing @redocly/cli@$REDOCLY_VERSION into $TOOLS/ (from the npm registry)"
mkdir -p "$TOOLS"
if ! timeout 900 npm install --prefix "$TOOLS" --no-audit --no-fund --loglevel=error \
     "@redocly/cli@$REDOCLY_VERSION"; then
  echo "tools: could not install @redocly/cli@$REDOCLY_VERSION from $(npm config get registry)" >&2
  echo "tools: check the network or the npm registry setting (npm config set registry URL)" >&2
  exit 1
fi
