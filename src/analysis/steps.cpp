// Step boundaries from annotations or the trace, allocation lifetimes, and per-site series.
#include "analysis/steps.h"

#include <algorithm>
#include <cctype>
#include <fmt/format.h>
#include <map>

namespace memsnap {
namespace {

// Step sequences longer than this are thinned evenly (first and last kept), so the per-site
// series stay small on runs with thousands of steps.
constexpr std::size_t kMaxBoundaries = 256;

bool path_has(std::string_view file, std::string_view part) {
  if (file.find(part) != std::string_view::npos) return true;
  std::string alt(part);
  std::replace(alt.begin(), alt.end(), '/', '\\');
  return file.find(alt) != std::string_view::npos;
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// 1 = strongest evidence of a step; 0 = not a step marker.
int annotation_priority(std::string_view name) {
  if (starts_with(name, "ProfilerStep#")) return 1;
  if (starts_with(name, "Optimizer.step#")) return 2;
  if (starts_with(name, "Optimizer.zero_grad#")) return 3;
  if (starts_with(name, "enumerate(DataLoader)#")) return 4;
  const std::string l = lower(name);
  for (std::string_view noise : {"dynamo", "compile", "benchmark", "autotune", "zero_grad"}) {
    if (l.find(noise) != std::string::npos) return 0;
  }
  for (std::string_view word : {"step", "iter", "batch"}) {
    if (l.find(word) != std::string::npos) return 5;
  }
  return 0;
}

StepSource source_of_priority(int p) {
  switch (p) {
    case 1: return StepSource::ProfilerStep;
    case 2: return StepSource::OptimizerStep;
    case 3: return StepSource::ZeroGrad;
    case 4: return StepSource::DataLoader;
    default: return StepSource::UserRegion;
  }
}

std::vector<std::size_t> unique_sorted(std::vector<std::size_t> v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

bool from_annotations(const DeviceTimeline& t, Steps& out) {
  // group name -> (START marks, other marks)
  std::map<std::string, std::pair<std::vector<std::size_t>, std::vector<std::size_t>>> groups;
  for (const StepMark& m : t.steps) {
    if (annotation_priority(m.name) == 0) continue;
    const std::string key = starts_with(m.name, "ProfilerStep#") ? std::string("ProfilerStep#N") : m.name;
    auto& g = groups[key];
    (m.stage == "START" ? g.first : g.second).push_back(m.event_index);
  }
  for (int p = 1; p <= 5; ++p) {
    std::string best_name;
    std::vector<std::size_t> best;
    for (auto& [name, g] : groups) {
      if (annotation_priority(name == "ProfilerStep#N" ? "ProfilerStep#" : name) != p) continue;
      auto marks = unique_sorted(g.first.empty() ? g.second : g.first);
      if (marks.size() > best.size()) {
        best = std::move(marks);
        best_name = name;
      }
    }
    if (best.size() >= kMinBoundaries) {
      out.source = source_of_priority(p);
      out.marker = best_name + " START";
      out.boundaries = std::move(best);
      return true;
    }
  }
  return false;
}

// Steps from the runs of torch/optim allocations.
bool from_optimizer_allocations(const Snapshot& s, const DeviceTimeline& t, Steps& out) {
  OptimizerStacks is_optimizer(s);
  const std::vector<OptimizerRun> runs = optimizer_runs(t, is_optimizer);
  if (runs.size() < kMinBoundaries) return false;
  out.source = StepSource::OptimizerTrace;
  out.marker = "torch/optim allocations";
  out.boundaries.clear();
  for (const OptimizerRun& r : runs) out.boundaries.push_back(r.first);
  return true;
}

// True when every allocation between two event indices runs inside one module call: a frame
// common to all their stacks is a forward (or nn.Module call plumbing). When most periods are
// like that, the repeating unit is a layer of a forward pass, not a training step.
bool inside_one_module_call(const Snapshot& s, const TraceEvents& events, std::size_t begin, std::size_t end) {
  std::unordered_map<FrameId, bool> common;  // frame -> still common
  bool first = true;
  std::unordered_map<StackId, bool> seen;
  for (std::size_t k = begin; k < end && k < events.size(); ++k) {
    const TraceEvent& e = events[k];
    if (e.action != Action::Alloc || e.stack == kNoStack || !seen.emplace(e.stack, true).second) continue;
    const FrameId* frames = s.stack_begin(e.stack);
    const std::size_t n = s.stack_size(e.stack);
    if (first) {
      for (std::size_t i = 0; i < n; ++i) common[frames[i]] = true;
      first = false;
    } else {
      std::unordered_map<FrameId, bool> next;
      for (std::size_t i = 0; i < n; ++i) {
        if (common.count(frames[i])) next[frames[i]] = true;
      }
      common.swap(next);
    }
    bool module_call = false;
    for (const auto& [frame, keep] : common) {
      const std::string_view name = s.str(s.frames[frame].name);
      module_call |= name == "forward" || name == "_call_impl" || name == "_wrapped_call_impl";
    }
    if (!module_call) return false;
  }
  return !first;
}

// The period of the allocation-stack sequence. A stack allocated at regular gaps (80% of its gaps
// within 10% of the median) votes for that period; the period with the most votes wins if the
// steps it implies cover most of the window and free memory (loading loops never free).
bool from_period(const Snapshot& s, const TraceEvents& events, Steps& out) {
  std::vector<std::size_t> alloc_events;
  std::unordered_map<StackId, std::vector<std::uint32_t>> positions;
  for (std::size_t k = 0; k < events.size(); ++k) {
    if (events[k].action != Action::Alloc) continue;
    positions[events[k].stack].push_back(static_cast<std::uint32_t>(alloc_events.size()));
    alloc_events.push_back(k);
  }
  const std::size_t n = alloc_events.size();
  if (n < 9) return false;
  struct Candidate {
    std::size_t period;
    StackId stack;
    std::uint32_t first;
  };
  std::vector<Candidate> candidates;
  for (const auto& [stack, pos] : positions) {
    if (pos.size() < kMinBoundaries || pos.size() * 2 > n || stack == kNoStack) continue;
    std::vector<std::uint32_t> gaps;
    for (std::size_t i = 1; i < pos.size(); ++i) gaps.push_back(pos[i] - pos[i - 1]);
    std::vector<std::uint32_t> sorted = gaps;
    std::nth_element(sorted.begin(), sorted.begin() + sorted.size() / 2, sorted.end());
    const std::size_t median = sorted[sorted.size() / 2];
    if (median < 2) continue;
    const std::size_t tol = std::max<std::size_t>(1, median / 10);
    std::size_t regular = 0;
    for (auto g : gaps) regular += (g + tol >= median && g <= median + tol);
    if (regular * 5 < gaps.size() * 4) continue;
    candidates.push_back({median, stack, pos.front()});
  }
  if (candidates.empty()) return false;
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) { return a.period < b.period; });
  // Group periods within 2% of each other; the largest group wins (ties: the longer period).
  std::size_t best_begin = 0, best_end = 0;
  for (std::size_t i = 0; i < candidates.size();) {
    std::size_t j = i;
    while (j < candidates.size() && candidates[j].period * 50 <= candidates[i].period * 51) ++j;
    if (j - i >= best_end - best_begin) {
      best_begin = i;
      best_end = j;
    }
    i = j;
  }
  if (best_end - best_begin < 2) return false;  // one stack alone is not a step
  const Candidate* marker = &candidates[best_begin];
  for (std::size_t i = best_begin; i < best_end; ++i) {
    if (candidates[i].first < marker->first || (candidates[i].first == marker->first && candidates[i].stack < marker->stack)) {
      marker = &candidates[i];
    }
  }
  const auto& pos = positions[marker->stack];
  if (static_cast<std::size_t>(pos.back() - pos.front()) * 10 < n * 6) return false;
  std::vector<std::size_t> bounds;
  for (auto p : pos) bounds.push_back(alloc_events[p]);
  std::size_t with_frees = 0;
  for (std::size_t i = 0; i + 1 < bounds.size(); ++i) {
    for (std::size_t k = bounds[i]; k < bounds[i + 1]; ++k) {
      if (events[k].action == Action::FreeCompleted) {
        ++with_frees;
        break;
      }
    }
  }
  if (with_frees * 2 < bounds.size() - 1) return false;
  std::size_t nested = 0;
  for (std::size_t i = 0; i + 1 < bounds.size(); ++i) nested += inside_one_module_call(s, events, bounds[i], bounds[i + 1]);
  if (nested * 2 >= bounds.size() - 1) return false;
  out.source = StepSource::Period;
  const SiteChoice c = choose_site(s, marker->stack);
  out.marker = c.found ? fmt::format("{}:{}", s.str(s.frames[c.frame].filename), s.frames[c.frame].line) : "";
  out.boundaries = std::move(bounds);
  return true;
}

void thin(std::vector<std::size_t>& b) {
  if (b.size() <= kMaxBoundaries) return;
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < kMaxBoundaries; ++i) out.push_back(b[i * (b.size() - 1) / (kMaxBoundaries - 1)]);
  b = unique_sorted(std::move(out));
}

}  // namespace

const char* step_source_name(StepSource source) {
  switch (source) {
    case StepSource::None: return "none";
    case StepSource::ProfilerStep: return "ProfilerStep annotations";
    case StepSource::OptimizerStep: return "Optimizer.step annotations";
    case StepSource::ZeroGrad: return "Optimizer.zero_grad annotations";
    case StepSource::DataLoader: return "DataLoader iteration annotations";
    case StepSource::UserRegion: return "record_function annotations";
    case StepSource::OptimizerTrace: return "recurring optimizer allocations in the trace";
    case StepSource::Period: return "the period of the allocation sequence";
  }
  return "none";
}

bool is_optimizer_stack(const Snapshot& s, StackId stack) {
  const FrameId* frames = s.stack_begin(stack);
  bool module_call = false;
  for (std::size_t i = 0; i < s.stack_size(stack); ++i) {
    const Frame& f = s.frames[frames[i]];
    const std::string_view file = s.str(f.filename), name = s.str(f.name);
    if (path_has(file, "torch/optim/")) return name != "zero_grad" && !module_call;
    // A closure passed to optimizer.step() (Lightning) runs forward and backward inside it.
    if (name == "forward" || name == "_call_impl" || name == "_wrapped_call_impl" ||
        (path_has(file, "torch/autograd/") && (name == "backward" || name == "_engine_run_backward"))) {
      module_call = true;
    }
  }
  return false;
}

bool OptimizerStacks::operator()(StackId stack) {
  if (stack >= known_.size()) return is_optimizer_stack(snapshot_, stack);
  if (known_[stack] == kUnknown) known_[stack] = is_optimizer_stack(snapshot_, stack) ? 1 : 0;
  return known_[stack] == 1;
}

std::vector<OptimizerRun> optimizer_runs(const DeviceTimeline& t, OptimizerStacks& is_optimizer) {
  std::vector<OptimizerRun> runs;
  std::size_t others = 0;
  bool in_run = false;
  for (const Lifetime& l : t.lifetimes) {  // the window's allocations come in event order
    if (l.alloc == kBeforeWindow) continue;
    if (is_optimizer(l.stack)) {
      if (!in_run) runs.push_back({l.alloc, l.alloc});
      runs.back().last = l.alloc;
      in_run = true;
      others = 0;
    } else if (in_run && ++others >= 3) {
      in_run = false;
    }
  }
  return runs;
}

std::size_t SiteIndex::of(StackId stack) {
  if (stack >= by_stack_.size()) by_stack_.resize(std::max<std::size_t>(snapshot_.stack_count(), stack + 1), 0);
  if (by_stack_[stack]) return by_stack_[stack] - 1;
  auto [pos, inserted] = by_frame_.emplace(cache_.key(stack), sites_.size());
  if (inserted) sites_.push_back(cache_.describe(stack));
  by_stack_[stack] = static_cast<std::uint32_t>(pos->second + 1);
  return pos->second;
}

std::size_t Steps::step_of(std::size_t event_index) const {
  return static_cast<std::size_t>(std::upper_bound(boundaries.begin(), boundaries.end(), event_index) - boundaries.begin());
}

Steps find_steps(const Snapshot& s, const DeviceTimeline& t) {
  Steps out;
  out.device = t.device;
  if (t.device < 0 || static_cast<std::size_t>(t.device) >= s.device_traces.size()) return out;
  const auto& events = s.events_of(t.device);
  if (!from_annotations(t, out) && !from_optimizer_allocations(s, t, out) && !from_period(s, events, out)) {
    out.source = StepSource::None;
    out.boundaries.clear();
  }
  thin(out.boundaries);
  return out;
}

StepTable step_table(const Snapshot& s, const DeviceTimeline& t, const Lifetimes& lifetimes, Steps steps,
                     SiteIndex& sites) {
  StepTable table;
  table.steps = std::move(steps);
  const auto& B = table.steps.boundaries;
  const std::size_t nb = B.size();
  if (nb == 0) return table;
  const auto& events = s.events_of(t.device);
  for (std::size_t j = 0; j < nb; ++j) {
    table.live.push_back(B[j] < t.curve.size() ? t.curve[B[j]] : t.end_live);
    std::int64_t time = 0;
    if (B[j] < events.size() && events[B[j]].has_time) time = events[B[j]].time_us;
    else if (B[j] > 0 && B[j] - 1 < events.size() && events[B[j] - 1].has_time) time = events[B[j] - 1].time_us;
    table.time_us.push_back(time);
  }
  constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();
  std::vector<std::size_t> series_of;  // site -> index in table.series (kNone: none yet)
  std::vector<std::vector<std::int64_t>> dbytes, dblocks;
  auto series = [&](std::size_t site) -> std::size_t {
    if (site >= series_of.size()) series_of.resize(std::max(site + 1, series_of.size() * 2), kNone);
    if (series_of[site] == kNone) {
      series_of[site] = table.series.size();
      SiteSeries ss;
      ss.site = site;
      ss.allocs.assign(nb - 1, 0);
      table.series.push_back(std::move(ss));
      dbytes.emplace_back(nb + 1, 0);
      dblocks.emplace_back(nb + 1, 0);
    }
    return series_of[site];
  };
  // The window's allocations come in event order: the boundary after each alloc only moves
  // forwards; most blocks are freed before the next boundary.
  std::size_t next_boundary = 0;
  auto boundaries_up_to = [&](std::size_t from, std::size_t index) {  // boundaries <= index, knowing `from` are
    if (from >= nb || B[from] > index) return from;
    return static_cast<std::size_t>(std::upper_bound(B.begin() + static_cast<std::ptrdiff_t>(from), B.end(), index) - B.begin());
  };
  for (const Lifetime& l : lifetimes) {
    std::size_t first = 0;
    if (l.alloc != kBeforeWindow) {
      while (next_boundary < nb && B[next_boundary] <= l.alloc) ++next_boundary;
      first = next_boundary;
    }
    const std::size_t end = l.free == kStillLive ? nb : boundaries_up_to(first, l.free);
    const bool inside = l.alloc != kBeforeWindow && first > 0 && first < nb;
    if (first >= end && !inside) continue;
    const std::size_t k = series(sites.of(l.stack));
    if (first < end) {
      dbytes[k][first] += static_cast<std::int64_t>(l.size);
      dbytes[k][end] -= static_cast<std::int64_t>(l.size);
      dblocks[k][first] += 1;
      dblocks[k][end] -= 1;
    }
    if (inside) {
      SiteSeries& ss = table.series[k];
      ++ss.allocs[first - 1];
      const auto size = static_cast<std::int64_t>(l.size);
      if (ss.min_block == 0 || size < ss.min_block) ss.min_block = size;
    }
  }
  for (std::size_t k = 0; k < table.series.size(); ++k) {
    SiteSeries& ss = table.series[k];
    ss.bytes.resize(nb);
    ss.blocks.resize(nb);
    std::int64_t b = 0, n = 0;
    for (std::size_t j = 0; j < nb; ++j) {
      b += dbytes[k][j];
      n += dblocks[k][j];
      ss.bytes[j] = b;
      ss.blocks[j] = n;
    }
  }
  return table;
}

}  // namespace memsnap
