#!/usr/bin/env python3
"""Drop-in for the analyze-memory-snapshot workflow's helper: runs memsnap.

    python scripts/analyze_snapshot.py SNAPSHOT [--diff LATER] [--max-trace-events N]

SNAPSHOT is a .pickle/.pkl/.json snapshot (optionally gzip/zstd) or a directory holding one
snapshot per rank. Any further memsnap option (--format json, --top N, --device-used SIZE,
-o FILE) is passed through. The memsnap binary is, in order: $MEMSNAP; the repository's
build/src/memsnap (next to this script's parent); memsnap on PATH. The exit status is
memsnap's: 0 when the analysis ran, 2 for a usage error, 1 for an input it cannot analyze.
"""

import argparse
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def find_memsnap():
    env = os.environ.get("MEMSNAP")
    if env:
        return env if os.access(env, os.X_OK) else None
    built = os.path.join(REPO, "build", "src", "memsnap")
    if os.access(built, os.X_OK):
        return built
    return shutil.which("memsnap")


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="analyze_snapshot.py",
        description="Analyze a PyTorch CUDA memory snapshot (runs memsnap; see the module docstring).")
    ap.add_argument("snapshot", nargs="?",
                    help="snapshot file (.pickle, .pkl, .json) or a directory of per-rank snapshots; without it "
                         "memsnap says what it needs and how to capture one")
    ap.add_argument("--diff", metavar="LATER", help="a later snapshot of the same run to compare with")
    ap.add_argument("--max-trace-events", metavar="N", type=int,
                    help="keep only the newest N trace events per device (default 1000000)")
    args, rest = ap.parse_known_args(argv)
    memsnap = find_memsnap()
    if not memsnap:
        sys.stderr.write("analyze_snapshot.py: memsnap not found; build it (scripts/build.sh) "
                         "or set MEMSNAP=/path/to/memsnap\n")
        return 2
    cmd = [memsnap] + ([args.snapshot] if args.snapshot else [])
    if args.diff:
        cmd += ["--diff", args.diff]
    if args.max_trace_events is not None:
        cmd += ["--max-trace-events", str(args.max_trace_events)]
    cmd += rest
    try:
        return subprocess.call(cmd)
    except OSError as e:
        sys.stderr.write(f"analyze_snapshot.py: cannot run {memsnap}: {e}\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())
