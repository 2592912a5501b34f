// The capture recipes memsnap prints for `memsnap capture` and when no PATH is given.
#include "report/capture.h"

namespace memsnap {
namespace {

constexpr const char* kMinimal = R"(# Minimal capture: record allocation history, run, dump the snapshot.
import torch

torch.cuda.memory._record_memory_history(max_entries=100000)
try:
    run_your_code()
    torch.cuda.memory._dump_snapshot("memory_snapshot.pickle")
finally:
    torch.cuda.memory._record_memory_history(enabled=None)

# Long jobs: raise max_entries, but trace history costs host memory.
# Then: memsnap memory_snapshot.pickle
)";

constexpr const char* kOom = R"(# OOM capture: dump a snapshot automatically at the failure, so you need not reproduce it.
import torch

def dump_on_oom(device, alloc, device_alloc, device_free):
    torch.cuda.memory._dump_snapshot(f"oom_snapshot_dev{device}.pickle")

torch.cuda.memory._record_memory_history(max_entries=100000)
torch._C._cuda_attach_out_of_memory_observer(dump_on_oom)

# Then: memsnap oom_snapshot_dev0.pickle
)";

constexpr const char* kDiff = R"(# Snapshot pair for a leak: one early (after the first optimizer step, when optimizer
# state exists) and one many steps later, both at the same point of the step.
import torch

torch.cuda.memory._record_memory_history(max_entries=100000)
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

}  // namespace

std::string capture_recipe(CaptureKind kind) {
  switch (kind) {
    case CaptureKind::Minimal: return kMinimal;
    case CaptureKind::Oom: return kOom;
    case CaptureKind::Diff: return kDiff;
    case CaptureKind::NoPath:
      return std::string("memsnap needs a snapshot: memsnap PATH (a .pickle/.json snapshot or a directory of per-rank "
                         "snapshots).\nNo snapshot yet? Capture one like this:\n\n") + kMinimal;
  }
  return kMinimal;
}

}  // namespace memsnap
