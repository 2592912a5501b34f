#!/usr/bin/env bash
# The whole test suite: installs dependencies, then builds and runs every test twice, once
# optimized and once under AddressSanitizer + UndefinedBehaviorSanitizer (each replays the fuzz
# corpus through the fuzz target); MEMSNAP_FUZZ_BUILD=1 adds the clang libFuzzer build. CI runs
# exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
jobs=$(nproc)

# The release build is the README's (scripts/build.sh: optimized with profile feedback, no debug
# info), so the tests run the binary a user builds; the sanitizer build carries only line tables
# (-g1: ASan/UBSan reports still name file:line). Configure a build of your own with
# RelWithDebInfo to debug.
scripts/build.sh build
(cd build && ctest --output-on-failure -j "$jobs")

# The libFuzzer target (clang) builds, and its corpus replays under it: a third full build, so
# only with MEMSNAP_FUZZ_BUILD=1 (CI keeps under 20 minutes on 2 cores). The same target and
# corpus are replayed by ctest's fuzz_corpus_replay in both builds below, the second under
# ASan/UBSan.
if [ "${MEMSNAP_FUZZ_BUILD:-0}" = 1 ]; then
  cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMEMSNAP_FUZZ=ON \
    -DMEMSNAP_SANITIZE=ON -DMEMSNAP_TESTS=OFF >/dev/null
  cmake --build build-fuzz -j "$jobs" --target fuzz_reader
  build-fuzz/fuzz/fuzz_reader -runs=0 fuzz/corpus fuzz/corpus/found
fi

cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-g1 -DMEMSNAP_SANITIZE=ON >/dev/null
cmake --build build-asan -j "$jobs"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j "$jobs")
