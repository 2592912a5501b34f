#!/usr/bin/env python3
"""Runs a `memsnap capture` recipe (argv[1]) with real PyTorch on a GPU, in the current folder
(tests/data/h200/README.md: how the recipe_* snapshots were made).
Placeholders: run_your_code() (a few small training steps; with --oom a batch that does not fit a
2 GiB cap), loader (range(200)) and train_step(batch)."""
import sys, torch, torch.nn as nn

oom = "--oom" in sys.argv
model = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024)).cuda()
opt = torch.optim.AdamW(model.parameters())


def train_step(batch, rows=64):
    opt.zero_grad(set_to_none=True)
    x = torch.randn(rows, 1024, device="cuda")
    model(x).square().mean().backward()
    opt.step()


def run_your_code():
    if oom:
        torch.cuda.set_per_process_memory_fraction(2 * 2**30 / torch.cuda.get_device_properties(0).total_memory)
        for _ in range(3):
            train_step(None, rows=1 << 20)
    for _ in range(3):
        train_step(None)


names = {"__name__": "__main__", "run_your_code": run_your_code, "train_step": train_step, "loader": range(200)}
try:
    exec(compile(open(sys.argv[1]).read(), sys.argv[1], "exec"), names)
    print("recipe ran")
except torch.cuda.OutOfMemoryError as e:
    print("raised OutOfMemoryError:", str(e)[:120])
