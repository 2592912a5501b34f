#!/usr/bin/env python3
"""Runs a `memsnap capture` recipe (stdin) in the current folder against the stand-in torch beside
this file, and prints each torch call as one line: NAME key=value ...

The recipe's placeholders are provided: run_your_code() (raises an OOM through the observers when
--oom is given), loader (200 batches) and train_step(batch). With --oom the first train_step of
step 3 runs out of memory: every attached observer is called twice (a failure can repeat), the
way the caching allocator calls them, with (device, alloc, device_total, device_free).
  memsnap capture --distributed | RANK=3 python3 tests/data/capture/run_recipe.py [--oom]
"""
import argparse
import os
import sys

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402  (the stand-in)


class OutOfMemoryError(RuntimeError):
    pass


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--oom", action="store_true")
    args = parser.parse_args()
    source = sys.stdin.read()
    state = {"step": 0}

    def fail():
        for observer in torch.OBSERVERS:
            for _ in range(2):
                observer(0, 2 << 30, 80 << 30, 1 << 20)
        raise OutOfMemoryError("CUDA out of memory")

    def run_your_code():
        if args.oom:
            fail()

    def train_step(batch):
        state["step"] += 1
        if args.oom and state["step"] == 4:
            fail()

    names = {"__name__": "__main__", "run_your_code": run_your_code, "train_step": train_step, "loader": range(200)}
    try:
        exec(compile(source, "<recipe>", "exec"), names)
    except OutOfMemoryError:
        print("raised OutOfMemoryError")
    for name, kwargs in torch.CALLS:
        print(" ".join([name] + [f"{k}={v}" for k, v in kwargs.items()]))
    print("steps run", state["step"])


if __name__ == "__main__":
    main()
