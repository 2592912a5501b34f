// Per-rank analyses compared: outlier ranks and their explaining sites, and patterns across ranks.
#include "analysis/ranks.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fmt/format.h>
#include <map>
#include <numeric>
#include <set>

#include "base/checked.h"
#include "base/error.h"
#include "base/format_bytes.h"
#include "base/units.h"

namespace memsnap {
namespace {

namespace fs = std::filesystem;

// A rank stands out when its metric is this far from the median (the larger of the two).
constexpr double kOutlierFraction = 0.10;
constexpr std::int64_t kOutlierFloor = 64ll << 20;
// Replication across ranks: model state within 2% on every rank, >= 50% of live, >= 512 MiB.
constexpr double kSameSize = 1.02;
constexpr std::uint64_t kMinModelState = 512ull << 20;
// Parameter memory compared across ranks only from this size on.
constexpr std::uint64_t kMinJobParameters = 256ull << 20;



std::int64_t tolerance_around(std::int64_t value) {
  return std::max<std::int64_t>(kOutlierFloor, static_cast<std::int64_t>(kOutlierFraction * double(value)));
}

std::int64_t median_of(std::vector<std::int64_t> values) {
  std::sort(values.begin(), values.end());
  return std::midpoint(values[(values.size() - 1) / 2], values[values.size() / 2]);
}

// Which ranks stand out and the rank they are compared with.
struct OutlierChoice {
  RankSpread spread = RankSpread::Balanced;
  std::vector<bool> outlier;
  std::size_t reference = 0;
};

std::size_t lowest_rank(const RankReport& r) {
  std::size_t lo = 0;
  for (std::size_t i = 1; i < r.ranks.size(); ++i) lo = r.ranks[i].metric < r.ranks[lo].metric ? i : lo;
  return lo;
}

std::size_t closest_to_median(const RankReport& r, const std::vector<bool>& outlier) {
  std::size_t ref = r.ranks.size();
  for (std::size_t i = 0; i < r.ranks.size(); ++i) {
    if (outlier[i]) continue;
    if (ref == r.ranks.size() || absolute_difference(r.ranks[i].metric, r.median) < absolute_difference(r.ranks[ref].metric, r.median)) ref = i;
  }
  return ref;
}

// Balanced when the spread is within the tolerance; else the ranks far from a robust centre (the
// median, with 3 scaled median absolute deviations) stand out against the rank closest to it;
// when none is that far (ranks spread evenly, or two equal groups) every rank above the lowest by
// more than the tolerance is compared with the lowest.
OutlierChoice choose_outliers(const RankReport& r) {
  const std::size_t n = r.ranks.size();
  OutlierChoice c;
  c.outlier.assign(n, false);
  const std::size_t lo = lowest_rank(r);
  std::int64_t hi = r.ranks[lo].metric;
  for (const RankResult& x : r.ranks) hi = std::max(hi, x.metric);
  if (saturating_sub(hi, r.ranks[lo].metric) <= tolerance_around(r.median)) return c;
  if (n >= 3) {
    std::vector<std::int64_t> deviations;
    for (const RankResult& x : r.ranks) deviations.push_back(absolute_difference(x.metric, r.median));
    const double mad = 1.4826 * double(median_of(deviations));
    const auto threshold = std::max<double>(double(tolerance_around(r.median)), 3.0 * mad);
    for (std::size_t i = 0; i < n; ++i) c.outlier[i] = double(absolute_difference(r.ranks[i].metric, r.median)) > threshold;
    if (std::find(c.outlier.begin(), c.outlier.end(), true) != c.outlier.end()) {
      c.spread = RankSpread::Outliers;
      c.reference = closest_to_median(r, c.outlier);
      return c;
    }
  }
  c.spread = n == 2 ? RankSpread::Outliers : RankSpread::Uneven;
  c.reference = lo;
  const std::int64_t tol = tolerance_around(r.ranks[lo].metric);
  for (std::size_t i = 0; i < n; ++i) c.outlier[i] = saturating_sub(r.ranks[i].metric, r.ranks[lo].metric) > tol;
  return c;
}

std::string outlier_reason(const RankReport& r, const OutlierChoice& c, std::size_t i) {
  const RankResult& x = r.ranks[i];
  if (!c.outlier[i]) return "";
  const bool against_median = c.spread == RankSpread::Outliers && r.ranks.size() >= 3;
  const std::int64_t base = against_median ? r.median : r.ranks[c.reference].metric;
  const std::int64_t dev = std::max(saturating_sub(x.metric, base), -kInt64Max);
  const std::string versus = against_median ? fmt::format("a median of {}", format_bytes(r.median))
                                            : fmt::format("{} on rank {}", format_bytes(base), r.ranks[c.reference].rank);
  return fmt::format("{} {} against {} ({}{})", metric_label(r.metric), format_bytes(x.metric), versus, dev >= 0 ? "+" : "-",
                     format_bytes(dev >= 0 ? dev : -dev));
}

// A rank with OOM events where most ranks have none stands out too.
void add_oom_outliers(const RankReport& r, OutlierChoice& c, std::vector<std::string>& reason) {
  std::size_t ooms = 0;
  for (const auto& x : r.ranks) ooms += x.oom_events > 0;
  if (ooms * 2 >= r.ranks.size()) return;
  bool added = false;
  for (std::size_t i = 0; i < r.ranks.size(); ++i) {
    const RankResult& x = r.ranks[i];
    if (x.oom_events == 0) continue;
    reason[i] += fmt::format("{}{} OOM event(s) where most ranks have none", reason[i].empty() ? "" : "; ", x.oom_events);
    added |= !c.outlier[i];
    c.outlier[i] = true;
  }
  if (!added) return;
  if (c.spread == RankSpread::Balanced) c.spread = RankSpread::Outliers;
  if (c.outlier[c.reference]) c.reference = closest_to_median(r, c.outlier);
}

std::vector<RankOutlier> find_outliers(RankReport& r) {
  std::vector<RankOutlier> out;
  const std::size_t n = r.ranks.size();
  if (n < 2) return out;
  OutlierChoice c = choose_outliers(r);
  std::vector<std::string> reason(n);
  for (std::size_t i = 0; i < n; ++i) reason[i] = outlier_reason(r, c, i);
  add_oom_outliers(r, c, reason);
  r.spread = c.spread;
  if (c.reference >= n) return out;  // every rank had an OOM event the others lack: nothing to compare with
  const std::size_t ref = c.reference;
  const bool peak = r.metric == RankMetric::PeakAllocated;
  for (std::size_t i = 0; i < n; ++i) {
    if (!c.outlier[i]) continue;
    RankOutlier o;
    o.rank = r.ranks[i].rank;
    o.reference_rank = r.ranks[ref].rank;
    o.value = r.ranks[i].metric;
    o.median = r.median;
    o.reason = reason[i];
    const Analysis& a = r.ranks[i].analysis;
    const Analysis& b = r.ranks[ref].analysis;
    auto sites = diff_sites(peak ? b.sites_at_peak : b.sites, peak ? a.sites_at_peak : a.sites);
    const bool higher = o.value >= r.ranks[ref].metric;
    if (!higher) std::reverse(sites.begin(), sites.end());
    for (const DiffSite& s : sites) {
      if (o.sites.size() == 3 || (higher ? s.delta_bytes <= 0 : s.delta_bytes >= 0)) break;
      o.sites.push_back(s);
    }
    out.push_back(std::move(o));
  }
  return out;
}

// Files that plainly are not ranks of one job: parameter memory more than 2x apart (pipeline
// stages differ like that too, unsharded), or some ranks training (gradients, optimizer state)
// and others not.
std::vector<Sentence> job_warnings(const RankReport& r) {
  std::vector<Sentence> out;
  std::size_t lo = 0, hi = 0;
  std::vector<std::int64_t> training, inference;
  for (std::size_t i = 0; i < r.ranks.size(); ++i) {
    const ModelState& m = r.ranks[i].model;
    if (m.parameters < r.ranks[lo].model.parameters) lo = i;
    if (m.parameters > r.ranks[hi].model.parameters) hi = i;
    (m.gradients + m.ddp_buckets + m.optimizer_state > 0 ? training : inference).push_back(r.ranks[i].rank);
  }
  const std::uint64_t plo = r.ranks[lo].model.parameters, phi = r.ranks[hi].model.parameters;
  if (phi >= kMinJobParameters && phi > 2 * plo) {
    out.push_back(sentence("parameter memory differs from {} on rank {} to {} on rank {}: pipeline stages differ like that, otherwise these files "
                           "are not ranks of one job",
                           Bytes(plo), r.ranks[lo].rank, Bytes(phi), r.ranks[hi].rank));
  }
  if (!training.empty() && !inference.empty()) {
    out.push_back(sentence("rank(s) {} hold gradients or optimizer state and rank(s) {} none: training and inference snapshots mixed?",
                           rank_list(training), rank_list(inference)));
  }
  return out;
}

void merge_patterns(RankReport& r) {
  std::vector<PatternId> order;
  std::map<PatternId, Pattern> first;
  std::map<PatternId, std::vector<std::int64_t>> on;
  for (const RankResult& x : r.ranks) {
    for (const Pattern& p : x.analysis.patterns) {
      if (!first.count(p.id)) {
        first.emplace(p.id, p);
        order.push_back(p.id);
      }
      auto& ranks = on[p.id];
      if (ranks.empty() || ranks.back() != x.rank) ranks.push_back(x.rank);
    }
  }
  // Replication: the same full-size model state on every rank, unsharded, most of live memory.
  std::uint64_t lo = UINT64_MAX, hi = 0;
  bool sharded = false, ddp = false, grads = true, oom = false;
  for (const RankResult& x : r.ranks) {
    lo = std::min(lo, x.model.total());
    hi = std::max(hi, x.model.total());
    sharded |= x.model.sharded_frames;
    ddp |= x.model.ddp_frames;
    grads &= x.model.gradients + x.model.ddp_buckets > 0 && x.model.parameters > 0;
    oom |= x.oom_events > 0;
  }
  const ModelState& mid = r.ranks[r.ranks.size() / 2].model;
  if (r.ranks.size() >= 2 && !sharded && (ddp || grads) && lo >= kMinModelState && double(hi) <= double(lo) * kSameSize &&
      mid.total() * 2 >= mid.live) {
    const PatternId id = PatternId::ReplicatedGradients;
    if (!first.count(id)) order.push_back(id);
    first[id] = replicated_gradients_pattern(mid, r.ranks.size(), oom);
    on[id].clear();
    for (const RankResult& x : r.ranks) on[id].push_back(x.rank);
  }
  for (const auto& id : order) {
    Pattern p = first[id];
    const auto& ranks = on[id];
    p.evidence.insert(p.evidence.begin(), ranks.size() == r.ranks.size()
                                              ? sentence("found on all {} ranks", r.ranks.size())
                                              : sentence("found on rank(s) {} of {}", rank_list(ranks), r.ranks.size()));
    if (ranks.size() == 1 && ranks.size() < r.ranks.size()) p.summary = sentence("rank {}: {}", ranks.front(), p.summary.text());
    r.patterns.push_back(std::move(p));
  }
  std::stable_sort(r.patterns.begin(), r.patterns.end(), [](const Pattern& a, const Pattern& b) {
    return is_leak_pattern(a.id) && !is_leak_pattern(b.id);
  });
}

}  // namespace

void drop_bulky(Analysis& a) {
  for (DeviceTimeline& t : a.timelines) {
    t.curve = {};
    t.free_bursts = {};
    t.lifetimes = {};
    std::vector<LiveItem>().swap(t.live_at_peak);
    std::vector<std::vector<std::size_t>>().swap(t.live_at_oom);  // indices into the lifetimes dropped above
    std::vector<std::pair<std::size_t, std::size_t>>().swap(t.final_blocks);
  }
}

RankResult rank_result(const std::string& path, const LoadedSnapshot& loaded, Analysis analysis) {
  RankResult r;
  r.path = path;
  r.input = loaded.input;
  r.analysis = std::move(analysis);
  r.model = model_state(loaded.snapshot);
  r.oom_events = r.analysis.trace.ooms.size();
  drop_bulky(r.analysis);
  return r;
}

std::string metric_label(RankMetric metric) { return metric == RankMetric::PeakAllocated ? "peak" : "live memory"; }

std::string rank_list(const std::vector<std::int64_t>& ranks) {
  std::string out;
  for (auto r : ranks) out += fmt::format("{}{}", out.empty() ? "" : ", ", r);
  return out;
}

std::int64_t rank_from_name(const std::string& filename) {
  std::string stem = fs::path(filename).filename().string();
  const std::string l = ascii_lower(stem);
  auto digits_at = [&](std::size_t i) -> std::int64_t {
    std::size_t j = i;
    while (j < l.size() && std::isdigit(static_cast<unsigned char>(l[j]))) ++j;
    if (j == i || j - i > 9) return -1;
    return std::stoll(l.substr(i, j - i));
  };
  if (auto pos = l.rfind("rank"); pos != std::string::npos) {
    std::size_t i = pos + 4;
    while (i < l.size() && (l[i] == '_' || l[i] == '-' || l[i] == ' ' || l[i] == '=')) ++i;
    if (const auto r = digits_at(i); r >= 0) return r;
  }
  for (std::size_t end = l.size(); end > 0; --end) {
    if (!std::isdigit(static_cast<unsigned char>(l[end - 1]))) continue;
    std::size_t begin = end;
    while (begin > 0 && std::isdigit(static_cast<unsigned char>(l[begin - 1]))) --begin;
    return digits_at(begin);
  }
  return -1;
}

std::vector<std::int64_t> ranks_of_files(const std::vector<std::string>& files) {
  std::set<std::int64_t> seen;
  bool by_name = true;
  for (const auto& f : files) {
    const std::int64_t rank = rank_from_name(f);
    by_name &= rank >= 0 && seen.insert(rank).second;
  }
  std::vector<std::int64_t> out;
  for (std::size_t i = 0; i < files.size(); ++i) out.push_back(by_name ? rank_from_name(files[i]) : static_cast<std::int64_t>(i));
  return out;
}

RankReport compare_ranks(const std::string& directory, const std::vector<std::string>& files,
                         std::vector<std::optional<RankResult>> results, const std::vector<std::string>& errors) {
  RankReport r;
  r.directory = directory;
  const std::vector<std::int64_t> ranks = ranks_of_files(files);
  for (std::size_t i = 0; i < files.size(); ++i) {
    if (!results[i]) {
      r.skipped.push_back(fmt::format("{}: {}", fs::path(files[i]).filename().string(), errors[i]));
      continue;
    }
    results[i]->rank = ranks[i];
    r.ranks.push_back(std::move(*results[i]));
  }
  if (r.ranks.empty()) {
    throw InputError(fmt::format("none of the {} files could be analyzed (first: {})", files.size(), r.skipped.front()),
                     "check that the directory holds snapshots written by torch.cuda.memory._dump_snapshot()");
  }
  std::sort(r.ranks.begin(), r.ranks.end(), [](const RankResult& a, const RankResult& b) { return a.rank < b.rank; });
  const bool peaks = std::all_of(r.ranks.begin(), r.ranks.end(), [](const RankResult& x) { return x.analysis.totals.overall.peak_allocated.has_value(); });
  r.metric = peaks ? RankMetric::PeakAllocated : RankMetric::Allocated;
  std::vector<std::int64_t> values;
  for (RankResult& x : r.ranks) {
    const Totals& t = x.analysis.totals.overall;
    x.metric = peaks ? *t.peak_allocated : static_cast<std::int64_t>(t.allocated);
    values.push_back(x.metric);
  }
  std::sort(values.begin(), values.end());
  r.median = std::midpoint(values[(values.size() - 1) / 2], values[values.size() / 2]);
  for (std::size_t i = 1; i < r.ranks.size(); ++i) {
    if (r.ranks[i].metric > r.ranks[r.body].metric) r.body = i;
  }
  r.outliers = find_outliers(r);
  r.warnings = job_warnings(r);
  merge_patterns(r);
  return r;
}

}  // namespace memsnap
