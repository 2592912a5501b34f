#!/usr/bin/env python3
"""The same bytes, read by the same memsnap, from a page cache in small and in huge folios.

Usage:
    python3 bench/page_cache_ab.py SNAPSHOT --memsnap PATH [--rounds 6] [--dir DIR]

Writes two copies of SNAPSHOT into DIR (default: beside it), both as Python writes a file (64 KiB
writes, so the page cache holds them in small folios), then drops the second copy from the page
cache (fsync, POSIX_FADV_DONTNEED) and reads it back with read(): with a large read-ahead the
kernel brings it back in 2 MiB folios, which a mapping maps with huge pages. Then it alternates
the full JSON report (`PATH COPY --format json`) on the two copies for the given rounds and
prints, for each, the wall time and user + system CPU of every round, their medians, and the
share of the copy in huge folios before each round (a child maps it and reads FilePmdMapped).
On a VM whose hypervisor keeps shadow page tables the first access to each 4 KiB page of a
mapping traps to the hypervisor; to a 2 MiB page, once (bench/README §21).
The copies are removed at the end.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_bench import median, page_cache_huge_fraction, run_child  # noqa: E402


def copy_as_python_writes(src, dst):
    with open(src, "rb") as f, open(dst, "wb") as g:
        while chunk := f.read(1 << 16):
            g.write(chunk)


def reread_in_huge_folios(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    buf = bytearray(1 << 20)
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buf):
            pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("snapshot")
    ap.add_argument("--memsnap", required=True)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    where = args.dir or os.path.dirname(os.path.abspath(args.snapshot))
    base = os.path.join(where, os.path.basename(args.snapshot))
    copies = {"small": base + ".small-folios", "huge": base + ".huge-folios"}
    size = os.path.getsize(args.snapshot)
    try:
        for path in copies.values():
            copy_as_python_writes(args.snapshot, path)
        reread_in_huge_folios(copies["huge"])
        times = {name: [] for name in copies}
        for r in range(args.rounds):
            for name, path in copies.items():
                huge = page_cache_huge_fraction(sys.executable, path, size)
                rc, wall, rss, err, cpu = run_child([args.memsnap, path, "--format", "json"])
                if rc != 0:
                    sys.exit(f"memsnap failed on {path}: {err.strip()}")
                times[name].append((wall, cpu))
                print(f"round {r + 1} {name:5s}: {wall:.3f} s wall, {cpu:.3f} s CPU, "
                      f"{huge if huge is None else f'{huge:.0%}'} of the copy in huge folios before it")
        for name in copies:
            walls = [w for w, _ in times[name]]
            cpus = [c for _, c in times[name]]
            print(f"{name:5s} folios: median {median(walls):.3f} s wall, {median(cpus):.3f} s CPU")
        print(f"small / huge: {median([w for w, _ in times['small']]) / median([w for w, _ in times['huge']]):.2f}x wall, "
              f"{median([c for _, c in times['small']]) / median([c for _, c in times['huge']]):.2f}x CPU")
    finally:
        for path in copies.values():
            if os.path.exists(path):
                os.remove(path)


if __name__ == "__main__":
    main()
