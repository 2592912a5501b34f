#!/bin/sh
# Writes the benchmark inputs on real structure: a C++-frame and a Python-only snapshot amplified
# to SIZE MB (default 250), with and without annotations, into DIR (default /tmp/memsnap-bench).
# Sources: the real corpus in ../shared/corpus/real when present (or $MEMSNAP_CORPUS), else the
# project's fixtures (build/tests/fixtures, written by ctest).
#   bench/make_real_inputs.sh [SIZE] [DIR]
set -eu
size=${1:-250}
dir=${2:-/tmp/memsnap-bench}
here=$(cd "$(dirname "$0")" && pwd)
corpus=${MEMSNAP_CORPUS:-$here/../../shared/corpus/real}
fixtures=$here/../build/tests/fixtures
if [ -f "$corpus/Constructor-Sun_code_location_memory_snapshot.pickle" ]; then
  cpp=$corpus/Constructor-Sun_code_location_memory_snapshot.pickle  # C++ and Python frames, 3 devices, expandable
  py=$corpus/ZidongLiu_DeComFL_memory.pickle                        # Python frames only
else
  cpp=$fixtures/cpp_frames.pickle
  py=$fixtures/healthy_training.pickle
fi
mkdir -p "$dir"
for kind in cpp py; do
  eval src=\$$kind
  for notes in keep none; do
    out=$dir/$kind-$notes-$size.pickle
    [ -f "$out" ] || python3 "$here/amplify_snapshot.py" "$src" "$out" --target-mb "$size" --annotations "$notes"
  done
done
