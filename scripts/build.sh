#!/usr/bin/env bash
# Builds memsnap optimized, with the compiler's profile feedback (GCC's PGO): a first build of the
# memsnap executable, instrumented, reads a few training snapshots (the project's generated
# fixtures, one with C++ frames and one with Python frames only, amplified by
# bench/amplify_snapshot.py to the structure PyTorch writes for a long trace); then the whole
# build (tests included) is compiled again using what it measured. The reports are the same;
# large snapshots read and report up to 1.1x faster with C++ frames and 1.2x with Python frames
# only (bench/README.md §27).
#
#   scripts/build.sh [BUILD_DIR] [extra cmake arguments...]     (BUILD_DIR defaults to build)
#
# MEMSNAP_PGO=0 skips the instrumented build and the training (a plain optimized build).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
jobs=$(nproc)
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
profile=$dir/pgo-profile
# The release flags: -O3 without debug info (-O2 with profiles measured 2-7% slower, bench/README.md §27).
release=(-G Ninja -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O3 -DNDEBUG")

if [ "${MEMSNAP_PGO:-1}" = 1 ]; then
  rm -rf "$profile"
  cmake -S . -B "$dir" "${release[@]}" \
    "-DCMAKE_CXX_FLAGS=-fprofile-generate -fprofile-update=atomic -fprofile-dir=$profile" "$@" >/dev/null
  cmake --build "$dir" -j "$jobs" --target memsnap
  train=$dir/pgo-train
  rm -rf "$train"
  python3 tests/fixtures/make_snapshots.py "$train" >/dev/null
  # A long trace with C++ and Python frames from the project's generator (its entries are shorter
  # than the trace split asks for, so the split's thread runs only the reader's code here; training
  # it too measured no difference, bench/README.md §27); a Python-only one amplified from a fixture,
  # with and without its annotations; and every fixture once (the analysis' other paths).
  python3 bench/gen_large_snapshot.py "$train/long-cpp.pickle" --target-mb 96 >/dev/null
  for notes in keep none; do
    python3 bench/amplify_snapshot.py "$train/healthy_training.pickle" "$train/long-py-$notes.pickle" --target-mb 24 \
      --annotations "$notes" >/dev/null
  done
  for input in "$train"/long-*.pickle; do
    for format in json text html; do
      "$dir/src/memsnap" "$input" --format "$format" --max-trace-events 100000000 >/dev/null
    done
  done
  for input in "$train"/*.pickle; do "$dir/src/memsnap" "$input" --format json >/dev/null 2>&1 || true; done
  rm -rf "$train"
  # The same objects, compiled again with the profiles (GCC finds each by its object's path). A
  # source edited later is rebuilt with the profiles it no longer matches: GCC then uses what still
  # matches (-Wno-coverage-mismatch; run this script again to measure anew).
  cmake -S . -B "$dir" "${release[@]}" \
    "-DCMAKE_CXX_FLAGS=-fprofile-use -fprofile-dir=$profile -Wno-missing-profile -Wno-coverage-mismatch" "$@" >/dev/null
else
  cmake -S . -B "$dir" "${release[@]}" -DCMAKE_CXX_FLAGS= "$@" >/dev/null
fi
cmake --build "$dir" -j "$jobs"
