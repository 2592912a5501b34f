#!/usr/bin/env python3
"""Benchmark memsnap against plain pickle.load on one snapshot file.

Usage:
    python3 bench/run_bench.py SNAPSHOT --memsnap PATH [--rounds 3] [--extra-args "..."]
                               [--json OUT] [--no-warm] [--python PYTHON]

Each round runs, as separate child processes and alternating:
  (a) PATH SNAPSHOT --format json --max-trace-events 100000000 [EXTRA...]   (stdout -> /dev/null)
  (b) PYTHON -c '<open SNAPSHOT; pickle.load(f)>'                            (nothing else)
For each child: wall time (spawn -> reaped) and peak RSS (ru_maxrss from os.wait4 of that child,
KiB on Linux).  The Python child also reports the time spent inside pickle.load() alone
(without interpreter start-up and teardown) on stderr; that "load-only" time is the
conservative baseline for the speed ratio.
"""
import argparse
import os
import shlex
import sys
import time

# NOTE on RSS: Linux folds the hiwater RSS of the mm that exec() replaces into the child's
# ru_maxrss; with posix_spawn (vfork) that is *this* runner's mm.  So keep this process small
# (few imports, small buffers); the runner also measures that floor with /bin/true and prints it.

PY_CHILD = (
    "import pickle, sys, time\n"
    "f = open(sys.argv[1], 'rb')\n"
    "t0 = time.perf_counter()\n"
    "obj = pickle.load(f)\n"
    "t1 = time.perf_counter()\n"
    "sys.stderr.write('PICKLE_LOAD_SECONDS %.6f\\n' % (t1 - t0))\n"
)


def run_child(argv, stdout_path=os.devnull):
    """Spawn argv, wait with os.wait4; return (rc, wall_s, maxrss_kib, stderr_text)."""
    err = os.memfd_create("child-stderr")
    fa = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, stdout_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644),
        (os.POSIX_SPAWN_DUP2, err, 2),
    ]
    t0 = time.perf_counter()
    try:
        pid = os.posix_spawn(argv[0], argv, os.environ, file_actions=fa)
    except OSError as e:
        os.close(err)
        return 127, 0.0, 0, f"spawn failed: {e}"
    _, status, ru = os.wait4(pid, 0)
    wall = time.perf_counter() - t0
    os.lseek(err, 0, os.SEEK_SET)
    chunks = []
    while True:
        b = os.read(err, 1 << 16)
        if not b:
            break
        chunks.append(b)
    os.close(err)
    text = b"".join(chunks).decode("utf-8", "replace")
    rc = os.waitstatus_to_exitcode(status)
    return rc, wall, ru.ru_maxrss, text


def warm_cache(path):
    buf = bytearray(1 << 20)
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buf):
            pass


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def fmt_kib(k):
    return f"{k / 1024:,.0f} MiB"


def main():
    ap = argparse.ArgumentParser(description="memsnap vs pickle.load benchmark")
    ap.add_argument("snapshot")
    ap.add_argument("--memsnap", required=True, help="path to the memsnap binary")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--extra-args", default="", help="extra memsnap arguments (one shell-quoted string)")
    ap.add_argument("--json", dest="json_out", help="write the figures to this JSON file")
    ap.add_argument("--python", default=sys.executable, help="interpreter for the pickle.load child")
    ap.add_argument("--no-warm", action="store_true", help="do not pre-read the file into the page cache")
    args = ap.parse_args()

    snap = os.path.abspath(args.snapshot)
    file_size = os.path.getsize(snap)
    memsnap = os.path.abspath(args.memsnap) if os.sep in args.memsnap else args.memsnap
    if os.sep not in memsnap:  # bare name: look it up in PATH
        for d in os.environ.get("PATH", "").split(os.pathsep):
            if d and os.access(os.path.join(d, memsnap), os.X_OK):
                memsnap = os.path.join(d, memsnap)
                break
    ms_argv = [memsnap, snap, "--format", "json", "--max-trace-events", "100000000"] + shlex.split(args.extra_args)
    py_argv = [args.python, "-c", PY_CHILD, snap]

    if not args.no_warm:
        warm_cache(snap)
    floor_kib = run_child(["/bin/true"])[2] if os.path.exists("/bin/true") else 0

    rounds = []
    failed = False
    for r in range(args.rounds):
        rc_m, t_m, rss_m, err_m = run_child(ms_argv)
        rc_p, t_p, rss_p, err_p = run_child(py_argv)
        load = None
        for line in err_p.splitlines():
            if line.startswith("PICKLE_LOAD_SECONDS "):
                load = float(line.split()[1])
        rounds.append({"round": r + 1, "memsnap_s": t_m, "memsnap_rc": rc_m, "memsnap_maxrss_kib": rss_m,
                       "python_s": t_p, "python_load_s": load, "python_rc": rc_p, "python_maxrss_kib": rss_p})
        print(f"round {r + 1}: memsnap {t_m:8.3f} s (rc {rc_m}, {fmt_kib(rss_m)})   "
              f"python {t_p:8.3f} s, pickle.load {load if load is not None else float('nan'):8.3f} s "
              f"(rc {rc_p}, {fmt_kib(rss_p)})", flush=True)
        if rc_m != 0:
            failed = True
            sys.stderr.write(f"memsnap failed (rc {rc_m}): {shlex.join(ms_argv)}\n{err_m[-4000:]}\n")
        if rc_p != 0:
            failed = True
            sys.stderr.write(f"python child failed (rc {rc_p})\n{err_p[-4000:]}\n")

    med = median
    m_t = med(x["memsnap_s"] for x in rounds)
    p_t = med(x["python_s"] for x in rounds)
    loads = [x["python_load_s"] for x in rounds if x["python_load_s"] is not None]
    p_load = med(loads) if loads else float("nan")
    m_rss = max(x["memsnap_maxrss_kib"] for x in rounds)
    p_rss = max(x["python_maxrss_kib"] for x in rounds)
    ratio_wall = p_t / m_t if m_t > 0 else float("inf")
    ratio_load = p_load / m_t if m_t > 0 else float("inf")

    print()
    print(f"file:            {snap}")
    print(f"file size:       {file_size:,} bytes ({file_size / 2**20:,.1f} MiB)")
    print(f"memsnap cmd:     {shlex.join(ms_argv)}")
    print(f"RSS floor:       {fmt_kib(floor_kib)} (ru_maxrss of /bin/true spawned from this runner; "
          f"peak RSS figures cannot go below it)")
    print()
    print(f"{'':26s}{'memsnap':>14s}{'python':>14s}{'ratio py/ms':>14s}")
    print(f"{'median wall time (s)':26s}{m_t:14.3f}{p_t:14.3f}{ratio_wall:14.1f}")
    print(f"{'median pickle.load (s)':26s}{'':14s}{p_load:14.3f}{ratio_load:14.1f}")
    print(f"{'peak RSS (MiB)':26s}{m_rss / 1024:14,.0f}{p_rss / 1024:14,.0f}{(p_rss / m_rss if m_rss else float('inf')):14.1f}")
    print(f"{'peak RSS / file size':26s}{m_rss * 1024 / file_size:14.2f}{p_rss * 1024 / file_size:14.2f}")
    print()
    print(f"target: pickle.load / memsnap >= 30x  -> {ratio_load:.1f}x "
          f"({'PASS' if ratio_load >= 30 else 'FAIL'}; vs python process wall: {ratio_wall:.1f}x)")
    print(f"target: memsnap peak RSS < file size -> {m_rss * 1024 / file_size:.2f}x "
          f"({'PASS' if m_rss * 1024 < file_size else 'FAIL'})")

    if args.json_out:
        import json
        out = {
            "snapshot": snap, "file_size_bytes": file_size, "memsnap_argv": ms_argv,
            "python": args.python, "rounds": rounds,
            "median_memsnap_s": m_t, "median_python_s": p_t, "median_python_load_s": p_load,
            "ratio_python_wall_over_memsnap": ratio_wall, "ratio_python_load_over_memsnap": ratio_load,
            "memsnap_peak_rss_kib": m_rss, "python_peak_rss_kib": p_rss, "rss_floor_kib": floor_kib,
            "memsnap_rss_over_file_size": m_rss * 1024 / file_size,
            "python_rss_over_file_size": p_rss * 1024 / file_size,
            "all_ok": not failed,
        }
        with open(args.json_out, "w") as f:
            json.dump(out, f, indent=2)
            f.write("\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
