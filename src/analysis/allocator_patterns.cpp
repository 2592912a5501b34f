// The patterns of the allocator's state the report can support with evidence: fragmentation or
// capacity at the OOMs (one finding per device and verdict), large inactive cache (fragments or cached_memory), frees pending on
// another stream, and memory outside PyTorch's allocator (with --device-used).
#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "analysis/analyze.h"
#include "base/units.h"

namespace memsnap {
namespace {


bool expandable_on(const Snapshot& s) { return s.settings.expandable_segments.value_or(false); }

// Private pools at an OOM: a request made inside one gets its own fix first; a default-pool
// request next to private pools' inactive memory (at least a tenth of the request) gets the
// reasons that memory cannot serve it and what to do about the pools first.
void add_pool_fixes(const OomAnalysis& o, std::vector<Fix>& fixes) {
  std::vector<Fix> first;
  if (!o.pool.is_default()) {
    first.push_back(fix(FixId::GraphPoolOom, fmt::format("({},{})", o.pool.first, o.pool.second)));
  } else if (o.inactive_in_other_pools > 0 && o.inactive_in_other_pools * 10 >= o.event.size) {
    first = {fix(FixId::PrivatePoolsCannotServe, Bytes(o.inactive_in_other_pools), o.other_pools), fix(FixId::SharePoolBetweenGraphs),
             fix(FixId::CaptureFewerSizes), fix(FixId::ReduceOverheadWhereNeeded)};
  }
  fixes.insert(fixes.begin(), first.begin(), first.end());
}

// One pattern per device and verdict, from its first OOM with that verdict; the later ones are
// counted in its evidence (a trace that retries after OOMs would otherwise repeat one finding).
void oom_patterns(const Snapshot& s, const Measured& a, std::vector<Pattern>& out) {
  std::map<std::pair<std::int64_t, OomVerdict>, std::pair<std::size_t, std::size_t>> first;  // -> (pattern, repeats)
  for (const OomAnalysis& o : a.ooms) {
    if (o.verdict != OomVerdict::Fragmentation && o.verdict != OomVerdict::Capacity) continue;
    if (const auto it = first.find({o.event.device, o.verdict}); it != first.end()) {
      ++it->second.second;
      continue;
    }
    first[{o.event.device, o.verdict}] = {out.size(), 0};
    Pattern p;
    const std::string where = site_label(s, o.event.stack);
    p.evidence = {
        sentence("oom event on device {}: request of {} (rounded), device_free {}", o.event.device, Bytes(o.event.size),
                 Bytes(o.event.device_free)),
        sentence("at the OOM{}: allocated {}, reserved {}, inactive {} in {} segments, largest inactive block {}",
                 o.at_oom.replayed ? " (replayed from the trace)" : " (final state; no trace to replay)", Bytes(o.at_oom.allocated),
                 Bytes(o.at_oom.reserved), Bytes(o.at_oom.inactive), o.at_oom.segments_with_inactive,
                 Bytes(o.at_oom.largest_inactive_block)),
        sentence("largest inactive block the request could reuse (same pool and stream): {}", Bytes(o.largest_reusable_block)),
    };
    if (!where.empty()) p.evidence.push_back(sentence("the failed allocation came from {}", where));
    p.verdict = Verdict::Problem;
    p.confidence = Confidence::High;
    p.summary = sentence("{}", o.reason);
    if (o.verdict == OomVerdict::Fragmentation) {
      p.id = PatternId::Fragmentation;
      p.fix = {expandable_on(s) ? fix(FixId::ExpandableAlreadyOn) : fix(FixId::ExpandableSegments), fix(FixId::MaxSplitSize, o.suggested_max_split_mb),
               fix(FixId::FixedShapes)};
      p.saving_bytes = o.fragments_in_pool;
    } else {
      p.id = PatternId::Capacity;
      p.fix = {fix(FixId::SmallerBatch), fix(FixId::Checkpointing), fix(FixId::ShardState), fix(FixId::LowerPrecision)};
      if (o.process_limit) p.fix.insert(p.fix.begin(), fix(FixId::RaiseProcessLimit, Bytes(o.event.device_free), Bytes(o.process_limit->below)));
    }
    if (o.process_limit) {
      p.evidence.push_back(sentence("device_free ({}) exceeds the segment the request needed, so cudaMalloc did not fail: the "
                                    "process's limit refused it; the snapshot does not record the limit, only that it lay between "
                                    "{} (reserved at the OOM) and {} (that plus the segment)",
                                    Bytes(o.event.device_free), Bytes(o.process_limit->at_least), Bytes(o.process_limit->below)));
    }
    add_pool_fixes(o, p.fix);
    if (!where.empty()) p.sites.push_back(where);
    out.push_back(std::move(p));
  }
  for (const auto& [key, at] : first) {
    if (at.second == 0) continue;
    out[at.first].evidence.push_back(sentence("{} later studied OOM(s) on device {} have the same verdict ({})", at.second, key.first,
                                              oom_verdict_name(key.second)));
  }
}

// Without an OOM, inactive memory is only worth a finding when it is large: fragments (free
// blocks inside segments that still hold live ones) spread thin are fragmentation; wholly free
// segments are ordinary cache, said plainly to be "not fragmentation".
void inactive_memory(const Snapshot& s, const Measured& a, std::vector<Pattern>& out) {
  if (!a.ooms.empty()) return;
  const Totals& t = a.totals.overall;
  if (t.inactive < 2 * kGiB || t.inactive * 10 < t.reserved * 3) return;
  std::uint64_t used_segments = 0;  // partly used segments holding inactive memory
  for (const auto& pool : a.pools) used_segments += pool.totals.segments_with_inactive - pool.totals.free_segments;
  const std::uint64_t fragments = t.fragments();
  const auto share = [&](std::uint64_t part) { return 100.0 * static_cast<double>(part) / static_cast<double>(t.reserved); };
  Pattern p;
  p.verdict = Verdict::Info;
  p.evidence = {sentence("inactive {} ({:.0f}% of reserved {})", Bytes(t.inactive), share(t.inactive), Bytes(t.reserved)),
                sentence("{} ({:.0f}% of reserved) in {} wholly free segment{}: released by torch.cuda.empty_cache() and by "
                         "the allocator itself before it raises an OOM",
                         Bytes(t.inactive_in_free_segments), share(t.inactive_in_free_segments), t.free_segments,
                         plural_s(t.free_segments)),
                sentence("{} ({:.0f}% of reserved) in fragments inside {} partly used segment{}, the largest {}", Bytes(fragments),
                         share(fragments), used_segments, plural_s(used_segments), Bytes(t.largest_fragment))};
  const bool fragmented = fragments >= 2 * kGiB && fragments * 10 >= t.reserved * 3 && t.largest_fragment * 4 <= fragments && used_segments >= 8;
  if (fragmented) {
    p.id = PatternId::Fragmentation;
    p.confidence = Confidence::Low;
    p.summary = sentence("{} of {} reserved is free in fragments spread over {} partly used segments, the largest only {}",
                         Bytes(fragments), Bytes(t.reserved), used_segments, Bytes(t.largest_fragment));
    p.fix = {expandable_on(s) ? fix(FixId::ExpandableAlreadyOn) : fix(FixId::ExpandableIfLargerFails, Bytes(t.largest_fragment)),
             fix(FixId::EmptyCacheKeepsFragments)};
    p.saving_bytes = fragments;
  } else {
    p.id = PatternId::CachedMemory;
    p.confidence = Confidence::High;
    p.summary = t.inactive_in_free_segments * 2 >= t.inactive
                    ? sentence("{} of {} reserved is inactive cache, not fragmentation: {} of it is in {} wholly free segment{}, "
                               "which the allocator releases before it would raise an OOM and torch.cuda.empty_cache() returns",
                               Bytes(t.inactive), Bytes(t.reserved), Bytes(t.inactive_in_free_segments), t.free_segments,
                               plural_s(t.free_segments))
                    : sentence("{} of {} reserved is inactive cache, not fragmentation: its {} of fragments sit in few or large "
                               "blocks (the largest {}) that later requests of that size reuse",
                               Bytes(t.inactive), Bytes(t.reserved), Bytes(fragments), Bytes(t.largest_fragment));
  }
  out.push_back(std::move(p));
}

void pending_frees(const Measured& a, std::vector<Pattern>& out) {
  const Totals& t = a.totals.overall;
  std::uint64_t pending_requests = 0, pending_bytes = 0;
  std::vector<std::int64_t> streams;
  for (const auto& tl : a.timelines) {
    pending_requests += tl.pending_requests;
    pending_bytes += tl.pending_bytes;
    streams.insert(streams.end(), tl.pending_streams.begin(), tl.pending_streams.end());
  }
  if (t.pending_free == 0 && pending_requests == 0) return;
  Pattern p;
  p.id = PatternId::PendingFrees;
  p.verdict = t.pending_free * 10 > t.reserved ? Verdict::Problem : Verdict::Info;
  p.confidence = Confidence::High;
  p.summary = sentence("{} is freed by Python but not yet reusable: the blocks wait for work on another stream (record_stream)",
                       Bytes(t.pending_free));
  if (t.pending_free) p.evidence.push_back(sentence("{} in blocks in state active_pending_free at the end", Bytes(t.pending_free)));
  if (pending_requests) {
    std::string list;
    for (std::size_t i = 0; i < streams.size() && i < 4; ++i) list += (i ? ", " : "") + std::to_string(streams[i]);
    p.evidence.push_back(sentence("{} free_requested events ({} requested) have no free_completed, on stream(s) {}", pending_requests,
                                  Bytes(pending_bytes), list));
  }
  p.fix = {fix(FixId::SyncSideStream), fix(FixId::AvoidRecordStream)};
  p.saving_bytes = t.pending_free;
  out.push_back(std::move(p));
}

void non_pytorch_memory(const Measured& a, std::vector<Pattern>& out) {
  if (!a.options.device_used) return;
  const std::uint64_t used = *a.options.device_used;
  const std::uint64_t reserved = a.totals.overall.reserved;
  if (used <= reserved) return;
  const std::uint64_t gap = used - reserved;
  if (gap < 512 * kMiB || gap * 20 < used) return;
  Pattern p;
  p.id = PatternId::NonPytorchMemory;
  p.verdict = Verdict::Problem;
  p.confidence = gap > 2 * kGiB ? Confidence::High : Confidence::Medium;
  p.summary = sentence("{} of device memory is in use outside PyTorch's caching allocator", Bytes(gap));
  p.evidence = {sentence("device memory used (given with --device-used): {}", Bytes(used)),
                sentence("reserved by PyTorch's allocator (snapshot): {}", Bytes(reserved)),
                sentence("the CUDA context itself takes several hundred MiB per process")};
  p.fix = {fix(FixId::CheckNativeBuffers), fix(FixId::CompareDeviceMemoryUsed), fix(FixId::OtherProcesses)};
  out.push_back(std::move(p));
}

}  // namespace

std::vector<Pattern> allocator_patterns(const Snapshot& s, const Measured& a) {
  std::vector<Pattern> out;
  oom_patterns(s, a, out);
  inactive_memory(s, a, out);
  pending_frees(a, out);
  non_pytorch_memory(a, out);
  return out;
}

}  // namespace memsnap
