#!/usr/bin/env python3
"""Self-check a snapshot written by gen_large_snapshot.py (needs ~8x the file size in RAM).

Checks: opcode set, key order, block tiling and segment sums, fresh 'N/A' per entry, fresh
segment_pool_id tuples, alloc/free pairing (same size and the *same* frames object), and that
replaying the trace yields exactly the final segments and live blocks.
Usage: python3 bench/validate_snapshot.py FILE
"""
import collections
import pickle
import pickletools
import sys

SK = ['device', 'address', 'total_size', 'allocated_size', 'active_size', 'requested_size', 'stream',
      'segment_type', 'segment_pool_id', 'is_expandable', 'blocks', 'frames']
BK = ['address', 'size', 'requested_size', 'state', 'frames']
TK = ['action', 'addr', 'size', 'stream', 'time_us', 'compile_context', 'user_metadata', 'frames']
ALLOWED = {'PROTO', 'FRAME', 'STOP', 'MARK', 'EMPTY_DICT', 'EMPTY_LIST', 'SETITEMS', 'SETITEM', 'APPENDS',
           'APPEND', 'MEMOIZE', 'BINPUT', 'LONG_BINPUT', 'BINGET', 'LONG_BINGET', 'SHORT_BINUNICODE',
           'BINUNICODE', 'BININT1', 'BININT2', 'BININT', 'LONG1', 'NEWTRUE', 'NEWFALSE', 'BINFLOAT', 'TUPLE2'}


def main(fn):
    data = open(fn, 'rb').read()
    ops = collections.Counter(op.name for op, _, _ in pickletools.genops(data))
    assert set(ops) <= ALLOWED, set(ops) - ALLOWED
    snap = pickle.loads(data)
    del data
    assert list(snap) == ['segments', 'device_traces', 'allocator_settings', 'external_annotations'], list(snap)
    for s in snap['segments']:
        assert list(s) in (SK, SK[:-2] + ['frames', 'blocks']), list(s)
        a, tot, al, ac, rq = s['address'], 0, 0, 0, 0
        for b in s['blocks']:
            assert list(b) == BK, list(b)
            assert b['address'] == a + tot
            tot += b['size']
            if b['state'] == 'active_allocated':
                al += b['size']
            if b['state'] != 'inactive':
                ac += b['size']
                rq += b['requested_size']
            else:
                assert b['frames'] == []
        assert (tot, al, ac, rq) == (s['total_size'], s['allocated_size'], s['active_size'], s['requested_size'])
    assert len({id(s['segment_pool_id']) for s in snap['segments']}) == len(snap['segments'])
    lists, na, n = {}, set(), 0
    for d, tr in enumerate(snap['device_traces']):
        live, segs, last_t = {}, {}, 0
        for e in tr:
            n += 1
            act = e['action']
            assert list(e) == (['action', 'device_free'] + TK[2:] if act == 'oom' else TK), list(e)
            assert e['time_us'] >= last_t
            last_t = e['time_us']
            assert e['compile_context'] == 'N/A' and e['user_metadata'] == ''
            na.add(id(e['compile_context']))
            fl = e['frames']
            lists[id(fl)] = fl
            if act == 'alloc':
                assert e['addr'] not in live
                live[e['addr']] = (e['size'], fl, e['stream'])
            elif act == 'free_requested':
                sz, f2, st = live[e['addr']]
                assert sz == e['size'] and f2 is fl and st == e['stream']
            elif act == 'free_completed':
                sz, f2, st = live.pop(e['addr'])
                assert sz == e['size'] and f2 is fl
            elif act == 'segment_alloc':
                assert e['addr'] not in segs
                segs[e['addr']] = e['size']
            elif act == 'segment_free':
                assert segs.pop(e['addr']) == e['size']
        final = {s['address']: s for s in snap['segments'] if s['device'] == d}
        assert {a: s['total_size'] for a, s in final.items()} == segs, f"device {d}: segments != trace replay"
        active = {b['address']: b for s in final.values() for b in s['blocks'] if b['state'] != 'inactive'}
        assert set(active) == set(live), f"device {d}: live blocks != trace replay"
        for a, b in active.items():
            assert b['requested_size'] == live[a][0] and b['frames'] is live[a][1]
    assert len(na) == n, "'N/A' strings are shared, expected a fresh object per entry"
    frames = {id(f): f for fl in lists.values() for f in fl}
    lens = [len(f) for f in lists.values()]
    acts = collections.Counter(e['action'] for tr in snap['device_traces'] for e in tr)
    print(f"{n:,} trace entries; {len(lists):,} distinct stack lists ({min(lens)}-{max(lens)} frames); "
          f"{len(frames):,} distinct frame dicts; {len(snap['segments']):,} segments")
    print("actions:", dict(acts))
    print("OK")


if __name__ == '__main__':
    main(sys.argv[1])
