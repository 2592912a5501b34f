// Findings: the named patterns the report stage can support with evidence (fragmentation,
// capacity, pending frees, non-PyTorch memory), the one-sentence headline, concrete next steps
// and what the snapshot cannot tell.
#include <algorithm>
#include <fmt/format.h>

#include "analysis/analyze.h"
#include "analysis/patterns.h"
#include "base/format_bytes.h"

namespace memsnap {
namespace {


constexpr std::uint64_t kMiB = 1ull << 20;
constexpr std::uint64_t kGiB = 1ull << 30;

const Pattern* find_pattern(const Analysis& a, std::string_view id) {
  for (const auto& p : a.patterns) {
    if (p.id == id) return &p;
  }
  return nullptr;
}

void oom_patterns(const Snapshot& s, Analysis& a) {
  for (const OomAnalysis& o : a.ooms) {
    Pattern p;
    const std::string where = site_label(s, o.event.stack);
    std::vector<std::string> evidence = {
        fmt::format("oom event on device {}: request of {} (rounded), device_free {}", o.event.device, format_bytes(o.event.size),
                    format_bytes(o.event.device_free)),
        fmt::format("at the OOM{}: allocated {}, reserved {}, inactive {} in {} segments, largest inactive block {}",
                    o.at_oom.replayed ? " (replayed from the trace)" : " (final state; no trace to replay)",
                    format_bytes(o.at_oom.allocated), format_bytes(o.at_oom.reserved), format_bytes(o.at_oom.inactive), o.at_oom.segments_with_inactive,
                    format_bytes(o.at_oom.largest_inactive_block)),
        fmt::format("largest inactive block the request could reuse (same pool and stream): {}", format_bytes(o.largest_reusable_block)),
    };
    if (!where.empty()) evidence.push_back("the failed allocation came from " + where);
    if (o.verdict == OomVerdict::Fragmentation) {
      p.id = "fragmentation";
      p.verdict = "problem";
      p.confidence = "high";
      p.summary = o.reason;
      p.fix = {"set PYTORCH_ALLOC_CONF=expandable_segments:True so segments grow instead of new fixed-size segments being allocated",
               fmt::format("or set PYTORCH_ALLOC_CONF=max_split_size_mb:{} so blocks larger than the failing request are not split",
                           o.suggested_max_split_mb),
               "reduce allocation-size variation (pad batches or sequences to fixed shapes)"};
    } else if (o.verdict == OomVerdict::Capacity) {
      p.id = "capacity";
      p.verdict = "problem";
      p.confidence = "high";
      p.summary = o.reason;
      p.fix = {"reduce the batch size or sequence length", "use activation checkpointing (torch.utils.checkpoint)",
               "shard parameters, gradients and optimizer state (FSDP/ZeRO)", "use lower precision (bf16/fp16) where possible"};
    } else {
      continue;
    }
    p.evidence = std::move(evidence);
    if (!where.empty()) p.sites.push_back(where);
    a.patterns.push_back(std::move(p));
  }
}

// Without an OOM, inactive memory is only worth a finding when it is large: fragments (free
// blocks inside segments that still hold live ones) spread thin are fragmentation; wholly free
// segments are ordinary cache, said plainly to be "not fragmentation".
void inactive_memory(Analysis& a) {
  if (!a.ooms.empty()) return;
  const Totals& t = a.totals.overall;
  if (t.inactive < 2 * kGiB || t.inactive * 10 < t.reserved * 3) return;
  std::uint64_t used_segments = 0;  // partly used segments holding inactive memory
  for (const auto& pool : a.pools) used_segments += pool.totals.segments_with_inactive - pool.totals.free_segments;
  const std::uint64_t fragments = t.fragments();
  const auto share = [&](std::uint64_t part) { return 100.0 * static_cast<double>(part) / static_cast<double>(t.reserved); };
  Pattern p;
  p.verdict = "info";
  p.evidence = {fmt::format("inactive {} ({:.0f}% of reserved {})", format_bytes(t.inactive), share(t.inactive), format_bytes(t.reserved)),
                fmt::format("{} ({:.0f}% of reserved) in {} wholly free segment(s): released by torch.cuda.empty_cache() and by "
                            "the allocator itself before it raises an OOM",
                            format_bytes(t.inactive_in_free_segments), share(t.inactive_in_free_segments), t.free_segments),
                fmt::format("{} ({:.0f}% of reserved) in fragments inside {} partly used segment(s), the largest {}", format_bytes(fragments),
                            share(fragments), used_segments, format_bytes(t.largest_fragment))};
  const bool fragmented = fragments >= 2 * kGiB && fragments * 10 >= t.reserved * 3 && t.largest_fragment * 4 <= fragments && used_segments >= 8;
  if (fragmented) {
    p.id = "fragmentation";
    p.confidence = "low";
    p.summary = fmt::format("{} of {} reserved is free in fragments spread over {} partly used segments, the largest only {}",
                            format_bytes(fragments), format_bytes(t.reserved), used_segments, format_bytes(t.largest_fragment));
    p.fix = {fmt::format("if an allocation larger than {} fails, set PYTORCH_ALLOC_CONF=expandable_segments:True", format_bytes(t.largest_fragment)),
             "torch.cuda.empty_cache() cannot return fragments: only segments with no live block are released"};
  } else {
    p.id = "cached_memory";
    p.confidence = "high";
    p.summary = t.inactive_in_free_segments * 2 >= t.inactive
                    ? fmt::format("{} of {} reserved is inactive cache, not fragmentation: {} of it is in {} wholly free segment(s), "
                                  "which the allocator releases before it would raise an OOM and torch.cuda.empty_cache() returns",
                                  format_bytes(t.inactive), format_bytes(t.reserved), format_bytes(t.inactive_in_free_segments),
                                  t.free_segments)
                    : fmt::format("{} of {} reserved is inactive cache, not fragmentation: its {} of fragments sit in few or large "
                                  "blocks (the largest {}) that later requests of that size reuse",
                                  format_bytes(t.inactive), format_bytes(t.reserved), format_bytes(fragments),
                                  format_bytes(t.largest_fragment));
  }
  a.patterns.push_back(std::move(p));
}

void pending_frees(Analysis& a) {
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
  p.id = "pending_frees";
  p.verdict = t.pending_free * 10 > t.reserved ? "problem" : "info";
  p.confidence = "high";
  p.summary = fmt::format("{} is freed by Python but not yet reusable: the blocks wait for work on another stream (record_stream)",
                          format_bytes(t.pending_free));
  if (t.pending_free) p.evidence.push_back(fmt::format("{} in blocks in state active_pending_free at the end", format_bytes(t.pending_free)));
  if (pending_requests) {
    std::string list;
    for (std::size_t i = 0; i < streams.size() && i < 4; ++i) list += fmt::format("{}{}", i ? ", " : "", streams[i]);
    p.evidence.push_back(fmt::format("{} free_requested events ({} requested) have no free_completed, on stream(s) {}",
                                     pending_requests, format_bytes(pending_bytes), list));
  }
  p.fix = {"synchronize the side stream (or let it finish) before the memory is needed again",
           "avoid tensor.record_stream() on long-lived side-stream work; free tensors after the consuming stream is done"};
  a.patterns.push_back(std::move(p));
}

void non_pytorch_memory(Analysis& a) {
  if (!a.options.device_used) return;
  const std::uint64_t used = *a.options.device_used;
  const std::uint64_t reserved = a.totals.overall.reserved;
  if (used <= reserved) return;
  const std::uint64_t gap = used - reserved;
  if (gap < 512 * kMiB || gap * 20 < used) return;
  Pattern p;
  p.id = "non_pytorch_memory";
  p.verdict = "problem";
  p.confidence = gap > 2 * kGiB ? "high" : "medium";
  p.summary = fmt::format("{} of device memory is in use outside PyTorch's caching allocator", format_bytes(gap));
  p.evidence = {fmt::format("device memory used (given with --device-used): {}", format_bytes(used)),
                fmt::format("reserved by PyTorch's allocator (snapshot): {}", format_bytes(reserved)),
                "the CUDA context itself takes several hundred MiB per process"};
  p.fix = {"check NCCL buffers (NCCL_BUFFSIZE, number of communicators), cuBLAS/cuDNN workspaces (CUBLAS_WORKSPACE_CONFIG) and custom CUDA extensions",
           "compare torch.cuda.device_memory_used() with torch.cuda.memory_reserved() around the suspect code",
           "look for other processes on the same GPU (nvidia-smi)"};
  a.patterns.push_back(std::move(p));
}

void headline(const Snapshot& s, Analysis& a) {
  for (const auto& p : a.patterns) {
    if (p.id == "fragmentation" && p.verdict == "problem") {
      a.headline = "Out of memory from fragmentation: " + p.summary + ".";
      return;
    }
    if (p.id == "capacity") {
      const Pattern* opt = find_pattern(a, "optimizer_state_spike");
      a.headline = opt && opt->summary.rfind("The OOM happened inside optimizer.step()", 0) == 0
                       ? "Out of memory at capacity inside optimizer.step(): " + p.summary + "; the optimizer state is expected, not a leak."
                       : "Out of memory at capacity: " + p.summary + ".";
      return;
    }
  }
  (void)s;
  for (const char* id : {"retained_autograd_graph", "growing_container"}) {
    if (const Pattern* p = find_pattern(a, id)) {
      a.headline = "Leak: " + p->summary + ".";
      return;
    }
  }
  for (const char* id : {"reference_cycles", "activation_pressure", "replicated_gradients"}) {
    if (const Pattern* p = find_pattern(a, id)) {
      a.headline = p->summary + ".";
      return;
    }
  }
  const Totals& t = a.totals.overall;
  if (a.sites.empty() || t.allocated == 0) {
    a.headline = fmt::format("No live tensor memory in this snapshot: {} reserved, {} inactive (cached).", format_bytes(t.reserved), format_bytes(t.inactive));
    return;
  }
  // The largest attributed site leads; memory without a stack is named after it.
  const auto attributed = std::find_if(a.sites.begin(), a.sites.end(), [](const Site& site) { return !site.no_stack; });
  const auto unattributed = std::find_if(a.sites.begin(), a.sites.end(), [](const Site& site) { return site.no_stack; });
  const std::string no_stack_note =
      unattributed != a.sites.end() && unattributed->percent >= 10
          ? fmt::format(" ({:.0f}% of live memory has no recorded stack)", unattributed->percent)
          : "";
  if (attributed == a.sites.end()) {
    a.headline = fmt::format("All {} of live memory ({} blocks) has no recorded stack, so it cannot be attributed.", format_bytes(t.allocated),
                             unattributed->blocks);
    return;
  }
  const Site& top = *attributed;
  a.headline = fmt::format("{:.0f}% of live memory ({} of {}) is {} allocated at {} ({}){}{}.", top.percent, format_bytes(top.bytes),
                           format_bytes(t.allocated), category_name(top.category), top.site, top.function,
                           top.category == Category::OptimizerState && find_pattern(a, "optimizer_state_spike")
                               ? ": optimizer state from the first optimizer.step(), expected retention, not a leak"
                               : "",
                           no_stack_note);
}

void next_steps(Analysis& a) {
  for (const auto& p : a.patterns) {
    for (const auto& f : p.fix) a.next_steps.push_back(fmt::format("[{}] {}", p.id, f));
  }
  std::size_t named = 0;
  for (const Site& site : a.sites) {
    if (site.no_stack || named == 3) continue;
    a.next_steps.push_back(fmt::format("look at {} ({}): it holds {} live in {} blocks ({})", site.site, site.function,
                                       format_bytes(site.bytes), site.blocks, category_name(site.category)));
    ++named;
  }
  if (a.trace.analyzed == 0) {
    a.next_steps.push_back("capture again with torch.cuda.memory._record_memory_history(max_entries=100000) enabled before the run, so frees, peaks and OOMs can be analyzed (`memsnap capture`)");
  } else if (const Pattern* leak = find_pattern(a, "retained_autograd_graph") ? find_pattern(a, "retained_autograd_graph")
                                                                                 : find_pattern(a, "growing_container")) {
    a.next_steps.push_back(fmt::format("to confirm the {} with a diff: dump a snapshot at a fixed point of a step (e.g. right after "
                                       "optimizer.step()) now and again at the same point 20 or more steps later, then run memsnap "
                                       "EARLY --diff LATER; {} should grow in both bytes and blocks (`memsnap capture --diff`)",
                                       leak->id == "growing_container" ? "leak" : "retained graph",
                                       leak->id == "growing_container" && !leak->sites.empty() ? leak->sites.front()
                                                                                                : std::string("the activation sites above")));
  } else if (a.ooms.empty()) {
    a.next_steps.push_back("if memory grows over steps, dump a second snapshot many steps later at the same point of the step (right after optimizer.step()) and run memsnap EARLY --diff LATER (`memsnap capture --diff`)");
  }
}

void uncertainties(const Snapshot& s, Analysis& a) {
  if (!s.has_device_traces_key || a.trace.events == 0) {
    a.uncertainties.push_back("the snapshot has no trace history: when memory was freed, the peak and the moment of an OOM cannot be known; only the final state is analyzed");
  }
  if (a.trace.dropped) {
    a.uncertainties.push_back(fmt::format("{} older trace events were dropped by --max-trace-events; the window covers the newest {}",
                                          a.trace.dropped, a.trace.analyzed));
  }
  std::uint64_t before = 0, freed_before = 0;
  for (const auto& tl : a.timelines) {
    before += tl.live_from_before_window;
    freed_before += tl.frees_before_window;
  }
  if (before || freed_before) {
    a.uncertainties.push_back(fmt::format("the trace starts mid-run (or history was enabled late): {} live blocks and {} frees refer to allocations made before the window; the peak counts them from the final state",
                                          before, freed_before));
  }
  for (const Site& site : a.sites) {
    if (site.no_stack && site.bytes) {
      a.uncertainties.push_back(fmt::format("{} of live memory ({:.0f}%) in {} blocks has no stack: allocated before history was recorded, recorded without context, or from the backward pass without C++ frames",
                                            format_bytes(site.bytes), site.percent, site.blocks));
    }
  }
  if (std::any_of(s.blocks.begin(), s.blocks.end(), [](const Block& b) { return b.from_history; })) {
    a.uncertainties.push_back("an old (PyTorch <= 2.0) snapshot: block stacks and requested sizes come from the legacy 'history' field");
  }
  for (const auto& tl : a.timelines) {
    if (peak_certainty(tl) != PeakCertainty::TooShort) continue;
    a.uncertainties.push_back(fmt::format(
        "device {}'s trace holds {} event{} and no allocation, too few to show a peak or when memory was allocated; "
        "history recorded with a ring of {} entr{} (legacy torch.cuda.memory._record_memory_history(True) keeps one) "
        "would look like this: record again with max_entries=100000",
        tl.device, tl.events, tl.events == 1 ? "" : "s", tl.events, tl.events == 1 ? "y" : "ies"));
  }
  if (!a.timelines.empty()) {
    a.uncertainties.push_back("the peak is in requested bytes (what the trace records), reconstructed backwards from the final state as memory_viz does; rounded block sizes can be larger");
  }
  if (!s.unknown_actions.empty() || !s.unknown_keys.empty()) {
    a.uncertainties.push_back(fmt::format("the snapshot holds {} unknown trace actions and {} unknown keys (newer PyTorch?); they were ignored",
                                          s.unknown_actions.size(), s.unknown_keys.size()));
  }
  for (const auto& v : a.invariant_violations) a.uncertainties.push_back("inconsistent snapshot: " + v);
}

// A site the growing_container pattern names holds a user container's tensors.
void label_container_sites(Analysis& a) {
  for (const Pattern& p : a.patterns) {
    if (p.id != "growing_container") continue;
    for (Site& site : a.sites) {
      if (std::find(p.sites.begin(), p.sites.end(), site.site) != p.sites.end()) site.category = Category::UserContainer;
    }
  }
}

}  // namespace

void derive_findings(const LoadedSnapshot& loaded, Analysis& a) {
  const Snapshot& s = loaded.snapshot;
  oom_patterns(s, a);
  inactive_memory(a);
  pending_frees(a);
  non_pytorch_memory(a);
  add_diagnosis_patterns(s, a);
  label_container_sites(a);
  headline(s, a);
  next_steps(a);
  uncertainties(s, a);
}

}  // namespace memsnap
