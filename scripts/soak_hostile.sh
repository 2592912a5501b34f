#!/usr/bin/env bash
# Soak test on hostile input (not run by CI): writes the hostile corpus (scripts/hostile_corpus.py),
# runs memsnap on every case in text, JSON and HTML under /usr/bin/time -v and a timeout, and
# checks issue 15's limits on each run:
#   - peak RSS <= max(256 MiB, 4 x the input's size) (times RSS_FACTOR, for sanitizer builds);
#   - wall time under 20 s;
#   - exit status 0, 1 or 2, never a signal or the timeout;
#   - on an error, stderr is one line and the -o file keeps its old content.
# Prints one row per run and exits 1 if any run broke a limit.
#
#   scripts/soak_hostile.sh [MEMSNAP_BINARY] [CORPUS_DIR]
#
# MEMSNAP_BINARY defaults to build/src/memsnap. For the ASan/UBSan build (build-asan/src/memsnap),
# set RSS_FACTOR=4: its shadow memory and quarantine inflate RSS; any sanitizer report makes stderr
# longer than one line and the run fails. CORPUS_DIR defaults to a temporary folder, removed after.
set -uo pipefail
cd "$(dirname "$0")/.."

memsnap=$(realpath "${1:-build/src/memsnap}")
corpus=${2:-}
rss_factor=${RSS_FACTOR:-1}
time_limit_s=20
keep_corpus=1
if [[ -z "$corpus" ]]; then
  corpus=$(mktemp -d /tmp/memsnap-hostile.XXXXXX)
  keep_corpus=0
fi
work=$(mktemp -d /tmp/memsnap-soak.XXXXXX)
cleanup() {
  rm -rf "$work"
  [[ $keep_corpus == 1 ]] || rm -rf "$corpus"
}
trap cleanup EXIT

[[ -x "$memsnap" ]] || { echo "soak: no memsnap binary at $memsnap (build it first)" >&2; exit 2; }
command -v /usr/bin/time >/dev/null || { echo "soak: /usr/bin/time is missing (apt-get install time)" >&2; exit 2; }
[[ -e "$corpus/huge_sizes.pickle" ]] || python3 scripts/hostile_corpus.py "$corpus"

# Cases: every file and folder (a rank directory) in the corpus, and one --diff pair.
cases=()
for path in "$corpus"/*; do cases+=("$(basename "$path")"); done
cases+=("huge_segment_low.pickle --diff huge_segment_high.pickle")

input_bytes() {  # bytes of the case's input files
  local total=0 word
  for word in $1; do
    [[ -e "$corpus/$word" ]] && total=$((total + $(du -sb "$corpus/$word" | cut -f1)))
  done
  echo "$total"
}

failures=0
printf '%-54s %-5s %10s %8s %10s %10s %4s %s\n' case format input_KB wall_s rss_MB limit_MB rc verdict
for case in "${cases[@]}"; do
  bytes=$(input_bytes "$case")
  limit_kb=$(( (bytes * 4 > 256 * 1024 * 1024 ? bytes * 4 : 256 * 1024 * 1024) * rss_factor / 1024 ))
  for format in text json html; do
    out="$work/out.$format"
    printf 'previous\n' > "$out"
    read -ra args <<< "$case"
    (cd "$corpus" && timeout -s KILL $((time_limit_s * 2)) /usr/bin/time -v -o "$work/time" \
      "$memsnap" "${args[@]}" --format "$format" -o "$out" 2> "$work/err")
    rc=$?
    rss_kb=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$work/time" 2>/dev/null)
    wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$work/time" 2>/dev/null |
           awk -F: '{ s = 0; for (i = 1; i <= NF; ++i) s = s * 60 + $i; printf "%.2f", s }')
    # time -v notes a signal in its own line of the error file: drop it from the line count.
    err_lines=$(grep -vc '^Command terminated by signal\|^Command exited with non-zero status' "$work/err")
    verdict=ok
    if [[ $rc -gt 2 ]]; then verdict="exit status $rc"
    elif [[ -z "$rss_kb" || -z "$wall" ]]; then verdict="no measurement (killed?)"
    elif (( rss_kb > limit_kb )); then verdict="RSS over the limit"
    elif awk -v w="$wall" -v l="$time_limit_s" 'BEGIN { exit !(w >= l) }'; then verdict="slower than ${time_limit_s} s"
    elif [[ $rc -ne 0 && $err_lines -ne 1 ]]; then verdict="stderr has $err_lines lines"
    elif [[ $rc -ne 0 && "$(cat "$out")" != previous ]]; then verdict="-o file changed on error"
    elif [[ $rc -eq 0 && ! -s "$out" ]]; then verdict="empty output"
    fi
    [[ $verdict == ok ]] || failures=$((failures + 1))
    printf '%-54s %-5s %10d %8s %10d %10d %4d %s\n' "$case" "$format" $((bytes / 1024)) "${wall:--}" \
      $(( ${rss_kb:-0} / 1024 )) $((limit_kb / 1024)) "$rc" "$verdict"
    if [[ $verdict != ok ]]; then sed 's/^/    stderr: /' "$work/err" | head -5; fi
  done
done
echo "soak: ${#cases[@]} cases x 3 formats, $failures run(s) broke a limit"
[[ $failures -eq 0 ]]
