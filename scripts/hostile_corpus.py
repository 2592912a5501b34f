#!/usr/bin/env python3
"""Writes memsnap's hostile corpus: one file per attack class (overflow, hangs, amplification,
bombs, bad UTF-8, odd encodings), each small, each a case memsnap must answer cleanly (exit 0 or
1, never a crash, a hang or a sanitizer report) within max(256 MiB, 4x the input) and 20 s.

    scripts/hostile_corpus.py OUT_DIR

Used by scripts/soak_hostile.sh; stdlib only."""
import gzip
import json
import os
import pickle
import shutil
import subprocess
import sys

FRAME = {"filename": "/w/train.py", "line": 7, "name": "main"}


def segment(addr, size, blocks, device=0):
    return {"device": device, "address": addr, "total_size": size, "allocated_size": sum(b["size"] for b in blocks if b["state"] == "active_allocated"),
            "active_size": 0, "requested_size": 0, "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
            "is_expandable": False, "frames": [], "blocks": blocks}


def block(size, state="active_allocated", frames=None):
    return {"size": size, "requested_size": size, "state": state, "frames": frames or [FRAME]}


def event(action, addr, size, time_us, frames=None):
    return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": time_us, "frames": frames or [FRAME]}


def snapshot(segments=(), traces=((),), settings=None, annotations=()):
    return {"segments": list(segments), "device_traces": [list(t) for t in traces],
            "allocator_settings": settings if settings is not None else {"expandable_segments": False},
            "external_annotations": list(annotations)}


def huge_sizes():
    # Three allocations of 2^62 + 2^61 bytes: their sum passes 2^63.
    size = (1 << 62) + (1 << 61)
    evs = [event("alloc", (i + 1) << 20, size, 1000 + i) for i in range(3)]
    return snapshot(traces=[evs])


def huge_segments():
    size = (1 << 62) + (1 << 61)
    return snapshot(segments=[segment((i + 1) << 40, size, [block(size)]) for i in range(3)])


def huge_times():
    t = (1 << 63) - 10
    evs = [event("alloc", 1 << 20, 512, -t), event("free_requested", 1 << 20, 512, t), event("free_completed", 1 << 20, 512, t)]
    return snapshot(traces=[evs])


def wide_int():
    return snapshot(segments=[segment(1 << 40, 1 << 70, [block(1 << 70)])])


def self_referencing_settings():
    d = {}
    d["a"] = d
    d["b"] = d
    return snapshot(settings=d)


def many_unknown_keys():
    seg = segment(1 << 40, 1 << 20, [block(1 << 20)])
    for i in range(300_000):
        seg[f"k{i}"] = 0
    return snapshot(segments=[seg])


def many_unknown_actions():
    return snapshot(traces=[[event(f"act{i}", 1 << 20, 512, i) for i in range(300_000)]])


def many_block_states():
    return snapshot(segments=[segment(1 << 40, 300_000 * 512, [block(512, state=f"st{i}") for i in range(300_000)])])


def bad_utf8_frames():
    frames = [{"filename": "/w/\udc80lone.py", "line": 1, "name": "f\ud800"}]
    return snapshot(segments=[segment(1 << 40, 1 << 20, [block(1 << 20, frames=frames)])],
                    traces=[[event("alloc", 1 << 40, 1 << 20, 1, frames)]])


def global_annotations():
    # Annotations for every device (device -1) on a snapshot with 64 devices.
    anns = [{"name": f"ProfilerStep#{i // 2}", "stage": "START" if i % 2 == 0 else "END", "device": -1, "time_us": i}
            for i in range(40_000)]
    traces = [[event("alloc", 1 << 20, 512, 5)] for _ in range(64)]
    return snapshot(traces=traces, annotations=anns)


def huge_steps():
    # Four ProfilerStep#N starts, an allocation of 2^62 + 2^61 bytes in each (never freed): the
    # per-site bytes at the step boundaries pass 2^63.
    size = (1 << 62) + (1 << 61)
    anns = [{"name": f"ProfilerStep#{i}", "stage": "START", "device": 0, "time_us": 1000 + 100 * i} for i in range(4)]
    evs = [event("alloc", (i + 1) << 20, size, 1010 + 100 * i) for i in range(4)]
    return snapshot(traces=[evs], annotations=anns)


def huge_segment_events():
    # Segment allocations of 2^62 + 2^61 bytes with no segment in the final state: the reserved
    # curve, walked backwards from 0, passes -2^63.
    size = (1 << 62) + (1 << 61)
    return snapshot(traces=[[event("segment_alloc", (i + 1) << 40, size, 1000 + i) for i in range(3)]])


def one_huge_segment(size):
    # One segment wholly used by one block of `size` bytes.
    return snapshot(segments=[segment(1 << 40, size, [block(size)])])


def write_pickle(path, obj):
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=4)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    cases = {"huge_sizes": huge_sizes, "huge_segments": huge_segments, "huge_times": huge_times, "wide_int": wide_int,
             "self_referencing_settings": self_referencing_settings, "many_unknown_keys": many_unknown_keys,
             "many_unknown_actions": many_unknown_actions, "many_block_states": many_block_states,
             "bad_utf8_frames": bad_utf8_frames, "global_annotations": global_annotations,
             "huge_steps": huge_steps, "huge_segment_events": huge_segment_events,
             # --diff huge_segment_low huge_segment_high: the deltas pass -2^63 as int64.
             "huge_segment_low": lambda: one_huge_segment((1 << 62) + (1 << 61)),
             "huge_segment_high": lambda: one_huge_segment((1 << 63) + (1 << 62))}
    for name, make in cases.items():
        write_pickle(os.path.join(out, name + ".pickle"), make())
    # Two ranks of 2^62 + 2^61 allocated bytes each: their median passes 2^63 on the way.
    os.makedirs(os.path.join(out, "huge_ranks"), exist_ok=True)
    for rank in range(2):
        write_pickle(os.path.join(out, "huge_ranks", f"rank{rank}.pickle"), one_huge_segment((1 << 62) + (1 << 61)))
    # Invalid UTF-8 bytes (not even surrogates) in a frame's filename: patch the pickle's bytes.
    raw = pickle.dumps(bad_utf8_frames(), protocol=4).replace(b"/w/\xed\xb2\x80lone.py", b"/w/\xff\xfe\xc0lone.py")
    open(os.path.join(out, "invalid_utf8_frames.pickle"), "wb").write(raw)
    # JSON with a BOM; multi-member gzip; bombs (gzip of a pickle-shaped prefix and zeros, gzip of zeros).
    open(os.path.join(out, "bom.json"), "wb").write(b"\xef\xbb\xbf" + json.dumps(huge_segments()).encode())
    plain = pickle.dumps(snapshot(segments=[segment(1 << 40, 1 << 20, [block(1 << 20)])]), protocol=4)
    open(os.path.join(out, "multi_member.pickle.gz"), "wb").write(gzip.compress(plain[:100]) + gzip.compress(plain[100:]))
    with gzip.open(os.path.join(out, "pickle_bomb.pickle.gz"), "wb", compresslevel=9) as f:
        f.write(b"\x80\x04\x8e" + (1 << 30).to_bytes(8, "little"))
        chunk = bytes(1 << 20)
        for _ in range(1024):
            f.write(chunk)
    with gzip.open(os.path.join(out, "zero_bomb.gz"), "wb", compresslevel=9) as f:
        chunk = bytes(1 << 20)
        for _ in range(1024):
            f.write(chunk)
    if shutil.which("zstd"):
        subprocess.run(["zstd", "-q", "-f", "-19", os.path.join(out, "zero_bomb.gz"), "-o", os.path.join(out, "gz_in.zst")], check=True)


if __name__ == "__main__":
    main()
