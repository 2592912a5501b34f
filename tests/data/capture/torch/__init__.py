"""A stand-in for the few torch calls memsnap's capture recipes make (tests/unit/test_capture.cpp).

The signatures are PyTorch 2.x's own (torch/cuda/memory.py: _record_memory_history_impl,
_dump_snapshot; torch/csrc/cuda/Module.cpp: _cuda_attach_out_of_memory_observer), so a recipe
that passes an argument PyTorch does not take fails here with TypeError. Every call is logged
to CALLS; a dump writes a small placeholder file at the path given.
"""
CALLS = []
OBSERVERS = []

from . import _C, cuda, distributed  # noqa: E402,F401
