#!/usr/bin/env python3
"""Builds a large benchmark snapshot by amplifying a real one, keeping its object structure.

Usage:
    python3 bench/amplify_snapshot.py SOURCE OUT --target-mb N [--annotations keep|none|steps]
                                      [--protocol P]

SOURCE is a snapshot pickle (a file of ../shared/corpus/real when present, else one of the
project's fixtures). It is loaded with an Unpickler that refuses every global, so it is never
executed. OUT is what PyTorch's pickler would write for a long run of the same program: the
source's segments and trace repeated COPIES times, where copy i

* has every address (segment, block, trace addr) shifted by i * stride, the stride being the
  device's whole address range rounded up to 1 GiB, so the copies never overlap and each copy's
  trace stays consistent with its own segments (the final segments are the union of the copies');
* has every time_us shifted by i * (the trace's time span + 1);
* has fresh objects wherever the source had a fresh object per use: a fresh dict per trace entry
  and block, a fresh frames list per captured traceback (the lists the source shares, such as the
  alloc, frees and live block of one allocation, stay shared within the copy), fresh strings
  ("N/A" per entry); only the frame dicts {name, filename, line} are shared by every copy, as
  PyTorch's frame cache shares them.

--annotations keep copies the source's external_annotations (shifted in time), none drops them,
steps writes one ProfilerStep#i START/END pair around copy i (for sources without annotations).
"""
import argparse
import os
import pickle
import sys


class DataOnlyUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refusing global {module}.{name}")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("refusing persistent id")


def is_frame(d):
    return isinstance(d, dict) and "filename" in d and "line" in d


def fresh_str(s):
    # A new str object with the same text (the empty string and 1-character strings are CPython
    # singletons, which the pickler also shares in a real file).
    return s if len(s) < 2 else (s[:1] + s[1:])


class Copier:
    """Deep copy of one amplified copy: same sharing as the source, frame dicts kept."""

    def __init__(self, shift, time_shift):
        self.shift = shift          # device -> address shift
        self.time_shift = time_shift
        self.memo = {}

    def clone(self, obj, device=None):
        if isinstance(obj, (int, float, bool)) or obj is None:
            return obj
        if is_frame(obj):
            return obj
        hit = self.memo.get(id(obj))
        if hit is not None:
            return hit
        if isinstance(obj, str):
            out = fresh_str(obj)
        elif isinstance(obj, list):
            out = []
            self.memo[id(obj)] = out
            out.extend(self.clone(x, device) for x in obj)
            return out
        elif isinstance(obj, tuple):
            out = tuple(self.clone(x, device) for x in obj)
        elif isinstance(obj, dict):
            out = {}
            self.memo[id(obj)] = out
            for k, v in obj.items():
                out[k] = self.shifted(k, v, obj, device)
            return out
        else:
            out = obj
        self.memo[id(obj)] = out
        return out

    def shifted(self, key, value, owner, device):
        if key == "device" and isinstance(value, int):
            device = value
        if isinstance(value, int) and not isinstance(value, bool):
            if key in ("address", "addr") and owner.get("action") != "oom":
                return value + self.shift.get(device, 0)
            if key == "time_us":
                return value + self.time_shift
            return value
        return self.clone(value, device)


def address_range(snapshot):
    """device -> (lowest, highest end) over segments, blocks and trace entries."""
    ranges = {}

    def note(device, lo, hi):
        old = ranges.get(device)
        ranges[device] = (lo, hi) if old is None else (min(old[0], lo), max(old[1], hi))

    for seg in snapshot.get("segments", []):
        note(seg.get("device", 0), seg["address"], seg["address"] + seg["total_size"])
    for device, trace in enumerate(snapshot.get("device_traces", [])):
        for e in trace:
            if e.get("action") != "oom" and isinstance(e.get("addr"), int):
                note(device, e["addr"], e["addr"] + max(e.get("size", 0), 0))
    return ranges


def time_span(snapshot):
    times = [e["time_us"] for trace in snapshot.get("device_traces", []) for e in trace if isinstance(e.get("time_us"), int)]
    times += [a["time_us"] for a in snapshot.get("external_annotations", []) if isinstance(a.get("time_us"), int)]
    return (min(times), max(times)) if times else (0, 0)


def amplify(src, copies, annotations):
    gib = 1 << 30
    strides = {d: ((hi - lo + gib - 1) // gib + 1) * gib for d, (lo, hi) in address_range(src).items()}
    t0, t1 = time_span(src)
    span = t1 - t0 + 1
    out = {}
    traces = src.get("device_traces", [])
    segments, new_traces, notes = [], [[] for _ in traces], []
    for i in range(copies):
        c = Copier({d: i * s for d, s in strides.items()}, i * span)
        segments.extend(c.clone(seg, seg.get("device", 0)) for seg in src.get("segments", []))
        for d, trace in enumerate(traces):
            new_traces[d].extend(c.clone(e, d) for e in trace)
        if annotations == "keep":
            notes.extend(c.clone(a) for a in src.get("external_annotations", []))
        elif annotations == "steps":
            for stage, t in (("START", t0), ("END", t1)):
                notes.append({"name": f"ProfilerStep#{i}", "stage": stage, "device": -1, "time_us": t + i * span})
    segments.sort(key=lambda s: (s.get("device", 0), s["address"]))
    for key, value in src.items():
        if key == "segments":
            out[key] = segments
        elif key == "device_traces":
            out[key] = new_traces
        elif key == "external_annotations":
            if annotations != "none":
                out[key] = notes
        else:
            out[key] = value
    if annotations == "steps" and "external_annotations" not in out:
        out["external_annotations"] = notes
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("source")
    ap.add_argument("out")
    ap.add_argument("--target-mb", type=float, required=True, help="approximate output size in MB (1e6 bytes)")
    ap.add_argument("--annotations", choices=("keep", "none", "steps"), default="keep")
    ap.add_argument("--protocol", type=int, default=4)
    args = ap.parse_args()
    with open(args.source, "rb") as f:
        src = DataOnlyUnpickler(f).load()
    if not isinstance(src, dict) or not src.get("device_traces"):
        sys.exit(f"{args.source}: not a snapshot dict with device_traces")
    one = len(pickle.dumps(amplify(src, 1, args.annotations), protocol=args.protocol))
    copies = max(1, round(args.target_mb * 1e6 / one))
    snap = amplify(src, copies, args.annotations)
    with open(args.out, "wb") as f:
        pickle.dump(snap, f, protocol=args.protocol)
    entries = sum(len(t) for t in snap["device_traces"])
    print(f"{args.out}: {os.path.getsize(args.out):,} bytes, {copies} copies of {args.source}, "
          f"{entries:,} trace entries, {len(snap.get('segments', [])):,} segments")


if __name__ == "__main__":
    main()
