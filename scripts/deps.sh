#!/usr/bin/env bash
# Installs gpupool's Debian build and test dependencies when any is missing.
# Node.js and npm run the OpenAPI validator, which scripts/tools.sh installs
# into .tools/ (git-ignored); any node/npm on the PATH will do, so the
# Debian packages are only added when there is none (a NodeSource nodejs
# already carries npm and conflicts with Debian's).
set -euo pipefail
PKGS=(build-essential pkg-config libmicrohttpd-dev libcurl4-openssl-dev libjansson-dev
      libsqlite3-dev libpcre2-dev libssl-dev libcmocka-dev curl)
need=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then need+=(nodejs npm); fi
if [ ${#need[@]} -gt 0 ]; then
  echo "deps: installing ${need[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
"$(dirname "$0")/tools.sh"
