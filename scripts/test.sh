#!/usr/bin/env bash
# The whole test suite: installs dependencies, then builds and runs every test twice, once
# optimized and once under AddressSanitizer + UndefinedBehaviorSanitizer, and replays the fuzz
# corpus through the libFuzzer build (clang). CI runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
jobs=$(nproc)

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$jobs"
(cd build && ctest --output-on-failure -j "$jobs")

# The libFuzzer target (clang) builds, and its corpus replays under it.
cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMEMSNAP_FUZZ=ON \
  -DMEMSNAP_SANITIZE=ON -DMEMSNAP_TESTS=OFF >/dev/null
cmake --build build-fuzz -j "$jobs" --target fuzz_reader
build-fuzz/fuzz/fuzz_reader -runs=0 fuzz/corpus fuzz/corpus/found

cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DMEMSNAP_SANITIZE=ON >/dev/null
cmake --build build-asan -j "$jobs"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j "$jobs")
