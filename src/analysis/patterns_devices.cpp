// The device_imbalance pattern (rule in patterns_devices.h).
#include "analysis/patterns_devices.h"

#include <algorithm>
#include <fmt/format.h>

#include "analysis/diff.h"

namespace memsnap {
namespace {

constexpr double kImbalanceRatio = 1.5;
constexpr std::int64_t kMinImbalance = 1ll << 30;

struct DeviceLoad {
  std::int64_t device = 0;
  std::int64_t bytes = 0;              // peak allocated, else live at the end
  const DeviceTimeline* timeline = nullptr;  // with a peak
};

std::vector<DeviceLoad> device_loads(const Measured& m) {
  std::vector<DeviceLoad> out;
  for (const DeviceTotals& d : m.totals.devices) {
    DeviceLoad load{d.device, static_cast<std::int64_t>(std::min<std::uint64_t>(d.totals.allocated, INT64_MAX)), nullptr};
    for (const DeviceTimeline& t : m.timelines) {
      if (t.device == d.device && t.peak_allocated && t.events > 0) {
        load.bytes = *t.peak_allocated;
        load.timeline = &t;
      }
    }
    // A device that holds nothing now and held nothing in the trace is not one this process
    // spreads work over: PyTorch lists every visible device, and marks the dump on each with a
    // `snapshot` event (Muduard's diffusion step runs on device 1 alone).
    if (load.bytes == 0 && d.totals.reserved == 0) continue;
    out.push_back(load);
  }
  return out;
}

// What the heavy device holds: its live set at its peak, or at the end.
std::vector<Site> device_sites(const Snapshot& s, const DeviceLoad& load, bool at_peak) {
  return attribute(s, at_peak ? load.timeline->live_at_peak : live_blocks(s, load.device));
}

// The facts of every stack live on the device: its blocks at the end and its live set at the peak.
FrameFacts live_facts(const Snapshot& s, const DeviceLoad& load) {
  FrameFacts facts = 0;
  s.for_each_live_block(load.device, [&](const Block& b) { facts |= s.stack_facts(b.stack); });
  if (load.timeline) {
    for (const LiveItem& item : load.timeline->live_at_peak) facts |= s.stack_facts(item.stack);
  }
  return facts;
}

// The code path that spreads one model over the devices, with what to do about it.
struct DevicePath {
  Sentence evidence;
  std::vector<Fix> fix;
};

DevicePath device_path(FrameFacts facts, std::int64_t heavy) {
  if (facts & kDataParallel) {
    return {sentence("the live stacks run through torch.nn.DataParallel (replicate / scatter / parallel_apply / gather): it gathers every "
                     "output and computes the loss on its output_device, and replicates the model from device 0 each step"),
            {fix(FixId::UseDdpNotDataParallel)}};
  }
  if (facts & kPipelineStages) {
    return {sentence("the live stacks run through pipeline stages (torch.distributed.pipelining): each device holds its stage's layers and activations"),
            {fix(FixId::BalanceStages, heavy)}};
  }
  return {sentence("no DataParallel or pipeline frames: the model or its data is placed on the devices by hand (.to(device))"),
          {fix(FixId::MoveWorkOffDevice, heavy)}};
}

}  // namespace

std::optional<Pattern> device_imbalance(const Snapshot& s, const Measured& m) {
  const auto loads = device_loads(m);
  if (loads.size() < 2) return std::nullopt;
  const auto [lo, hi] = std::minmax_element(loads.begin(), loads.end(), [](const DeviceLoad& a, const DeviceLoad& b) { return a.bytes < b.bytes; });
  if (hi->bytes - lo->bytes <= kMinImbalance || double(hi->bytes) <= kImbalanceRatio * double(lo->bytes)) return std::nullopt;
  const bool at_peak = hi->timeline && lo->timeline;
  Pattern p;
  p.id = PatternId::DeviceImbalance;
  p.verdict = Verdict::Problem;
  p.confidence = Confidence::High;
  std::string levels;
  for (const DeviceLoad& d : loads) levels += fmt::format("{}device {}: {}", levels.empty() ? "" : ", ", d.device, Bytes(d.bytes).text());
  const char* what = at_peak ? "peak" : "live memory";
  const std::string ratio = lo->bytes > 0 ? fmt::format(" ({:.1f}x)", double(hi->bytes) / double(lo->bytes)) : std::string();
  p.summary = sentence("the devices of this process are unbalanced: device {} {} {} against {} on device {}{}; the heaviest device "
                       "limits the batch for all of them",
                       hi->device, what, Bytes(hi->bytes), Bytes(lo->bytes), lo->device, ratio);
  p.evidence.push_back(sentence("{} per device: {}", what, levels));
  const DevicePath path = device_path(live_facts(s, *hi), hi->device);
  p.evidence.push_back(path.evidence);
  auto sites = diff_sites(device_sites(s, *lo, at_peak), device_sites(s, *hi, at_peak));
  for (const DiffSite& d : sites) {
    if (d.delta_bytes <= 0 || p.sites.size() == 3) break;
    p.evidence.push_back(sentence("{} ({}, {}) holds {} more on device {} than on device {}", d.site, d.function.empty() ? "no function" : d.function,
                                  category_name(d.category), Bytes(d.delta_bytes), hi->device, lo->device));
    if (!d.no_stack) p.sites.push_back(d.site);
  }
  p.fix = path.fix;
  p.saving_bytes = static_cast<std::uint64_t>(hi->bytes - lo->bytes) / 2;
  return p;
}

}  // namespace memsnap
