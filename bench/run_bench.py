#!/usr/bin/env python3
"""Benchmark memsnap against plain pickle.load on one snapshot file.

Usage:
    python3 bench/run_bench.py SNAPSHOT --memsnap PATH [--rounds 3] [--extra-args "..."]
                               [--json OUT] [--no-warm] [--python PYTHON]

Each round runs, as separate child processes and in turn:
  (a) PATH dump SNAPSHOT --what settings --max-trace-events 100000000   (reading alone)
  (b) PATH SNAPSHOT --format json --max-trace-events 100000000 [EXTRA]  (the full report)
  (c) PYTHON -c '<open SNAPSHOT; pickle.load(f)>'                       (nothing else)
With --all-formats each round also runs, before (c):
  (b2) PATH SNAPSHOT --format text --max-trace-events 100000000 [EXTRA]
  (b3) PATH SNAPSHOT --format html --max-trace-events 100000000 [EXTRA]
  (b4) PATH SNAPSHOT --format json [EXTRA]   (the default --max-trace-events, for its peak RSS)
(stdout -> /dev/null)
For each child: wall time (spawn -> reaped) and peak RSS (ru_maxrss from os.wait4 of that child,
KiB on Linux).  The Python child also reports the time spent inside pickle.load() alone
(without interpreter start-up and teardown) on stderr; that "load-only" time is the
conservative baseline for the speed ratio.
Each round also times this runner reading the file once with read() into a 1 MiB buffer (the
"scan": the machine's floor for touching every byte, page cache to memory), so that a read's
time can be compared across machines whose Python and memory differ (read / scan); not with
--no-warm, since the scan fills the page cache. And after the scan a child maps the file and
says how much of it the page cache holds in huge (2 MiB) folios ("page_cache_huge_fraction"):
on a VM with shadow page tables memsnap's mapping is read faster when it is (bench/README §21).
At each round's start and end the runner times a fixed pure-Python loop ("probe_start_s",
"probe_end_s"): how fast the machine was, for runs on a VM whose host's load moves every timing
by up to 3x within minutes (bench/README §30).
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
    "t0, c0 = time.perf_counter(), time.process_time()\n"
    "obj = pickle.load(f)\n"
    "t1, c1 = time.perf_counter(), time.process_time()\n"
    "sys.stderr.write('PICKLE_LOAD_SECONDS %.6f\\n' % (t1 - t0))\n"
    "sys.stderr.write('PICKLE_LOAD_CPU_SECONDS %.6f\\n' % (c1 - c0))\n"
)


def run_child(argv, stdout_path=os.devnull, env=None):
    """Spawn argv, wait with os.wait4; return (rc, wall_s, maxrss_kib, stderr_text, cpu_s)."""
    err = os.memfd_create("child-stderr")
    fa = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, stdout_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644),
        (os.POSIX_SPAWN_DUP2, err, 2),
    ]
    t0 = time.perf_counter()
    try:
        pid = os.posix_spawn(argv[0], argv, env or os.environ, file_actions=fa)
    except OSError as e:
        os.close(err)
        return 127, 0.0, 0, f"spawn failed: {e}", 0.0
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
    return rc, wall, ru.ru_maxrss, text, ru.ru_utime + ru.ru_stime


def stage_times(stderr_text):
    """The stage times memsnap prints with MEMSNAP_PROFILE=1 ("memsnap: profile: read 212.4 ms")."""
    stages = {}
    for line in stderr_text.splitlines():
        parts = line.split()
        if len(parts) == 5 and parts[:2] == ["memsnap:", "profile:"] and parts[4] == "ms":
            stages[parts[2]] = float(parts[3])
    return stages


def warm_cache(path):
    """Reads the file once with read() into a 1 MiB buffer; returns the seconds it took."""
    buf = bytearray(1 << 20)
    t0 = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buf):
            pass
    return time.perf_counter() - t0


# In a child (its RSS is the file's): how much of the file the page cache holds in 2 MiB folios,
# so that a mapping of it is mapped by huge pages. On a VM whose hypervisor keeps shadow page
# tables the first access to each 4 KiB page of a mapping traps, to a huge page once: the same
# binary read the same bytes 1.27x faster when the cache held them in huge folios (bench/README
# §21). A file read from disk with a large read-ahead comes in huge folios; one just written
# (by PyTorch, or by amplify_snapshot.py) in small ones.
HUGE_CHILD = (
    "import mmap, sys\n"
    "f = open(sys.argv[1], 'rb'); m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)\n"
    "m[::4096]\n"
    "pmd = 0\n"
    "for line in open('/proc/self/smaps'):\n"
    "    if line.startswith('FilePmdMapped:'): pmd += int(line.split()[1])\n"
    "sys.stderr.write('HUGE_KIB %d\\n' % pmd)\n"
)


def page_cache_huge_fraction(python, path, size):
    """The share of the file mapped by huge pages (None when the kernel does not say)."""
    rc, _, _, err, _ = run_child([python, "-c", HUGE_CHILD, path])
    for line in err.splitlines():
        if rc == 0 and line.startswith("HUGE_KIB "):
            return min(1.0, int(line.split()[1]) * 1024 / size) if size else None
    return None


def cpu_probe():
    """Seconds a fixed pure-Python loop takes in this runner (one core): how fast the machine is
    at that moment. On a VM whose host is loaded the same binary's report moves by up to 3x within
    minutes (bench/README §29-§30); the probe at each round's start and end says which rounds ran
    on a slow machine."""
    t0 = time.perf_counter()
    x = 0
    for i in range(1_000_000):
        x += i & 7
    return time.perf_counter() - t0


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
    ap.add_argument("--extra-args", default="", help="extra memsnap arguments for the report (one shell-quoted string)")
    ap.add_argument("--json", dest="json_out", help="write the figures to this JSON file")
    ap.add_argument("--python", default=sys.executable, help="interpreter for the pickle.load child")
    ap.add_argument("--no-warm", action="store_true", help="do not pre-read the file into the page cache")
    ap.add_argument("--all-formats", action="store_true",
                    help="also time the text and HTML reports and the JSON report with the default --max-trace-events")
    args = ap.parse_args()

    snap = os.path.abspath(args.snapshot)
    file_size = os.path.getsize(snap)
    memsnap = os.path.abspath(args.memsnap) if os.sep in args.memsnap else args.memsnap
    if os.sep not in memsnap:  # bare name: look it up in PATH
        for d in os.environ.get("PATH", "").split(os.pathsep):
            if d and os.access(os.path.join(d, memsnap), os.X_OK):
                memsnap = os.path.join(d, memsnap)
                break
    all_events = ["--max-trace-events", "100000000"]
    children = {
        # reading alone: load the whole snapshot (every event kept), print only the settings
        "read": [memsnap, "dump", snap, "--what", "settings"] + all_events,
        # the full report: every analysis, JSON out
        "report": [memsnap, snap, "--format", "json"] + all_events + shlex.split(args.extra_args),
    }
    if args.all_formats:
        extra = shlex.split(args.extra_args)
        children["report_text"] = [memsnap, snap, "--format", "text"] + all_events + extra
        children["report_html"] = [memsnap, snap, "--format", "html"] + all_events + extra
        children["report_capped"] = [memsnap, snap, "--format", "json"] + extra
    children["python"] = [args.python, "-c", PY_CHILD, snap]

    if not args.no_warm:
        warm_cache(snap)
    floor_kib = run_child(["/bin/true"])[2] if os.path.exists("/bin/true") else 0

    profile_env = dict(os.environ, MEMSNAP_PROFILE="1")  # memsnap prints its stage times on stderr
    rounds = []
    failed = False
    for r in range(args.rounds):
        row = {"round": r + 1, "load_average_1min": os.getloadavg()[0], "probe_start_s": cpu_probe(),
               "scan_s": None if args.no_warm else warm_cache(snap)}  # --no-warm: the scan would warm it
        row["page_cache_huge_fraction"] = page_cache_huge_fraction(args.python, snap, file_size)
        for name, argv in children.items():
            rc, t, rss, err, cpu = run_child(argv, env=None if name == "python" else profile_env)
            row[f"{name}_s"], row[f"{name}_rc"], row[f"{name}_maxrss_kib"] = t, rc, rss
            row[f"{name}_cpu_s"] = cpu  # user + system seconds of every thread: what a busy machine cannot inflate
            if name.startswith("report"):
                row[f"{name}_stage_ms"] = stage_times(err)
            if name == "python":
                row["python_load_s"] = None
                for line in err.splitlines():
                    if line.startswith("PICKLE_LOAD_SECONDS "):
                        row["python_load_s"] = float(line.split()[1])
                    if line.startswith("PICKLE_LOAD_CPU_SECONDS "):
                        row["python_load_cpu_s"] = float(line.split()[1])
            if rc != 0:
                failed = True
                sys.stderr.write(f"{name} child failed (rc {rc}): {shlex.join(argv)}\n{err[-4000:]}\n")
        row["probe_end_s"] = cpu_probe()
        rounds.append(row)
        load = row["python_load_s"]
        print(f"round {r + 1}: read {row['read_s']:7.3f} s ({fmt_kib(row['read_maxrss_kib'])})   "
              f"report {row['report_s']:7.3f} s ({fmt_kib(row['report_maxrss_kib'])})   "
              f"python {row['python_s']:7.3f} s, pickle.load {load if load is not None else float('nan'):7.3f} s "
              f"({fmt_kib(row['python_maxrss_kib'])})   load {row['load_average_1min']:.2f}   "
              f"probe {1e3 * row['probe_start_s']:.0f} -> {1e3 * row['probe_end_s']:.0f} ms", flush=True)
        for name in children:
            if name.startswith("report_"):
                print(f"         {name} {row[name + '_s']:7.3f} s ({fmt_kib(row[name + '_maxrss_kib'])})", flush=True)

    med = median
    t = {name: med(x[f"{name}_s"] for x in rounds) for name in children}
    rss = {name: max(x[f"{name}_maxrss_kib"] for x in rounds) for name in children}
    loads = [x["python_load_s"] for x in rounds if x["python_load_s"] is not None]
    scans = [x["scan_s"] for x in rounds if x["scan_s"] is not None]
    scan = med(scans) if scans else None
    p_load = med(loads) if loads else float("nan")
    ratio = lambda a, b: a / b if b > 0 else float("inf")
    read_ratio = ratio(p_load, t["read"])
    report_ratio = ratio(p_load, t["report"])
    report_over_read = ratio(t["report"], t["read"])
    format_ratios = {name: ratio(p_load, t[name]) for name in children if name.startswith("report_")}
    cpu = {name: med(x[f"{name}_cpu_s"] for x in rounds) for name in children}
    load_cpu = med([x["python_load_cpu_s"] for x in rounds if "python_load_cpu_s" in x] or [float("nan")])
    cpu_ratios = {name: ratio(load_cpu, cpu[name]) for name in children if name != "python"}

    print()
    print(f"file:            {snap}")
    print(f"file size:       {file_size:,} bytes ({file_size / 2**20:,.1f} MiB)")
    for name in ("read", "report"):
        print(f"{name + ' cmd:':17s}{shlex.join(children[name])}")
    print(f"RSS floor:       {fmt_kib(floor_kib)} (ru_maxrss of /bin/true spawned from this runner; "
          f"peak RSS figures cannot go below it)")
    huge = [x["page_cache_huge_fraction"] for x in rounds if x["page_cache_huge_fraction"] is not None]
    if huge:
        print(f"page cache:      {', '.join(f'{h:.0%}' for h in huge)} of the file in huge folios at the rounds' "
              f"starts (mapped by 2 MiB pages)")
    print()
    print(f"{'':26s}{'read':>12s}{'report':>12s}{'python':>12s}")
    print(f"{'median wall time (s)':26s}{t['read']:12.3f}{t['report']:12.3f}{t['python']:12.3f}")
    print(f"{'median pickle.load (s)':26s}{'':24s}{p_load:12.3f}")
    if scan is not None:
        print(f"{'median scan (s)':26s}{scan:12.3f}   (read() of the file into one buffer: memsnap's read is "
              f"{ratio(t['read'], scan):.1f}x it, pickle.load {ratio(p_load, scan):.0f}x)")
    print(f"{'peak RSS (MiB)':26s}{rss['read'] / 1024:12,.0f}{rss['report'] / 1024:12,.0f}{rss['python'] / 1024:12,.0f}")
    print(f"{'peak RSS / file size':26s}{rss['read'] * 1024 / file_size:12.2f}{rss['report'] * 1024 / file_size:12.2f}"
          f"{rss['python'] * 1024 / file_size:12.2f}")
    print()
    verdict = lambda ok: "PASS" if ok else "FAIL"
    print(f"target: pickle.load / read   >= 30x  -> {read_ratio:.1f}x ({verdict(read_ratio >= 30)})")
    print(f"target: pickle.load / report >= 20x  -> {report_ratio:.1f}x ({verdict(report_ratio >= 20)})")
    print(f"target: report / read        <= 1.5x -> {report_over_read:.2f}x ({verdict(report_over_read <= 1.5)})")
    print(f"target: read peak RSS < file size    -> {rss['read'] * 1024 / file_size:.2f}x "
          f"({verdict(rss['read'] * 1024 < file_size)}; report {rss['report'] * 1024 / file_size:.2f}x)")
    for name, value in format_ratios.items():
        print(f"pickle.load / {name:14s}   -> {value:.1f}x ({t[name]:.3f} s, peak RSS {rss[name] * 1024 / file_size:.2f}x file)")
    stage_ms = {}
    for name in ("read", "timelines", "ooms", "findings", "analyze"):
        values = [x["report_stage_ms"][name] for x in rounds if name in x.get("report_stage_ms", {})]
        if values:
            stage_ms[name] = med(values)
    stage_share = {name: ms / 1000 / t["report"] for name, ms in stage_ms.items()}
    if stage_ms:
        print("JSON report stages (median ms, share of the median report): " +
              ", ".join(f"{name} {ms:.0f} ({stage_share[name]:.0%})" for name, ms in stage_ms.items()) +
              " (analyze is timelines + ooms + findings + the rest of the measures)")
    print(f"pickle.load CPU time (median {load_cpu:.3f} s) / memsnap child CPU time (median, every thread summed): " +
          ", ".join(f"{name} {value:.1f}x" for name, value in cpu_ratios.items()))
    loads_avg = [x["load_average_1min"] for x in rounds]
    print(f"load average (1 min) at the rounds' ends: {', '.join(f'{v:.2f}' for v in loads_avg)}")

    if args.json_out:
        import json
        out = {
            "snapshot": snap, "file_size_bytes": file_size,
            "argv": {name: argv for name, argv in children.items()},
            "rounds": rounds,
            "median_s": t, "median_python_load_s": p_load, "median_scan_s": scan, "peak_rss_kib": rss, "rss_floor_kib": floor_kib,
            "ratio_python_load_over_read": read_ratio, "ratio_python_load_over_report": report_ratio,
            "ratio_report_over_read": report_over_read,
            "ratio_python_load_over": format_ratios,
            "median_cpu_s": cpu, "median_python_load_cpu_s": load_cpu, "ratio_python_cpu_over": cpu_ratios,
            "report_median_stage_ms": stage_ms, "report_stage_share": stage_share,
            "all_ok": not failed,
        }
        with open(args.json_out, "w") as f:
            json.dump(out, f, indent=2)
            f.write("\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
