// Builds the contract's JSON report from an Analysis.
#include "report/json_report.h"
#include "report/site_tags_report.h"
#include "report/site_what_json.h"

#include "report/pool_host_sections.h"
#include "report/budget_report.h"

#include "base/checked.h"
#include "base/limits.h"
#include "analysis/patterns.h"
#include "report/comparison_report.h"
#include "report/phases_report.h"

#include <algorithm>
#include <cmath>
#include <span>
#include <fmt/format.h>

namespace memsnap {
namespace {

nlohmann::ordered_json optional_int(const std::optional<std::int64_t>& v) {
  return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
}

// The first limits::kMaxListedUnknowns names (an ordered object's insertion is linear in its size).
nlohmann::ordered_json listed_unknowns(const std::map<std::string, std::uint64_t>& counts) {
  auto obj = nlohmann::ordered_json::object();
  for (const auto& [k, n] : counts) {
    if (obj.size() == limits::kMaxListedUnknowns) break;
    obj[k] = n;
  }
  return obj;
}

nlohmann::ordered_json input_json(const InputInfo& in) {
  nlohmann::ordered_json j;
  j["path"] = in.path;
  j["format"] = format_name(in.format);
  const char* c = compression_name(in.compression);
  j["compression"] = c ? nlohmann::ordered_json(c) : nlohmann::ordered_json(nullptr);
  j["bytes"] = in.bytes;
  if (in.format == Format::Pickle) j["pickle_protocol"] = in.pickle_protocol;
  return j;
}

nlohmann::ordered_json site_json(const Site& site, const Snapshot* snapshot) {
  nlohmann::ordered_json j;
  j["site"] = site.site;
  j["file"] = site.file;
  j["line"] = site.line;
  j["function"] = site.function;
  j["device"] = site.device >= 0 ? nlohmann::ordered_json(site.device) : nlohmann::ordered_json(nullptr);
  j["bytes"] = site.bytes;
  j["requested"] = site.requested;
  j["blocks"] = site.blocks;
  j["percent"] = std::round(site.percent * 100) / 100;
  j["category"] = category_name(site.category);
  if (!site.other_kinds.empty()) {
    auto kinds = nlohmann::ordered_json::array();
    for (const SiteKind& k : site.other_kinds) kinds.push_back({{"kind", category_name(k.kind)}, {"bytes", k.bytes}, {"blocks", k.blocks}});
    j["other_kinds"] = kinds;
  }
  j["frame_kind"] = site.no_stack ? "none" : frame_kind_name(site.kind);
  if (site.via_forward_frames) j["via_forward_frames"] = true;
  add_site_tags(j, site);
  nlohmann::ordered_json provenance;
  for (std::size_t p = 0; p < kProvenanceCount; ++p) provenance[std::string(name_of(static_cast<Provenance>(p)))] = site.bytes_by_provenance[p];
  j["provenance"] = provenance;
  const auto before = static_cast<std::size_t>(Provenance::BeforeWindow);
  if (site.no_stack && site.bytes_by_provenance[before] == site.bytes) {
    j["reason"] = "allocated before the recording began: the trace has no alloc of these blocks";
  } else if (site.no_stack) {
    j["reason"] = "no stack was recorded: allocated before _record_memory_history was enabled, recorded without "
                  "context, or allocated in the backward pass without C++ frames (stacks=\"all\")";
  }
  j["stack"] = site.call_path;
  add_site_what(j, site, snapshot);
  return j;
}

nlohmann::ordered_json sites_json(const std::vector<Site>& sites, std::size_t top, const Snapshot* snapshot = nullptr) {
  auto arr = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < sites.size() && i < top; ++i) arr.push_back(site_json(sites[i], snapshot));
  return arr;
}

nlohmann::ordered_json pattern_json(const Pattern& p) {
  auto evidence = nlohmann::ordered_json::array(), fixes = nlohmann::ordered_json::array();
  for (const Sentence& e : p.evidence) evidence.push_back(e.text());
  for (const Fix& f : p.fix) fixes.push_back(f.text());
  return {{"id", name_of(p.id)},     {"verdict", name_of(p.verdict)}, {"confidence", name_of(p.confidence)},
          {"summary", p.summary.text()}, {"evidence", evidence},        {"sites", p.sites},
          {"fix", fixes},            {"saving_bytes", p.saving_bytes ? nlohmann::ordered_json(*p.saving_bytes) : nlohmann::ordered_json(nullptr)}};
}

// `listed`: how many of the device's annotations are listed (the rest are counted).
nlohmann::ordered_json timeline_json(const DeviceTimeline& t, std::size_t listed) {
  nlohmann::ordered_json j;
  j["device"] = t.device;
  j["events"] = t.events;
  j["peak_allocated"] = optional_int(t.peak_allocated);
  j["peak_event_index"] = t.peak_index;
  j["peak_certainty"] = peak_certainty_name(peak_certainty(t));
  j["peak_time_us"] = t.peak_time_us;
  j["matched_frees"] = t.matched_frees;
  j["frees_of_earlier_allocations"] = t.frees_before_window;
  j["live_from_before_window"] = t.live_from_before_window;
  j["pending_free_requests"] = t.pending_requests;
  j["pending_free_bytes"] = t.pending_bytes;
  j["pending_streams"] = t.pending_streams;
  auto steps = nlohmann::ordered_json::array();
  for (const auto& m : std::span(t.steps).first(std::min(listed, t.steps.size()))) {
    steps.push_back({{"name", m.name}, {"stage", m.stage}, {"time_us", m.time_us}, {"event_index", m.event_index}, {"live_bytes", m.live_bytes}});
  }
  j["annotations"] = steps;
  if (t.steps.size() > listed) j["annotations_not_listed"] = t.steps.size() - listed;
  return j;
}

nlohmann::ordered_json pools_json(const std::vector<PoolStreamFree>& pools) {
  auto arr = nlohmann::ordered_json::array();
  for (const auto& p : pools) {
    const Totals& t = p.totals;
    arr.push_back({{"device", p.device}, {"pool", p.is_large ? "large" : "small"}, {"pool_id", {p.pool.first, p.pool.second}},
                   {"pool_kind", pool_kind_name(pool_kind(p.pool))}, {"stream", p.stream},
                   {"reserved", t.reserved}, {"allocated", t.allocated}, {"requested", t.requested},
                   {"pending_free", t.pending_free}, {"inactive", t.inactive}, {"largest_inactive_block", t.largest_inactive_block},
                   {"segments", t.segments}, {"segments_with_inactive", t.segments_with_inactive},
                   {"inactive_blocks", t.inactive_blocks}});
  }
  return arr;
}

nlohmann::ordered_json trace_json(const TraceSummary& t) {
  nlohmann::ordered_json j;
  j["events"] = t.events;
  j["analyzed"] = t.analyzed;
  j["dropped"] = t.dropped;
  auto actions = nlohmann::ordered_json::object();
  for (int i = 0; i < kActionCount; ++i) {
    if (t.actions[i]) actions[action_name(static_cast<Action>(i))] = t.actions[i];
  }
  j["actions"] = actions;
  j["pending_free_requests"] = t.pending_free_requests;
  auto ooms = nlohmann::ordered_json::array();
  for (const auto& o : t.ooms) {
    ooms.push_back({{"device", o.device}, {"size", o.size}, {"device_free", o.device_free}, {"site", nullptr},
                    {"stream", o.stream}, {"time_us", o.time_us}});
  }
  j["oom"] = ooms;
  return j;
}

// Parallel to next_steps, so that `memsnap merge` tells a pattern's fix from other advice.
nlohmann::ordered_json next_step_kinds(const Analysis& a) {
  auto kinds = nlohmann::ordered_json::array();
  for (const NextStep& n : a.next_steps) kinds.push_back(name_of(n.kind));
  return kinds;
}

// The sites after the first `from` as [site, file, line, function, category, bytes, blocks, device].
nlohmann::ordered_json compact_sites(const std::vector<Site>& sites, std::size_t from) {
  auto arr = nlohmann::ordered_json::array();
  for (std::size_t i = from; i < sites.size(); ++i) {
    const Site& x = sites[i];
    arr.push_back({x.site, x.file, x.line, x.function, category_name(x.category), x.bytes, x.blocks,
                   x.device >= 0 ? nlohmann::ordered_json(x.device) : nlohmann::ordered_json(nullptr)});
  }
  return arr;
}

// What `memsnap merge` needs beyond the rest of the report to compare this snapshot with other
// ranks: the model state, and every site past the listed top ones (live and at the peak).
nlohmann::ordered_json rank_summary_json(const Snapshot& s, const Analysis& a) {
  const ModelState m = model_state(s);
  nlohmann::ordered_json j;
  j["model_state"] = {{"parameters", m.parameters}, {"gradients", m.gradients}, {"optimizer_state", m.optimizer_state},
                      {"ddp_buckets", m.ddp_buckets}, {"live", m.live}, {"ddp_frames", m.ddp_frames},
                      {"sharded_frames", m.sharded_frames}};
  j["more_sites"] = compact_sites(a.sites, a.options.top);
  j["more_sites_at_peak"] = compact_sites(a.sites_at_peak, a.options.top);
  j["next_step_kinds"] = next_step_kinds(a);
  return j;
}

}  // namespace

void set_findings_json(nlohmann::ordered_json& report, const Analysis& a) {
  report["headline"] = a.headline;
  auto patterns = nlohmann::ordered_json::array();
  for (const auto& p : a.patterns) patterns.push_back(pattern_json(p));
  report["patterns"] = patterns;
  auto steps = nlohmann::ordered_json::array(), uncertainties = nlohmann::ordered_json::array();
  for (const NextStep& n : a.next_steps) steps.push_back(n.text());
  for (const Sentence& u : a.uncertainties) uncertainties.push_back(u.text());
  report["next_steps"] = steps;
  report["uncertainties"] = uncertainties;
  if (report.contains("rank_summary")) report["rank_summary"]["next_step_kinds"] = next_step_kinds(a);
}

nlohmann::ordered_json totals_json(const Totals& t) {
  nlohmann::ordered_json j;
  j["reserved"] = t.reserved;
  j["allocated"] = t.allocated;
  j["pending_free"] = t.pending_free;
  j["inactive"] = t.inactive;
  j["requested"] = t.requested;
  j["segments"] = t.segments;
  j["blocks"] = t.blocks;
  j["largest_inactive_block"] = t.largest_inactive_block;
  j["inactive_in_free_segments"] = t.inactive_in_free_segments;
  j["free_segments"] = t.free_segments;
  j["fragments"] = t.fragments();
  j["largest_fragment"] = t.largest_fragment;
  j["reserved_in_private_pools"] = t.reserved_in_private_pools;
  j["allocated_in_private_pools"] = t.allocated_in_private_pools;
  j["inactive_in_private_pools"] = t.inactive_in_private_pools;
  j["peak_allocated"] = optional_int(t.peak_allocated);
  j["peak_reserved"] = optional_int(t.peak_reserved);
  if (t.peak_allocated) j["peak_certainty"] = peak_certainty_name(t.peak_certainty);
  if (t.peak_reserved) j["reserved_peak_at_window_start"] = t.reserved_peak_at_window_start;
  return j;
}

nlohmann::ordered_json json_report(const LoadedSnapshot& loaded, const Analysis& a) {
  const Snapshot& s = loaded.snapshot;
  nlohmann::ordered_json j;
  j["schema"] = kReportSchema;
  j["input"] = input_json(loaded.input);
  j["headline"] = a.headline;
  auto settings = s.settings.present ? nlohmann::ordered_json::parse(s.settings.json, nullptr, false) : nlohmann::ordered_json(nullptr);
  j["allocator_settings"] = settings.is_discarded() ? nlohmann::ordered_json(nullptr) : settings;
  j["totals"] = totals_json(a.totals.overall);
  auto devices = nlohmann::ordered_json::array();
  for (const auto& d : a.totals.devices) devices.push_back({{"device", d.device}, {"totals", totals_json(d.totals)}});
  j["devices"] = devices;
  j["top_sites"] = sites_json(a.sites, a.options.top, &s);
  j["group_by"] = name_of(a.options.group_by);
  j["labels"] = labels_json(a.labels);
  j["trace"] = trace_json(a.trace);
  auto& ooms = j["trace"]["oom"];
  for (std::size_t i = 0; i < a.ooms.size() && i < ooms.size(); ++i) {
    const OomAnalysis& o = a.ooms[i];
    if (const std::string site = site_label(s, o.event.stack); !site.empty()) ooms[i]["site"] = site;
    ooms[i]["studied"] = o.studied;
    if (!o.studied) continue;  // counted only (kStudiedOomsPerDevice): no layout, verdict or sites
    ooms[i]["verdict"] = oom_verdict_name(o.verdict);
    ooms[i]["allocated_at_oom"] = o.at_oom.allocated;
    ooms[i]["reserved_at_oom"] = o.at_oom.reserved;
    ooms[i]["inactive_at_oom"] = o.at_oom.inactive;
    ooms[i]["largest_inactive_block_at_oom"] = o.at_oom.largest_inactive_block;
    ooms[i]["inactive_in_free_segments_at_oom"] = o.at_oom.in_free_segments;
    ooms[i]["largest_reusable_block"] = o.largest_reusable_block;
    ooms[i]["fragments_in_pool_at_oom"] = o.fragments_in_pool;
    ooms[i]["pool_id"] = {o.pool.first, o.pool.second};
    ooms[i]["reserved_in_pool_at_oom"] = o.reserved_in_pool;
    ooms[i]["reserved_in_other_pools_at_oom"] = o.reserved_in_other_pools;
    ooms[i]["inactive_in_other_pools_at_oom"] = o.inactive_in_other_pools;
    ooms[i]["process_limit"] = o.process_limit ? nlohmann::ordered_json{{"at_least", o.process_limit->at_least}, {"below", o.process_limit->below}}
                                               : nlohmann::ordered_json(nullptr);
    ooms[i]["layout_replayed"] = o.at_oom.replayed;
    ooms[i]["reason"] = o.reason;
    ooms[i]["top_sites"] = sites_json(o.sites_before, 5, &s);
  }
  auto timelines = nlohmann::ordered_json::array();
  for (const auto& t : a.timelines) timelines.push_back(timeline_json(t, limits::kMaxListedAnnotations / std::max<std::size_t>(1, a.timelines.size())));
  j["timeline"] = timelines;
  j["peak"] = {{"device", a.peak_device}, {"top_sites", sites_json(a.sites_at_peak, a.options.top, &s)}};
  j["default_view"] = {{"device", a.view.device >= 0 ? nlohmann::ordered_json(a.view.device) : nlohmann::ordered_json(nullptr)},
                       {"reason", name_of(a.view.reason)}};
  j["budget"] = budget_json(a.budgets);
  j["pools"] = pools_json(a.pools);
  j["memory_pools"] = memory_pools_json(a.memory_pools);
  j["host_memory"] = host_memory_json(a.host, sites_json(a.host.sites, a.options.top));
  auto steps = nlohmann::ordered_json::array();
  for (const DeviceSteps& d : a.diagnosis.steps) {
    steps.push_back({{"device", d.device}, {"source", step_source_name(d.source)}, {"marker", d.marker}, {"boundaries", d.boundaries},
                     {"steps", d.boundaries > 0 ? d.boundaries - 1 : 0}, {"live_at_boundaries", d.live},
                     {"time_us_at_boundaries", d.time_us}, {"peak_in_steps", d.step_peak}});
  }
  j["steps"] = steps;
  j["phases"] = phases_json(a);
  set_findings_json(j, a);  // the headline keeps its place at the top
  j["invariants"] = {{"ok", a.invariant_violations.empty()}, {"violations", a.invariant_violations}};
  j["tolerated"] = {{"unknown_keys", listed_unknowns(s.unknown_keys)}, {"unknown_actions", listed_unknowns(s.unknown_actions)}};
  if (s.unknown_keys.size() > limits::kMaxListedUnknowns) {
    j["tolerated"]["unknown_keys_not_listed"] = s.unknown_keys.size() - limits::kMaxListedUnknowns;
  }
  if (s.unknown_actions.size() > limits::kMaxListedUnknowns) {
    j["tolerated"]["unknown_actions_not_listed"] = s.unknown_actions.size() - limits::kMaxListedUnknowns;
  }
  j["rank_summary"] = rank_summary_json(s, a);
  return j;
}

namespace {

nlohmann::ordered_json delta_totals_json(const Totals& before, const Totals& after) {
  auto d = [](std::uint64_t a, std::uint64_t b) { return saturating_difference(a, b); };
  auto opt = [](const std::optional<std::int64_t>& a, const std::optional<std::int64_t>& b) {
    return a && b ? nlohmann::ordered_json(saturating_sub(*b, *a)) : nlohmann::ordered_json(nullptr);
  };
  nlohmann::ordered_json j;
  j["reserved"] = d(before.reserved, after.reserved);
  j["allocated"] = d(before.allocated, after.allocated);
  j["pending_free"] = d(before.pending_free, after.pending_free);
  j["inactive"] = d(before.inactive, after.inactive);
  j["requested"] = d(before.requested, after.requested);
  j["segments"] = d(before.segments, after.segments);
  j["blocks"] = d(before.blocks, after.blocks);
  j["largest_inactive_block"] = d(before.largest_inactive_block, after.largest_inactive_block);
  j["peak_allocated"] = opt(before.peak_allocated, after.peak_allocated);
  j["peak_reserved"] = opt(before.peak_reserved, after.peak_reserved);
  return j;
}

nlohmann::ordered_json diff_site_json(const DiffSite& s) {
  nlohmann::ordered_json j;
  j["site"] = s.site;
  j["file"] = s.file;
  j["line"] = s.line;
  j["function"] = s.function;
  j["category"] = category_name(s.category);
  j["bytes_before"] = s.bytes_before;
  j["bytes_after"] = s.bytes_after;
  j["delta_bytes"] = s.delta_bytes;
  j["blocks_before"] = s.blocks_before;
  j["blocks_after"] = s.blocks_after;
  j["delta_blocks"] = s.delta_blocks;
  j["status"] = name_of(s.status);
  j["verdict"] = s.verdict == DiffVerdict::None ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(name_of(s.verdict));
  j["pattern"] = s.pattern ? nlohmann::ordered_json(name_of(*s.pattern)) : nlohmann::ordered_json(nullptr);
  return j;
}

}  // namespace

void add_diff_json(nlohmann::ordered_json& report, const DiffReport& d) {
  nlohmann::ordered_json j;
  j["before"] = {{"path", d.before_path}, {"totals", totals_json(d.before)}};
  j["after"] = {{"path", d.after_path}};
  j["totals_delta"] = delta_totals_json(d.before, d.after);
  j["steps_between"] = d.steps_between ? nlohmann::ordered_json(*d.steps_between) : nlohmann::ordered_json(nullptr);
  j["seconds_between"] = d.seconds_between ? nlohmann::ordered_json(std::round(*d.seconds_between * 1000) / 1000)
                                           : nlohmann::ordered_json(nullptr);
  j["headline"] = report.value("headline", "");  // the report's own: conclude_diff wrote it
  j["warnings"] = d.warnings;
  auto sites = nlohmann::ordered_json::array();
  for (const DiffSite& s : d.sites) sites.push_back(diff_site_json(s));
  j["sites"] = sites;
  j["relation"] = name_of(d.relation);
  j["relation_evidence"] = d.relation_evidence;
  j["peak_before"] = d.peak_before ? nlohmann::ordered_json(*d.peak_before) : nlohmann::ordered_json(nullptr);
  j["peak_after"] = d.peak_after ? nlohmann::ordered_json(*d.peak_after) : nlohmann::ordered_json(nullptr);
  auto peak_sites = nlohmann::ordered_json::array();
  for (const DiffSite& s : d.peak_sites) {
    if (s.status != DiffStatus::Same && peak_sites.size() < 20) peak_sites.push_back(diff_site_json(s));
  }
  j["peak_sites"] = peak_sites;
  auto kinds = nlohmann::ordered_json::array();
  for (const KindDelta& k : d.kinds) {
    kinds.push_back({{"category", category_name(k.category)}, {"before", k.before}, {"after", k.after}, {"delta", k.delta},
                     {"top_site", k.top_site}, {"top_function", k.top_function}, {"top_site_delta", k.top_site_delta}});
  }
  j["kinds"] = kinds;
  j["kinds_at"] = d.kinds_at_peak ? "peak" : "end";
  auto settings = nlohmann::ordered_json::array();
  for (const SettingChange& c : d.settings) settings.push_back({{"key", c.key}, {"before", c.before}, {"after", c.after}});
  j["settings_changes"] = settings;
  if (d.steps) {
    j["step_aligned"] = {{"steps", d.steps->steps}, {"device_before", d.steps->device_before}, {"device_after", d.steps->device_after},
                         {"step_peaks_before", d.steps->peak_before}, {"step_peaks_after", d.steps->peak_after},
                         {"median_delta", d.steps->median_delta}, {"growth_before", d.steps->growth_before},
                         {"growth_after", d.steps->growth_after}};
  } else {
    j["step_aligned"] = nullptr;
  }
  j["stacks_on_neither"] = d.stacks_on_neither;
  auto roots = nlohmann::ordered_json::array();
  for (const RootChange& r : d.roots) roots.push_back({{"before", r.before}, {"after", r.after}, {"files", r.files}});
  j["checkout_roots"] = roots;
  report["diff"] = j;
}

void add_ranks_json(nlohmann::ordered_json& report, const RankReport& r, std::size_t top) {
  auto ranks = nlohmann::ordered_json::array();
  std::vector<std::int64_t> outlier_ranks;
  for (const RankOutlier& o : r.outliers) outlier_ranks.push_back(o.rank);
  for (const RankResult& x : r.ranks) {
    nlohmann::ordered_json e;
    e["rank"] = x.rank;
    e["path"] = x.path;
    e["totals"] = totals_json(x.analysis.totals.overall);
    e["oom_events"] = x.oom_events;
    e["top_sites"] = sites_json(x.analysis.sites, std::min<std::size_t>(top, 3));
    e["headline"] = x.analysis.headline;
    auto ids = nlohmann::ordered_json::array();
    for (const Pattern& p : x.analysis.patterns) ids.push_back(name_of(p.id));
    e["patterns"] = ids;
    e["outlier"] = std::find(outlier_ranks.begin(), outlier_ranks.end(), x.rank) != outlier_ranks.end();
    ranks.push_back(e);
  }
  report["ranks"] = ranks;
  report["outlier_ranks"] = outlier_ranks;
  nlohmann::ordered_json c;
  c["directory"] = r.directory;
  c["metric"] = name_of(r.metric);
  c["median"] = r.median;
  c["spread"] = name_of(r.spread);
  auto warnings = nlohmann::ordered_json::array();
  for (const Sentence& w : r.warnings) warnings.push_back(w.text());
  c["warnings"] = warnings;
  c["body_rank"] = r.ranks[r.body].rank;
  auto outliers = nlohmann::ordered_json::array();
  for (const RankOutlier& o : r.outliers) {
    auto sites = nlohmann::ordered_json::array();
    for (const DiffSite& s : o.sites) sites.push_back(diff_site_json(s));
    outliers.push_back({{"rank", o.rank}, {"reference_rank", o.reference_rank}, {"value", o.value}, {"median", o.median},
                        {"reason", o.reason}, {"sites", sites}});
  }
  c["outliers"] = outliers;
  c["skipped"] = r.skipped;
  report["rank_comparison"] = c;
}

}  // namespace memsnap

namespace memsnap {

nlohmann::ordered_json json_report(const ReportInput& in) {
  nlohmann::ordered_json report = json_report(in.loaded, in.analysis);
  if (in.diff) add_diff_json(report, *in.diff);
  if (in.ranks) add_ranks_json(report, *in.ranks, in.analysis.options.top);
  return report;
}

}  // namespace memsnap
