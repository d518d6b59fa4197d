#!/usr/bin/env bash
# Installs gpupool's Debian build and test dependencies when any is missing.
set -euo pipefail
PKGS=(build-essential pkg-config libmicrohttpd-dev libcurl4-openssl-dev libjansson-dev
      libsqlite3-dev libpcre2-dev libssl-dev libcmocka-dev curl)
need=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
[ ${#need[@]} -eq 0 ] && exit 0
echo "deps: installing ${need[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
