#!/usr/bin/env bash
# Installs memsnap's build and test dependencies from Debian's packages (Debian 12).
set -euo pipefail
packages=(cmake ninja-build g++ python3 libsimdjson-dev libcli11-dev libfmt-dev nlohmann-json3-dev
          zlib1g-dev libzstd-dev libabsl-dev libgtest-dev libjemalloc-dev)
# clang and its runtime only for the libFuzzer build (MEMSNAP_FUZZ_BUILD=1 scripts/test.sh).
if [ "${MEMSNAP_FUZZ_BUILD:-0}" = 1 ]; then packages+=(clang libclang-rt-14-dev); fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# The HTML report: Node.js and npm (its chart library, the browser test's driver) and Chromium (the test's browser).
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
[ -x /usr/bin/chromium ] || missing+=(chromium)
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
# The JavaScript packages pinned by package-lock.json, into node_modules (the build inlines the chart library).
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ ! -f "$root/node_modules/.package-lock.json" ] || [ "$root/package-lock.json" -nt "$root/node_modules/.package-lock.json" ]; then
  (cd "$root" && npm ci --no-audit --no-fund)
fi
