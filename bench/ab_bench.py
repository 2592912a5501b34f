#!/usr/bin/env python3
"""A/B timing of two memsnap binaries on one snapshot: alternating runs, medians.

Each round runs A then B (B then A on odd rounds, so neither always runs on a warmer machine)
as child processes with stdout to /dev/null, and records the wall time, the CPU time (user +
system of every thread, from os.wait4) and the peak RSS. On a machine shared with other builds
the CPU time moves far less than the wall time; the 1-minute load average is printed per round.

  python3 bench/ab_bench.py SNAPSHOT --a OLD_BINARY --b NEW_BINARY [--rounds 5] [-- ARGS...]

ARGS default to `--format json --max-trace-events 100000000` (the full JSON report, every event);
`--read` times `dump --what settings` instead (the read alone).
"""
import argparse
import json
import os
import statistics
import sys
import time


def run_once(argv):
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        os.execv(argv[0], argv)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        sys.exit(f"{' '.join(argv)} exited with {code}")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "rss_mib": usage.ru_maxrss / 1024}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("snapshot")
    parser.add_argument("--a", required=True, help="the binary before")
    parser.add_argument("--b", required=True, help="the binary after")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--read", action="store_true", help="time the read alone (dump --what settings)")
    parser.add_argument("--json", dest="json_out", help="write the figures to this file")
    parser.add_argument("args", nargs="*", help="memsnap arguments after the snapshot")
    opts, extra = parser.parse_known_args()  # memsnap's own options (--format html ...) pass through
    opts.args = (opts.args or []) + [a for a in extra if a != "--"]
    if opts.read:
        tail = ["--what", "settings", "--max-trace-events", "100000000"]
    else:
        tail = opts.args or ["--format", "json", "--max-trace-events", "100000000"]

    def argv(binary):
        if opts.read:
            return [binary, "dump", opts.snapshot] + tail
        return [binary, opts.snapshot] + tail

    with open(opts.snapshot, "rb") as f:  # warm the page cache
        while f.read(1 << 24):
            pass
    runs = {"a": [], "b": []}
    loads = []
    for r in range(opts.rounds):
        order = ("a", "b") if r % 2 == 0 else ("b", "a")
        for side in order:
            runs[side].append(run_once(argv(getattr(opts, side))))
        loads.append(os.getloadavg()[0])
        print(f"round {r + 1}: load {loads[-1]:.1f}  " + "  ".join(
            f"{s}: {runs[s][-1]['wall_s']:.3f} s wall {runs[s][-1]['cpu_s']:.3f} s cpu" for s in ("a", "b")))

    def med(side, key):
        return statistics.median(x[key] for x in runs[side])

    result = {"snapshot": opts.snapshot, "a": opts.a, "b": opts.b, "read_only": opts.read, "rounds": opts.rounds,
              "load_min": min(loads), "load_max": max(loads), "runs": runs}
    for side in ("a", "b"):
        for key in ("wall_s", "cpu_s", "rss_mib"):
            result[f"{side}_{key}"] = med(side, key)
    result["cpu_a_over_b"] = result["a_cpu_s"] / result["b_cpu_s"]
    result["wall_a_over_b"] = result["a_wall_s"] / result["b_wall_s"]
    print(f"medians: a {result['a_wall_s']:.3f} s wall {result['a_cpu_s']:.3f} s cpu {result['a_rss_mib']:.0f} MiB; "
          f"b {result['b_wall_s']:.3f} s wall {result['b_cpu_s']:.3f} s cpu {result['b_rss_mib']:.0f} MiB; "
          f"a/b cpu {result['cpu_a_over_b']:.2f}x wall {result['wall_a_over_b']:.2f}x; "
          f"load {result['load_min']:.1f}-{result['load_max']:.1f}")
    if opts.json_out:
        with open(opts.json_out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
