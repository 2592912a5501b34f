#!/usr/bin/env bash
# Installs memsnap's build and test dependencies from Debian's packages (Debian 12).
set -euo pipefail
packages=(cmake ninja-build g++ clang python3 libsimdjson-dev libcli11-dev libfmt-dev nlohmann-json3-dev
          zlib1g-dev libzstd-dev libgtest-dev libbenchmark-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
