#!/bin/sh
# The figures of docs/scale-out.md: JSON report size per rank, `memsnap merge` time on 1,000
# per-rank reports, and `memsnap DIR` wall time on rank folders.
#   bench/scale_out.sh [MEMSNAP] [WORKDIR] [BIG_SNAPSHOT...]
# MEMSNAP defaults to build/src/memsnap, WORKDIR to /tmp/memsnap-scale (removed at the end).
# Sources: the ddp_ranks fixture (build/tests/fixtures, written by ctest) and the real corpus in
# ../shared/corpus/real (or $MEMSNAP_CORPUS) when present; BIG_SNAPSHOT files (e.g. the 1 GB
# bench inputs) are added to the report-size table. Times are wall seconds from /usr/bin/time,
# best and median of $ROUNDS (default 3) runs; stdout of every timed run goes to /dev/null.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
memsnap=${1:-$here/../build/src/memsnap}
work=${2:-/tmp/memsnap-scale}
[ $# -gt 2 ] && shift 2 || set --
rounds=${ROUNDS:-3}
ranks=$here/../build/tests/fixtures/ddp_ranks
corpus=${MEMSNAP_CORPUS:-$here/../../shared/corpus/real}
[ -x "$memsnap" ] || { echo "no memsnap binary at $memsnap (build first)" >&2; exit 2; }
[ -d "$ranks" ] || { echo "no $ranks (run ctest once to generate the fixtures)" >&2; exit 2; }
rm -rf "$work" && mkdir -p "$work/reports"
trap 'rm -rf "$work"' EXIT

# Runs "$@" $rounds times; prints the best and median wall seconds, the median CPU seconds (user +
# system: what the run costs whatever else the machine runs) and the largest max RSS in MiB.
timed() {
  : >"$work/times"
  i=0
  while [ $i -lt "$rounds" ]; do
    /usr/bin/time -f "%e %U %S %M" -o "$work/time1" "$@" >/dev/null
    cat "$work/time1" >>"$work/times"
    i=$((i + 1))
  done
  cpu=$(awk '{print $2 + $3}' "$work/times" | sort -n | awk '{c[NR]=$1} END {printf "%.2f", c[int((NR+1)/2)]}')
  sort -n "$work/times" | awk -v cpu="$cpu" '{t[NR]=$1; if ($4>m) m=$4}
    END {printf "best %.2f s, median %.2f s wall, %s s CPU, max RSS %.0f MiB", t[1], t[int((NR+1)/2)], cpu, m/1024}'
}

echo "== load: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"

echo "== JSON report size per rank (memsnap SNAP --format json)"
report_size() {  # SNAPSHOT NAME
  "$memsnap" "$1" --format json -o "$work/reports/$2.json" 2>/dev/null || { echo "  $2: not analyzable"; return 0; }
  snap=$(stat -L -c %s "$1")
  rep=$(stat -c %s "$work/reports/$2.json")
  echo "$rep $snap $2" >>"$work/sizes"
}
: >"$work/sizes"
for r in 0 1 2 3; do report_size "$ranks/rank$r.pickle" "ddp_rank$r"; done
if [ -d "$corpus" ]; then
  for f in "$corpus"/*.pickle "$corpus"/*.pkl "$corpus"/*.json; do
    case $f in */facts.json) continue ;; esac
    [ -f "$f" ] && report_size "$f" "real_$(basename "$f" | tr -c 'A-Za-z0-9_.\n-' _)"
  done
fi
for f in "$@"; do report_size "$f" "big_$(basename "$f")"; done
awk '{printf "  %9d bytes of report for a %11d-byte snapshot  %s\n", $1, $2, $3}' "$work/sizes" | sort -k1,1n
sort -n "$work/sizes" | awk '{s[NR]=$1; sum+=$1} END {printf "  %d reports: min %d, median %d, max %d, mean %.0f bytes\n", NR, s[1], s[int((NR+1)/2)], s[NR], sum/NR}'

# 1,000 rank reports: copies of SOURCES with input.path renamed rank<i>.pickle (merge numbers the
# ranks from it), written by Python's json so the copies are valid reports.
make_reports() {  # DIR COUNT SOURCE...
  dir=$1 count=$2
  shift 2
  python3 - "$dir" "$count" "$@" <<'PY'
import json, os, sys
out, count, sources = sys.argv[1], int(sys.argv[2]), [json.load(open(p)) for p in sys.argv[3:]]
os.makedirs(out, exist_ok=True)
for i in range(count):
    report = sources[i % len(sources)]
    report["input"]["path"] = f"/shared/snapshots/rank{i}.pickle"
    with open(os.path.join(out, f"rank{i}.json"), "w") as f:
        json.dump(report, f, indent=2)
PY
}

echo "== memsnap merge of 1000 per-rank reports"
make_reports "$work/merge_ddp" 1000 "$work"/reports/ddp_rank*.json
echo "  ddp_ranks reports cycled ($(du -sk "$work/merge_ddp" | cut -f1) KiB in all):"
echo "    --format json: $(timed "$memsnap" merge "$work/merge_ddp" --format json)"
echo "    text:          $(timed "$memsnap" merge "$work/merge_ddp")"
if ls "$work"/reports/real_*.json >/dev/null 2>&1; then
  largest=$(sort -n "$work/sizes" | grep ' real_' | tail -4 | awk -v d="$work/reports" '{print d "/" $3 ".json"}')
  # shellcheck disable=SC2086
  make_reports "$work/merge_real" 1000 $largest
  echo "  the 4 largest real reports cycled ($(du -sk "$work/merge_real" | cut -f1) KiB in all):"
  echo "    --format json: $(timed "$memsnap" merge "$work/merge_real" --format json)"
fi

echo "== memsnap DIR (every snapshot read and analyzed, all cores)"
echo "  ddp_ranks (4 ranks): $(timed "$memsnap" "$ranks" --format json)"
mkdir -p "$work/ddp64"
i=0
while [ $i -lt 64 ]; do ln -s "$ranks/rank$((i % 4)).pickle" "$work/ddp64/rank$i.pickle"; i=$((i + 1)); done
echo "  ddp_ranks x16 (64 ranks, symlinks): $(timed "$memsnap" "$work/ddp64" --format json)"
if [ -d "$corpus" ]; then
  echo "  real corpus as ranks ($(ls "$corpus" | grep -c -E '\.(pickle|pkl|json)$') files, $(du -shL "$corpus" | cut -f1)): $(timed "$memsnap" "$corpus" --format json)"
fi
echo "== load: $(cut -d' ' -f1-3 /proc/loadavg)"
