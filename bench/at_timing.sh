#!/bin/sh
# `memsnap at` against the full report on one large snapshot: issue 17 wants any moment within
# 1.2x of the report's time. Runs the report and `at` at several moments ROUNDS times each (in
# turns), every trace event kept, stdout to /dev/null, and prints best and median wall seconds,
# max RSS, and each median against the report's.
#   bench/at_timing.sh SNAPSHOT [MEMSNAP]
# A ~1 GB input: python3 bench/gen_large_snapshot.py /tmp/snap_1gb.pickle --target-mb 1000 --devices 2 --seed 0
# MEMSNAP_PROFILE=1 in the environment adds memsnap's per-stage times on stderr.
set -eu
snap=${1:?usage: bench/at_timing.sh SNAPSHOT [MEMSNAP]}
here=$(cd "$(dirname "$0")" && pwd)
memsnap=${2:-$here/../build/src/memsnap}
rounds=${ROUNDS:-3}
all=--max-trace-events=100000000
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat "$snap" >/dev/null  # warm the page cache: every run reads from memory

# name|arguments
cat >"$work/cases" <<CASES
report|$snap --format json $all
at-end|at $snap --format json $all
at-peak|at $snap --peak --format json $all
at-event|at $snap --event 1000000 --format json $all
at-step|at $snap --step 2 --format json $all
at-oom|at $snap --oom 0 --format json $all
at-peak-stack|at $snap --peak --group-by stack --frame-depth 8 --format json $all
at-peak-collapsed|at $snap --peak --format collapsed $all
blocks-peak|blocks $snap --peak $all
CASES

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores; $(stat -L -c %s "$snap") bytes"
i=0
while [ $i -lt "$rounds" ]; do
  while IFS='|' read -r name cmd; do
    # shellcheck disable=SC2086  # the arguments are split on purpose
    if /usr/bin/time -f "%e %M %U %S" -o "$work/t" "$memsnap" $cmd >/dev/null 2>"$work/err"; then
      echo "$name $(cat "$work/t")" >>"$work/times"
    else
      echo "$name failed: $(head -c 300 "$work/err")"
    fi
  done <"$work/cases"
  i=$((i + 1))
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
while IFS='|' read -r name cmd; do
  cpu=$(grep "^$name " "$work/times" | awk '{print $4 + $5}' | sort -n | awk '{c[NR]=$1} END {if (NR) print c[int((NR+1)/2)]}')
  grep "^$name " "$work/times" | sort -k2,2n | awk -v n="$name" -v cpu="$cpu" '{t[NR]=$2; if ($3>m) m=$3}
    END {if (NR) printf "%s %.3f %.3f %.0f %.3f\n", n, t[1], t[int((NR+1)/2)], m/1024, cpu}'
done <"$work/cases" >"$work/summary"
# The ratios: median wall time, and median CPU time (user + system), against the report's.
awk 'NR==1 {r=$3; rc=$5}
  {printf "%-18s best %6.3f s  median %6.3f s (%.2fx)  CPU %6.3f s (%.2fx)  max RSS %5d MiB\n", $1, $2, $3, $3/r, $5, $5/rc, $4}' "$work/summary"
