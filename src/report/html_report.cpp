// The HTML report's data: downsampled timelines, per-site stacks and segment maps, all read from
// the analysis' replay (DeviceTimeline) and layouts, put into the template that
// cmake/embed_assets.cmake generates from src/report/html and the chart library.
#include "report/html_report.h"
#include "report/phase_bands.h"

#include <algorithm>
#include <fmt/format.h>
#include <iterator>
#include <limits>
#include <map>
#include <string_view>
#include <unordered_map>

#include "analysis/fragmentation.h"
#include "analysis/layout_replay.h"
#include "report/downsample.h"
#include "base/checked.h"
#include "base/parallel.h"
#include "report/json_report.h"

namespace memsnap {
namespace {

using ojson = nlohmann::ordered_json;

constexpr std::uint32_t kNone = std::numeric_limits<std::uint32_t>::max();
constexpr std::string_view kDataMarker = "<!--MEMSNAP:DATA-->";

// Block states of the segment maps, as codes (the page has the names).
enum StateCode : int { kAllocated = 0, kPendingFree = 1, kInactive = 2, kMerged = 3, kUnknownState = 4 };

int state_code(BlockState s) {
  switch (s) {
    case BlockState::ActiveAllocated: return kAllocated;
    case BlockState::ActivePendingFree: return kPendingFree;
    case BlockState::Inactive: return kInactive;
    case BlockState::Unknown: break;
  }
  return kUnknownState;
}

// Sites of stacks, keyed by the chosen frame (SiteCache::key, as the analysis' sites); numbered
// internally as they are met, and in the output only when something drawn refers to them.
class SiteTable {
 public:
  explicit SiteTable(const Snapshot& s) : s_(s), cache_(s) {}

  std::uint32_t of_stack(StackId stack) {
    if (stack < by_stack_.size() && by_stack_[stack] != kNone) return by_stack_[stack];
    const std::uint64_t key = cache_.key(stack);
    auto [pos, inserted] = by_key_.emplace(key, static_cast<std::uint32_t>(keys_.size()));
    if (inserted) {
      keys_.push_back(key);
      emitted_.push_back(-1);
    }
    if (stack >= by_stack_.size()) by_stack_.resize(std::max<std::size_t>(stack + 1, s_.stack_count()), kNone);
    by_stack_[stack] = pos->second;
    return pos->second;
  }

  std::size_t size() const { return keys_.size(); }

  // The output index of an internal id (added to the output table on first use).
  std::int64_t emit(std::uint32_t id) {
    if (id == kNone || id >= keys_.size()) return -1;
    if (emitted_[id] >= 0) return emitted_[id];
    emitted_[id] = static_cast<std::int64_t>(out_.size());
    const std::uint64_t frame = SiteCache::frame_of_key(keys_[id]);  // keys also tell compiled regions apart
    if (frame == 0) {
      out_.push_back({{"site", "[no stack recorded]"}, {"function", ""}});
    } else {
      const Frame& f = s_.frames[frame - 1];
      out_.push_back({{"site", fmt::format("{}:{}", s_.str(f.filename), f.line)}, {"function", s_.str(f.name)}});
    }
    return emitted_[id];
  }

  ojson take() { return std::move(out_); }

 private:
  const Snapshot& s_;
  SiteCache cache_;  // the chosen frame of each stack, as the analysis' sites
  std::vector<std::uint32_t> by_stack_;  // by stack id: its internal id (kNone: not met yet)
  std::unordered_map<std::uint64_t, std::uint32_t> by_key_;
  std::vector<std::uint64_t> keys_;
  std::vector<std::int64_t> emitted_;
  ojson out_ = ojson::array();
};

// Time axis: every kept event has a time and times never go backwards on any device (the replay's
// DeviceTimeline::times_ascending); t0 is the earliest first time.
bool has_time_axis(const Snapshot& s, const std::vector<DeviceTimeline>& timelines, std::int64_t& t0) {
  t0 = std::numeric_limits<std::int64_t>::max();
  for (const DeviceTimeline& t : timelines) {
    if (!t.times_ascending) return false;
    if (const auto& events = s.events_of(t.device); !events.empty()) t0 = std::min(t0, events.front().time_us);
  }
  return !timelines.empty();
}

// Time of the state after the first k events (the first event's time for k = 0).
std::int64_t time_at(const TraceEvents& events, std::size_t k) {
  if (events.empty()) return 0;
  const std::size_t i = std::min(k, events.size());
  return events[i == 0 ? 0 : i - 1].time_us;
}

// Microseconds from t0 to the state after k events, wrapping on absurd times (hostile input)
// instead of overflowing.
std::int64_t since(const TraceEvents& events, std::size_t k, std::int64_t t0) {
  return subtract_live_delta(time_at(events, k), static_cast<std::uint64_t>(t0));
}

// x values (event index, and microseconds since t0 on a time axis) of kept indices.
void put_x(ojson& j, const std::vector<std::size_t>& idx, const TraceEvents& events, bool timed,
           std::int64_t t0) {
  j["index"] = idx;
  if (!timed) return;
  std::vector<std::int64_t> t;
  t.reserve(idx.size());
  for (std::size_t k : idx) t.push_back(since(events, k, t0));
  j["t_us"] = t;
}

ojson marker(std::size_t k, const TraceEvents& events, bool timed, std::int64_t t0) {
  ojson m;
  m["index"] = k;
  if (timed) m["t_us"] = since(events, k, t0);
  return m;
}

// Step marks (external_annotations). Beyond `max`, every k-th annotation name is kept with all its
// stages, so a step's START and END stay together.
ojson step_markers(const DeviceTimeline& t, const TraceEvents& events, bool timed, std::int64_t t0,
                   std::size_t max) {
  std::unordered_map<std::string_view, std::size_t> ordinal;  // name -> order of first appearance
  for (const StepMark& m : t.steps) ordinal.emplace(m.name, ordinal.size());
  const std::size_t every = t.steps.size() <= max ? 1 : (t.steps.size() + max - 1) / max;
  auto out = ojson::array();
  for (const StepMark& m : t.steps) {
    if (ordinal[m.name] % every != 0 || out.size() >= max) continue;
    ojson j = marker(m.event_index, events, timed, t0);
    j["name"] = m.name;
    j["stage"] = m.stage;
    j["live_bytes"] = m.live_bytes;
    out.push_back(std::move(j));
  }
  return out;
}

// Live requested bytes per site along the replay: each lifetime (analysis/timeline.h) counts for
// the site of its allocating_stack() in the states alloc+1 .. free, as DeviceTimeline::live_at_peak.
class SiteWalk {
 public:
  SiteWalk(const DeviceTimeline& t, SiteTable& sites) : lifetimes_(t.lifetimes), ending_(t.events, kNone) {
    site_.reserve(lifetimes_.size());
    for (std::size_t i = 0; i < lifetimes_.size(); ++i) {
      const Lifetime& l = lifetimes_[i];
      site_.push_back(sites.of_stack(allocating_stack(l)));
      if (l.free != kStillLive && l.free < ending_.size()) ending_[l.free] = static_cast<std::uint32_t>(i);
    }
    start_.assign(sites.size(), 0);
    for (std::size_t i = 0; i < lifetimes_.size(); ++i) {
      if (lifetimes_[i].alloc == kBeforeWindow) start_[site_[i]] = add_live_delta(start_[site_[i]], lifetimes_[i].size);
    }
    most_ = start_;
    cur_ = start_;
    touched_.assign(start_.size(), false);
  }

  // Into the state after event k (k = 0, 1, ... in order): the lifetime it ends, then the one it starts.
  void step(std::size_t k) {
    if (const std::uint32_t i = ending_[k]; i != kNone) change(site_[i], 0 - lifetimes_[i].size);
    while (next_ < lifetimes_.size() && lifetimes_[next_].alloc == kBeforeWindow) ++next_;
    if (next_ < lifetimes_.size() && lifetimes_[next_].alloc == k) {
      change(site_[next_], lifetimes_[next_].size);
      ++next_;
    }
  }

  std::size_t sites() const { return start_.size(); }
  std::int64_t start(std::uint32_t id) const { return start_[id]; }
  std::int64_t now(std::uint32_t id) const { return cur_[id]; }
  std::int64_t most(std::uint32_t id) const { return most_[id]; }  // over every state walked so far

  // The sites changed since the last call (each once), with their bytes now, appended to `out`.
  void take_changed(std::vector<std::pair<std::uint32_t, std::int64_t>>& out) {
    for (const std::uint32_t id : changed_) {
      out.emplace_back(id, cur_[id]);
      touched_[id] = false;
    }
    changed_.clear();
  }

 private:
  void change(std::uint32_t id, std::uint64_t delta) {
    cur_[id] = add_live_delta(cur_[id], delta);
    most_[id] = std::max(most_[id], cur_[id]);
    if (!touched_[id]) {
      touched_[id] = true;
      changed_.push_back(id);
    }
  }

  const Lifetimes& lifetimes_;
  std::vector<std::uint32_t> site_;    // per lifetime
  std::vector<std::uint32_t> ending_;  // per event: the lifetime it ends, or kNone
  std::vector<std::int64_t> start_, cur_, most_;  // per site
  std::vector<bool> touched_;              // per site: in changed_
  std::vector<std::uint32_t> changed_;     // sites changed since take_changed
  std::size_t next_ = 0;  // lifetimes_[next_ ..] hold the allocations not yet walked
};

// Each site's bytes at the sampled points of one walk, kept sparsely: at each point, the sites
// changed since the point before, with their bytes then.
struct SampledSites {
  std::vector<std::size_t> end;  // per point: the end of its changes in `changes`
  std::vector<std::pair<std::uint32_t, std::int64_t>> changes;
};

// One walk over the events: each site's largest live total (for the choice of sites drawn) and
// its bytes at the points idx (states: after events [0, idx[p])).
SampledSites walk_sampled(SiteWalk& walk, std::size_t events, const std::vector<std::size_t>& idx) {
  SampledSites sampled;
  sampled.end.reserve(idx.size());
  std::size_t next = 0;
  for (std::size_t k = 0; k <= events; ++k) {
    if (next < idx.size() && idx[next] == k) {
      walk.take_changed(sampled.changes);
      sampled.end.push_back(sampled.changes.size());
      ++next;
    }
    if (k < events) walk.step(k);
  }
  return sampled;
}

// The sites drawn: the top ones by their largest live total, plus the one that grew most.
std::vector<std::uint32_t> top_sites(const SiteWalk& walk, const std::vector<std::int64_t>& growth, std::size_t count,
                                     std::uint32_t& grower) {
  std::vector<std::uint32_t> order;
  for (std::uint32_t i = 0; i < walk.sites(); ++i) {
    if (walk.most(i) > 0) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) { return walk.most(a) > walk.most(b); });
  std::vector<std::uint32_t> top(order.begin(), order.begin() + std::min(order.size(), count));
  grower = kNone;
  for (std::uint32_t i : order) {
    if (growth[i] > 0 && (grower == kNone || growth[i] > growth[grower])) grower = i;
  }
  if (grower != kNone && std::find(top.begin(), top.end(), grower) == top.end()) {
    if (top.size() >= count && !top.empty()) top.back() = grower;
    else top.push_back(grower);
  }
  return top;
}

// A LiveCurve's extremes over a bucket, for downsample_by_buckets (one curve: c is 0).
auto curve_extremes(const LiveCurve& curve) {
  return [&curve](std::size_t, std::size_t begin, std::size_t end) {
    const LiveCurve::Extremes e = curve.extremes(begin, end);
    return std::pair{e.lo, e.hi};
  };
}

// Live requested bytes per site over the window, for the top sites by their largest live total
// (plus the site that grew most), sampled at the downsampled points of the allocated curve.
ojson stacked_sites(const DeviceTimeline& t, const TraceEvents& events, SiteTable& sites, const HtmlOptions& o, bool timed,
                    std::int64_t t0) {
  const std::size_t n = events.size();
  const std::size_t keep[] = {t.peak_index};
  const auto idx = downsample_by_buckets(t.curve.size(), 1, curve_extremes(t.curve), o.stack_points, keep);
  SiteWalk walk(t, sites);
  const SampledSites sampled = walk_sampled(walk, n, idx);
  std::vector<std::int64_t> end(walk.sites()), growth(walk.sites());
  for (std::uint32_t i = 0; i < walk.sites(); ++i) {
    end[i] = walk.now(i);
    growth[i] = subtract_live_delta(end[i], static_cast<std::uint64_t>(walk.start(i)));
  }
  std::uint32_t grower = kNone;
  const std::vector<std::uint32_t> top = top_sites(walk, growth, o.stack_sites, grower);

  // The drawn sites' bytes at each point: their start, updated by each point's changes.
  std::vector<std::uint32_t> slot_of(walk.sites(), kNone);
  std::vector<std::int64_t> now(top.size());
  for (std::size_t j = 0; j < top.size(); ++j) {
    slot_of[top[j]] = static_cast<std::uint32_t>(j);
    now[j] = walk.start(top[j]);
  }
  LiveCurve::Reader allocated(t.curve);
  std::vector<std::vector<std::int64_t>> series(top.size());
  std::vector<std::int64_t> other;
  for (auto& v : series) v.reserve(sampled.end.size());
  other.reserve(sampled.end.size());
  std::size_t c = 0;
  for (std::size_t p = 0; p < sampled.end.size(); ++p) {
    for (; c < sampled.end[p]; ++c) {
      const auto [id, bytes] = sampled.changes[c];
      if (slot_of[id] != kNone) now[slot_of[id]] = bytes;
    }
    std::int64_t sum = 0;
    for (std::size_t j = 0; j < top.size(); ++j) {
      series[j].push_back(now[j]);
      sum = add_live_delta(sum, static_cast<std::uint64_t>(now[j]));
    }
    other.push_back(subtract_live_delta(allocated.at(idx[p]), static_cast<std::uint64_t>(sum)));
  }
  ojson j;
  put_x(j, idx, events, timed, t0);
  auto arr = ojson::array();
  for (std::size_t i = 0; i < top.size(); ++i) {
    const std::uint32_t id = top[i];
    arr.push_back({{"site", sites.emit(id)}, {"max", walk.most(id)}, {"start", walk.start(id)}, {"end", end[id]},
                   {"growth", growth[id]}, {"values", std::move(series[i])}});
  }
  j["sites"] = std::move(arr);
  j["other"] = std::move(other);
  j["growing_site"] = grower == kNone ? ojson(nullptr) : ojson(sites.emit(grower));
  return j;
}

ojson device_plot(const Snapshot& s, const Analysis& a, const DeviceTimeline& t, SiteTable& sites,
                  const HtmlOptions& o, bool timed, std::int64_t t0) {
  const auto& events = s.events_of(t.device);
  const std::size_t reserved_peak = t.reserved_peak_index;
  std::vector<std::size_t> keep{t.peak_index, reserved_peak};
  auto ooms = ojson::array();
  for (std::size_t i = 0; i < a.ooms.size(); ++i) {
    const OomEvent& e = a.ooms[i].event;
    if (e.device != t.device || e.index > events.size()) continue;
    keep.push_back(e.index);
    ojson m = marker(e.index, events, timed, t0);
    m["oom"] = i;  // position in the report's trace.oom
    m["size"] = e.size;
    m["allocated"] = t.curve[e.index];
    m["reserved"] = reserved_at(t, e.index);
    m["verdict"] = a.ooms[i].studied ? oom_verdict_name(a.ooms[i].verdict) : "not studied";
    ooms.push_back(std::move(m));
  }
  // The per-site walk (two passes over the events) runs on a second core beside the curves,
  // which are read point by point in one pass each (no array of 8 bytes an event). Only the
  // walk writes to `sites`.
  ojson stack;
  LiveCurve::Reader allocated(t.curve);
  ReservedCurveReader reserved(t);
  std::vector<std::size_t> idx;
  parallel_for(2, [&](std::size_t task) {
    if (task == 0) {
      stack = stacked_sites(t, events, sites, o, timed, t0);
      return;
    }
    // The allocated curve's extremes from its blocks; the reserved curve's from a walk.
    auto extremes = [&, allocated_extremes = curve_extremes(t.curve)](std::size_t c, std::size_t begin, std::size_t end) {
      if (c == 0) return allocated_extremes(c, begin, end);
      return walk_extremes([&](std::size_t i) { return reserved.at(i); }, begin, end);
    };
    idx = downsample_by_buckets(t.curve.size(), 2, extremes, o.timeline_points, keep);
  });

  ojson j;
  j["device"] = t.device;
  j["events"] = events.size();
  ojson line;
  put_x(line, idx, events, timed, t0);
  line["allocated"] = values_at(idx, [&](std::size_t i) { return allocated.at(i); });
  line["reserved"] = values_at(idx, [&](std::size_t i) { return reserved.at(i); });
  j["timeline"] = std::move(line);
  ojson peak = marker(t.peak_index, events, timed, t0);
  peak["allocated"] = t.peak_allocated ? ojson(*t.peak_allocated) : ojson(nullptr);
  j["peak"] = std::move(peak);
  ojson rpeak = marker(reserved_peak, events, timed, t0);
  rpeak["reserved"] = reserved_at(t, reserved_peak);
  j["reserved_peak"] = std::move(rpeak);
  j["steps"] = step_markers(t, events, timed, t0, o.max_steps);
  j["steps_total"] = t.steps.size();
  for (const DevicePhases& d : a.phases) {
    if (d.device == t.device) j["phases"] = phase_bands_json(d, [&](std::size_t k) { return marker(k, events, timed, t0); });
  }
  j["ooms"] = std::move(ooms);
  j["stack"] = std::move(stack);
  return j;
}

// ---- Segment maps ----------------------------------------------------------------------------

struct MapBlock {
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
  int state = kAllocated;
  std::uint32_t site = kNone;
};

struct MapRow {
  std::int64_t device = 0;
  std::uint64_t address = 0;
  std::uint64_t size = 0;
  bool is_large = true;
  std::int64_t stream = 0;
  std::vector<MapBlock> blocks;
};


// The final layout straight from the snapshot's segments and blocks.
std::vector<MapRow> final_rows(const Snapshot& s, SiteTable& sites) {
  std::vector<MapRow> rows;
  rows.reserve(s.segments.size());
  for (const Segment& seg : s.segments) {
    MapRow r{seg.device, seg.address, seg.total_size, seg.is_large, seg.stream, {}};
    std::uint64_t offset = 0;
    for (std::uint32_t i = 0; i < seg.block_count && seg.first_block + i < s.blocks.size(); ++i) {
      const Block& b = s.blocks[seg.first_block + i];
      const int state = state_code(b.state);
      const std::uint64_t at = b.address >= seg.address && b.address - seg.address < seg.total_size ? b.address - seg.address : offset;
      const bool live = state == kAllocated || state == kPendingFree;
      r.blocks.push_back({at, b.size, state, live ? sites.of_stack(b.stack) : kNone});
      offset = saturating_add(at, b.size);
    }
    rows.push_back(std::move(r));
  }
  return rows;
}

// One device's layout before a trace event (analysis/layout_replay.h) as map rows, keeping the
// sites of the live blocks.
std::vector<MapRow> replayed_rows(const DeviceLayout& replay, std::int64_t device, SiteTable& sites) {
  std::vector<MapRow> out;
  replay.for_each_piece([&](std::uint64_t start, const DeviceLayout::Range& r, std::uint64_t from, std::uint64_t to,
                            const DeviceLayout::Live* live) {
    if (out.empty() || out.back().address != start) out.push_back({device, start, r.end - start, r.is_large, r.stream, {}});
    out.back().blocks.push_back({from - start, to - from, live ? kAllocated : kInactive, live ? sites.of_stack(live->stack) : kNone});
  });
  return out;
}

// Fits a map into `max_blocks` drawn blocks: first neighbouring blocks of one state are merged;
// if that is not enough, runs of blocks too small to see at their segment's scale become one
// "merged" block, segment by segment, keeping as much detail as the budget allows. Blocks (and
// holes) at least 1/q of their segment stay as they are.
void fit_blocks(std::vector<MapRow>& rows, std::size_t max_blocks) {
  auto count = [&] {
    std::size_t n = 0;
    for (const MapRow& r : rows) n += r.blocks.size();
    return n;
  };
  if (count() <= max_blocks) return;
  for (MapRow& r : rows) {
    std::vector<MapBlock> merged;
    for (const MapBlock& b : r.blocks) {
      if (!merged.empty() && merged.back().state == b.state && merged.back().offset + merged.back().size == b.offset) {
        merged.back().size += b.size;
        if (merged.back().site != b.site) merged.back().site = kNone;
      } else {
        merged.push_back(b);
      }
    }
    r.blocks = std::move(merged);
  }
  if (count() <= max_blocks) return;
  // A segment keeps at most 2q + 2 blocks: the largest q the budget allows.
  auto cost = [&](std::size_t q) {
    std::size_t n = 0;
    for (const MapRow& r : rows) n += std::min(r.blocks.size(), 2 * q + 2);
    return n;
  };
  std::size_t lo = 1, hi = 1;
  for (const MapRow& r : rows) hi = std::max(hi, r.blocks.size());
  while (lo < hi) {
    const std::size_t mid = (lo + hi + 1) / 2;
    if (cost(mid) <= max_blocks) lo = mid;
    else hi = mid - 1;
  }
  const std::size_t q = lo;
  for (MapRow& r : rows) {
    if (r.blocks.size() <= 2 * q + 2) continue;
    const std::uint64_t threshold = std::max<std::uint64_t>(1, r.size / q);
    std::vector<MapBlock> out;
    MapBlock run;
    std::size_t in_run = 0;
    auto close = [&] {
      if (in_run) out.push_back(run);
      in_run = 0;
    };
    for (const MapBlock& b : r.blocks) {
      if (b.size >= threshold) {
        close();
        out.push_back(b);
        continue;
      }
      if (!in_run) {
        run = b;
      } else {
        if (b.offset + b.size > run.offset + run.size) run.size = b.offset + b.size - run.offset;
        if (run.state != b.state) run.state = kMerged;
        if (run.site != b.site) run.site = kNone;
      }
      ++in_run;
      if (run.size >= threshold) close();
    }
    close();
    r.blocks = std::move(out);
  }
}

std::uint64_t free_bytes(const MapRow& r) {
  std::uint64_t free = 0;
  for (const MapBlock& b : r.blocks) free += b.state == kInactive ? b.size : 0;
  return free;
}

// The large free segments first: the default view's device (when the map has several), then the
// most free (inactive) bytes, then the largest segment, then by address.
void order_segment_rows(std::vector<MapRow>& rows, std::int64_t view_device) {
  std::vector<std::pair<std::uint64_t, std::size_t>> keyed;
  keyed.reserve(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) keyed.emplace_back(free_bytes(rows[i]), i);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    const MapRow& a = rows[x.second];
    const MapRow& b = rows[y.second];
    const bool a_other = a.device != view_device, b_other = b.device != view_device;
    return std::tie(a_other, y.first, b.size, a.device, a.address) < std::tie(b_other, x.first, a.size, b.device, b.address);
  });
  std::vector<MapRow> out;
  out.reserve(rows.size());
  for (const auto& [free, i] : keyed) out.push_back(std::move(rows[i]));
  rows = std::move(out);
}

ojson segment_map(std::vector<MapRow> rows, SiteTable& sites, const HtmlOptions& o, std::int64_t view_device) {
  ojson j;
  std::uint64_t reserved = 0, live = 0, inactive = 0, largest_inactive = 0;
  for (const MapRow& r : rows) {
    reserved += r.size;
    for (const MapBlock& b : r.blocks) {
      if (b.state == kAllocated || b.state == kPendingFree) live += b.size;
      if (b.state == kInactive) {
        inactive += b.size;
        largest_inactive = std::max(largest_inactive, b.size);
      }
    }
  }
  j["reserved"] = reserved;
  j["live"] = live;
  j["inactive"] = inactive;
  j["largest_inactive_block"] = largest_inactive;
  j["segments_total"] = rows.size();
  std::uint64_t hidden = 0;
  if (rows.size() > o.max_segments) {
    std::stable_sort(rows.begin(), rows.end(), [](const MapRow& a, const MapRow& b) { return a.size > b.size; });
    for (std::size_t i = o.max_segments; i < rows.size(); ++i) hidden += rows[i].size;
    rows.resize(o.max_segments);
  }
  order_segment_rows(rows, view_device);
  fit_blocks(rows, o.max_blocks);
  j["segments_shown"] = rows.size();
  j["bytes_hidden"] = hidden;
  auto segs = ojson::array();
  for (const MapRow& r : rows) {
    std::vector<std::int64_t> flat;
    flat.reserve(r.blocks.size() * 4);
    for (const MapBlock& b : r.blocks) {
      flat.push_back(static_cast<std::int64_t>(b.offset));
      flat.push_back(static_cast<std::int64_t>(b.size));
      flat.push_back(b.state);
      flat.push_back(sites.emit(b.site));
    }
    segs.push_back({{"device", r.device}, {"address", fmt::format("0x{:x}", r.address)}, {"size", r.size},
                    {"pool", r.is_large ? "large" : "small"}, {"stream", r.stream}, {"blocks", std::move(flat)}});
  }
  j["segments"] = std::move(segs);
  return j;
}

// The layouts before the newest OOMs that have a trace (at most o.max_oom_maps), replayed per
// device from the trace: the costly part of the maps, which reads neither the sites nor the plots.
struct OomLayouts {
  std::vector<std::size_t> ooms;       // indices into a.ooms
  std::vector<DeviceLayout> layouts;  // one per entry of `ooms`
};

std::map<std::int64_t, OomLayouts> oom_layouts(const Snapshot& s, const Analysis& a, const HtmlOptions& o) {
  std::map<std::int64_t, std::vector<std::size_t>> chosen;  // by device
  for (std::size_t i = a.ooms.size(), n = 0; i-- > 0 && n < o.max_oom_maps;) {
    if (!s.events_of(a.ooms[i].event.device).empty()) chosen[a.ooms[i].event.device].push_back(i), ++n;
  }
  std::map<std::int64_t, OomLayouts> out;
  for (auto& [device, list] : chosen) {
    const auto timeline = std::find_if(a.timelines.begin(), a.timelines.end(), [&, d = device](const DeviceTimeline& t) { return t.device == d; });
    if (timeline == a.timelines.end()) continue;
    std::vector<std::size_t> indices;
    for (std::size_t i : list) indices.push_back(a.ooms[i].event.index);
    out[device] = {std::move(list), layouts_before(s, *timeline, indices)};
  }
  return out;
}

ojson segment_maps(const Snapshot& s, const Analysis& a, const std::map<std::int64_t, OomLayouts>& replayed, SiteTable& sites,
                   const HtmlOptions& o) {
  auto maps = ojson::array();
  ojson end = {{"kind", "final"}, {"label", "End of the snapshot"}, {"device", nullptr}, {"oom", nullptr}, {"replayed", false}};
  end.update(segment_map(final_rows(s, sites), sites, o, a.view.device));
  maps.push_back(std::move(end));
  std::map<std::size_t, ojson> out;
  for (const auto& [device, r] : replayed) {
    for (std::size_t k = 0; k < r.ooms.size(); ++k) {
      const std::size_t i = r.ooms[k];
      ojson m = {{"kind", "oom"},
                 {"label", fmt::format("Before OOM #{} (device {})", i + 1, device)},
                 {"device", device},
                 {"oom", i},
                 {"replayed", true}};
      m.update(segment_map(replayed_rows(r.layouts[k], device, sites), sites, o, device));
      out.emplace(i, std::move(m));
    }
  }
  for (auto& [i, m] : out) maps.push_back(std::move(m));
  return maps;
}

// `text` appended to `page`, every '<' escaped: inside <script> the JSON must not close the
// element or open a comment.
void append_script_safe(std::string& page, std::string_view text) {
  for (std::size_t from = 0;;) {
    const std::size_t lt = text.find('<', from);
    page.append(text.substr(from, lt == std::string_view::npos ? std::string_view::npos : lt - from));
    if (lt == std::string_view::npos) return;
    page.append("\\u003c");
    from = lt + 1;
  }
}

}  // namespace

ojson html_plot_data(const LoadedSnapshot& loaded, const Analysis& a, const HtmlOptions& o) {
  const Snapshot& s = loaded.snapshot;
  SiteTable sites(s);
  std::int64_t t0 = 0;
  const bool timed = has_time_axis(s, a.timelines, t0);
  ojson j;
  j["schema"] = kHtmlPlotsSchema;
  j["x_axis"] = timed ? "time" : "event";
  j["t0_us"] = timed ? ojson(t0) : ojson(nullptr);
  // Many devices share one budget of points, so the page stays small.
  HtmlOptions per_device = o;
  if (const std::size_t n = a.timelines.size(); n > 1) {
    const std::size_t share = std::max<std::size_t>(o.all_devices_points / n, 400);
    per_device.timeline_points = std::min(o.timeline_points, share);
    per_device.stack_points = std::min(o.stack_points, std::max<std::size_t>(share * o.stack_points / std::max<std::size_t>(o.timeline_points, 1), 200));
  }
  auto devices = ojson::array();
  std::map<std::int64_t, OomLayouts> replayed;
  parallel_for(2, [&](std::size_t task) {  // the OOMs' replays beside the plots (sites are the plots' alone)
    if (task == 1) {
      replayed = oom_layouts(s, a, o);
      return;
    }
    for (const DeviceTimeline& t : a.timelines) devices.push_back(device_plot(s, a, t, sites, per_device, timed, t0));
  });
  j["devices"] = std::move(devices);
  j["segment_maps"] = segment_maps(s, a, replayed, sites, o);
  j["block_states"] = {"allocated", "pending_free", "inactive", "merged", "unknown"};
  j["sites"] = sites.take();
  j["chart_library"] = html_chart_library();
  return j;
}

std::string html_page(const ojson& report, const ojson& plots) {
  // {"report": ..., "plots": ...}, each half dumped on its own core (no copy of either tree).
  std::string dumped[2];
  parallel_for(2, [&](std::size_t i) { dumped[i] = (i == 0 ? report : plots).dump(-1, ' ', false, ojson::error_handler_t::replace); });
  const std::string_view tpl = html_template();
  const std::size_t at = tpl.find(kDataMarker);
  std::string page;
  page.reserve(tpl.size() + dumped[0].size() + dumped[1].size() + (dumped[0].size() + dumped[1].size()) / 16 + 32);
  page.append(tpl.substr(0, at == std::string_view::npos ? tpl.size() : at));
  page.append("{\"report\":");
  append_script_safe(page, dumped[0]);
  page.append(",\"plots\":");
  append_script_safe(page, dumped[1]);
  page.append("}");
  if (at != std::string_view::npos) page.append(tpl.substr(at + kDataMarker.size()));
  return page;
}

std::string html_report(const LoadedSnapshot& loaded, const Analysis& analysis, const HtmlOptions& options) {
  return html_page(json_report(loaded, analysis), html_plot_data(loaded, analysis, options));
}

}  // namespace memsnap
