#!/usr/bin/env bash
# Renders every fixture and every real snapshot in text, JSON and HTML with two memsnap binaries and
# lists the outputs that differ: the check that a refactoring left behaviour unchanged.
#
#   scripts/compare_reports.sh OLD_MEMSNAP NEW_MEMSNAP [OUT_DIR]
#
# Inputs: the generator's fixtures (written afresh into OUT_DIR/fixtures), tests/data, and
# ../shared/corpus/real when present (set MEMSNAP_CORPUS to another copy). Ranks directories and
# the diff pair are rendered too. Exit status 0 when every output is identical, 1 otherwise; the
# differing outputs stay in OUT_DIR/{old,new} for `diff -u`.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 OLD_MEMSNAP NEW_MEMSNAP [OUT_DIR]" >&2; exit 2; }
old=$(realpath "$1"); new=$(realpath "$2")
root="$(cd "$(dirname "$0")/.." && pwd)"
out=${3:-$(mktemp -d)}
corpus=${MEMSNAP_CORPUS:-$root/../shared/corpus/real}
mkdir -p "$out/old" "$out/new"
python3 "$root/tests/fixtures/make_snapshots.py" "$out/fixtures" >/dev/null

inputs=("$root"/tests/data/*.pickle "$out"/fixtures/*.pickle)
[ -d "$corpus" ] && for f in "$corpus"/*; do
  case "$f" in *.md|*/facts.json) ;; *) inputs+=("$f") ;; esac
done
for d in "$out"/fixtures/*/; do [ -d "$d" ] && inputs+=("${d%/}"); done

render() {  # render BINARY SIDE NAME ARGS...
  local bin=$1 side=$2 name=$3; shift 3
  for fmt in text json html; do
    # The report names its input path; both sides read the same path, so outputs are comparable.
    "$bin" "$@" --format "$fmt" >"$out/$side/$name.$fmt" 2>"$out/$side/$name.$fmt.err" || echo "exit $?" >>"$out/$side/$name.$fmt.err"
  done
}

differ=0
compare() {  # compare NAME ARGS...
  local name=$1; shift
  render "$old" old "$name" "$@"
  render "$new" new "$name" "$@"
  for fmt in text json html; do
    for suffix in "" .err; do
      if ! cmp -s "$out/old/$name.$fmt$suffix" "$out/new/$name.$fmt$suffix"; then
        echo "differs: $name.$fmt$suffix"
        differ=1
      fi
    done
  done
}

for f in "${inputs[@]}"; do compare "$(basename "$(dirname "$f")")__$(basename "$f")" "$f"; done
early="$out/fixtures/diff_growing_container/early.pickle"
[ -f "$early" ] && compare diff_pair "$early" --diff "$out/fixtures/diff_growing_container/late.pickle"
echo "compared ${#inputs[@]} inputs (+ the diff pair) in text, JSON and HTML; outputs in $out"
exit $differ
