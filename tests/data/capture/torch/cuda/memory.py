"""torch.cuda.memory stand-in with PyTorch 2.x's signatures (keyword names and defaults)."""
import sys

import torch


def _record_memory_history(enabled="all", context="all", stacks="all", max_entries=sys.maxsize, device=None,
                           clear_history=False, compile_context=False, global_record_annotations=False):
    if enabled not in (None, "state", "all"):
        raise ValueError(f"enabled={enabled!r}")
    if context not in (None, "state", "alloc", "all"):
        raise ValueError(f"context={context!r}")
    if stacks not in ("python", "all"):
        raise ValueError(f"stacks={stacks!r}")
    torch.CALLS.append(("_record_memory_history", {"enabled": enabled, "stacks": stacks, "max_entries": max_entries}))


def _dump_snapshot(filename="dump_snapshot.pickle"):
    torch.CALLS.append(("_dump_snapshot", {"filename": filename}))
    with open(filename, "wb") as f:
        f.write(b"snapshot")
