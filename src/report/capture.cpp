// The capture recipes memsnap prints for `memsnap capture` and when no PATH is given. Every call
// is PyTorch 2.1+'s own: torch.cuda.memory._record_memory_history(enabled, context, stacks,
// max_entries, ...), torch.cuda.memory._dump_snapshot(filename) and
// torch._C._cuda_attach_out_of_memory_observer(fn), fn called as fn(device, alloc, device_total,
// device_free). tests/unit/test_capture.cpp runs each recipe against a stand-in torch module with
// those signatures.
#include "report/capture.h"

namespace memsnap {
namespace {

// Shared by the recipes: what stacks= and max_entries= cost, and how to size them.
constexpr const char* kSizing = R"(# For PyTorch 2.1 or later.
# stacks="python" records Python frames only, which is enough for memsnap's file:line sites
# and keeps the dump fast. stacks="all" (PyTorch's default) adds C++ frames, symbolized when
# the snapshot is dumped: one 1M-entry dump took 461 s with them instead of 4 s.
# max_entries is the ring of trace events kept (the oldest are dropped). Size it to the steps
# you want: events per step x steps, with memsnap needing 3 complete steps in the window for a
# leak verdict. memsnap's report says how many events and steps a snapshot holds; the file
# grows by several KB per entry.

)";

constexpr const char* kMinimalBody = R"(import torch

torch.cuda.memory._record_memory_history(max_entries=100000, stacks="python")
try:
    run_your_code()
    torch.cuda.memory._dump_snapshot("memory_snapshot.pickle")
finally:
    torch.cuda.memory._record_memory_history(enabled=None)

# Then: memsnap memory_snapshot.pickle
)";

constexpr const char* kOomBody = R"(import torch

dumped = False

def dump_on_oom(device, alloc, device_total, device_free):
    # Called by the caching allocator when an allocation fails, with the history up to it.
    global dumped
    if not dumped:  # the first failure is the one to explain
        dumped = True
        torch.cuda.memory._dump_snapshot(f"oom_snapshot_dev{device}.pickle")

torch.cuda.memory._record_memory_history(max_entries=100000, stacks="python")
torch._C._cuda_attach_out_of_memory_observer(dump_on_oom)
run_your_code()

# Then: memsnap oom_snapshot_dev0.pickle
)";

constexpr const char* kDiffBody = R"(import torch

torch.cuda.memory._record_memory_history(max_entries=100000, stacks="python")
for step, batch in enumerate(loader):
    train_step(batch)                    # forward, backward, optimizer.step()
    if step == 1:
        torch.cuda.memory._dump_snapshot("step1.pickle")
    if step == 101:
        torch.cuda.memory._dump_snapshot("step101.pickle")
        break
torch.cuda.memory._record_memory_history(enabled=None)

# Then: memsnap step1.pickle --diff step101.pickle
)";

constexpr const char* kDistributedBody = R"(import os
import torch
import torch.distributed as dist

torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
dist.init_process_group("nccl")          # torchrun / srun set RANK, WORLD_SIZE, LOCAL_RANK
rank = dist.get_rank()
out = os.environ.get("MEMSNAP_DIR", "snapshots")  # a folder every rank can write
os.makedirs(f"{out}/oom", exist_ok=True)
dumped = False

def dump_on_oom(device, alloc, device_total, device_free):
    # Only the rank that fails calls this; the others wait in their next collective.
    global dumped
    if not dumped:
        dumped = True
        torch.cuda.memory._dump_snapshot(f"{out}/oom/rank{rank}.pickle")

torch.cuda.memory._record_memory_history(max_entries=100000, stacks="python")
torch._C._cuda_attach_out_of_memory_observer(dump_on_oom)
for step, batch in enumerate(loader):
    train_step(batch)
    if step == 20:                       # the same step on every rank, past warm-up
        torch.cuda.memory._dump_snapshot(f"{out}/rank{rank}.pickle")
        break
torch.cuda.memory._record_memory_history(enabled=None)

# Then: memsnap snapshots/  (one table of the ranks; the rank is the number after "rank")
# or per rank, where it ran: memsnap snapshots/rank$RANK.pickle --format json -o reports/rank$RANK.json
# and on one machine: memsnap merge reports/   (docs/scale-out.md has Slurm and Kubernetes jobs)
)";

std::string recipe(const char* title, const char* body) { return std::string(title) + kSizing + body; }

std::string minimal() {
  return recipe("# Minimal capture: record allocation history, run, dump the snapshot.\n", kMinimalBody);
}

}  // namespace

std::string capture_recipe(CaptureKind kind) {
  switch (kind) {
    case CaptureKind::Minimal: return minimal();
    case CaptureKind::Oom:
      return recipe("# OOM capture: dump a snapshot automatically at the failure, so you need not reproduce it.\n", kOomBody);
    case CaptureKind::Diff:
      return recipe("# Snapshot pair for a leak: one early (after the first optimizer step, when optimizer\n"
                    "# state exists) and one many steps later, both at the same point of the step.\n",
                    kDiffBody);
    case CaptureKind::Distributed:
      return recipe("# Distributed capture: one snapshot per rank, named rank<N>.pickle for `memsnap DIR` and\n"
                    "# `memsnap merge`, and the failing rank's state when one runs out of memory.\n",
                    kDistributedBody);
    case CaptureKind::NoPath:
      return "memsnap needs a snapshot: memsnap PATH (a .pickle/.json snapshot or a directory of per-rank "
             "snapshots).\nNo snapshot yet? Capture one like this:\n\n" + minimal();
  }
  return minimal();
}

}  // namespace memsnap
