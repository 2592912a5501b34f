// Text report in the workflow's order: headline, totals, top sites, free timeline, diagnosis,
// next steps, uncertainties. Prose is wrapped for an 80-column terminal; sizes in binary units.
#include "report/text_report.h"
#include "base/base_name.h"
#include "report/site_tags_report.h"
#include "report/site_what_text.h"

#include "report/pool_host_sections.h"

#include "report/budget_report.h"
#include "report/comparison_report.h"
#include "report/text_wrap.h"
#include "report/phases_report.h"

#include <algorithm>
#include <fmt/format.h>
#include <sstream>

#include "base/checked.h"
#include "report/allocator_settings_text.h"
#include "base/format_bytes.h"
#include "base/plural.h"

namespace memsnap {
namespace {

// Installed packages' frames shown from the package root ("torch/nn/modules/module.py:...").
std::string package_relative(const std::string& frame) {
  for (const char* marker : {"site-packages/", "dist-packages/"}) {
    if (const auto at = frame.find(marker); at != std::string::npos) return frame.substr(at + std::string_view(marker).size());
  }
  return frame;
}

// A peak as the window shows it: unknown without history, a lower bound when it is the window's
// start, not a peak at all when the window holds no allocation.
std::string peak_text(const std::optional<std::int64_t>& peak, bool at_window_start, PeakCertainty certainty) {
  if (!peak) return "unknown (no trace history)";
  if (certainty == PeakCertainty::TooShort) return fmt::format("unknown (the window is too short; {} at most in it)", format_bytes(*peak));
  if (at_window_start) return fmt::format("{} (at the window's start: a lower bound)", format_bytes(*peak));
  return format_bytes(*peak);
}

// The timeline line's account of the peak.
std::string timeline_peak_text(const DeviceTimeline& t) {
  const std::string peak = t.peak_allocated ? format_bytes(*t.peak_allocated) : "unknown";
  switch (peak_certainty(t)) {
    case PeakCertainty::TooShort:
      return fmt::format("no allocation among the window's {} event{}, too short to show a peak (live memory in it is at most {})",
                         t.events, plural_s(t.events), peak);
    case PeakCertainty::AtWindowStart:
      return fmt::format("the largest live total, {}, is at the window's start (the run's peak may have come before the recording)", peak);
    case PeakCertainty::InWindow:
      break;
  }
  return fmt::format("peak {} at event {} of {}", peak, t.peak_index, t.events);
}

// Private-pool memory is reusable only inside its own pool (CUDA graph / MemPool).
void private_pools_lines(std::string& out, const Totals& t) {
  out += fmt::format("  {:<30}{}\n", "  reusable (default pool)", format_bytes(t.inactive - t.inactive_in_private_pools));
  out += fmt::format("  {:<30}{} of {} reserved in {} private pool{} (CUDA graphs / MemPools; not reusable by other pools)\n",
                     "  held by private pools", format_bytes(t.inactive_in_private_pools), format_bytes(t.reserved_in_private_pools),
                     t.private_pools, plural_s(t.private_pools));
}

void totals_section(std::string& out, const Totals& t) {
  auto line = [&](const char* label, const std::string& value) { out += fmt::format("  {:<30}{}\n", label, value); };
  line("reserved (segments)", format_bytes(t.reserved));
  line("allocated (live tensors)", format_bytes(t.allocated));
  line("active, awaiting free", format_bytes(t.pending_free));
  line(t.inactive_in_private_pools ? "inactive (cached)" : "inactive (cached, reusable)", format_bytes(t.inactive));
  if (t.inactive_in_private_pools) private_pools_lines(out, t);
  if (t.inactive) {
    line("  in wholly free segments", fmt::format("{} in {} segment{} (empty_cache() returns it)", format_bytes(t.inactive_in_free_segments),
                                                  t.free_segments, plural_s(t.free_segments)));
    line("  fragments of used segments", fmt::format("{} (largest {})", format_bytes(t.fragments()), format_bytes(t.largest_fragment)));
  }
  line("requested by live tensors", fmt::format("{} ({} lost to rounding)", format_bytes(t.requested),
                                                format_bytes(static_cast<std::int64_t>(t.allocated) - static_cast<std::int64_t>(t.requested))));
  line("largest inactive block", format_bytes(t.largest_inactive_block));
  line("segments / blocks", fmt::format("{} / {}", t.segments, t.blocks));
  line("peak allocated (trace)", peak_text(t.peak_allocated, t.peak_certainty == PeakCertainty::AtWindowStart, t.peak_certainty));
  line("peak reserved (trace)", peak_text(t.peak_reserved, t.reserved_peak_at_window_start, t.peak_certainty));
}

// Whether a device listed in the totals holds nothing at all: no segment, and a trace that never
// has a byte live (a device whose trace is only the snapshot marker).
bool holds_nothing(const Totals& t) {
  return t.reserved == 0 && t.allocated == 0 && t.peak_allocated.value_or(0) == 0 && t.peak_reserved.value_or(0) == 0;
}

// One section per device when several hold memory; a device that holds nothing is one line.
void device_totals_sections(std::string& out, const std::vector<DeviceTotals>& devices) {
  const auto used = std::count_if(devices.begin(), devices.end(), [](const DeviceTotals& d) { return !holds_nothing(d.totals); });
  for (const DeviceTotals& d : devices) {
    if (holds_nothing(d.totals)) {
      out += fmt::format("  device {} holds nothing: no segment, and no byte live in its trace\n", d.device);
    }
  }
  if (used < 2) return;
  for (const DeviceTotals& d : devices) {
    if (holds_nothing(d.totals)) continue;
    out += fmt::format("\nDevice {}\n", d.device);
    totals_section(out, d.totals);
  }
}

// The no-stack bucket says what the trace proves about where its blocks came from.
std::string no_stack_label(const Site& s) {
  const std::uint64_t before = s.bytes_by_provenance[static_cast<std::size_t>(Provenance::BeforeWindow)];
  return before == s.bytes ? "[no stack recorded: allocated before recording]" : "[no stack recorded]";
}

// A site's device, as a column when the snapshot has several devices.
std::string device_column(const Site& s, bool show_device) {
  if (!show_device) return "";
  return s.device >= 0 ? fmt::format("dev {}  ", s.device) : std::string("dev -  ");
}

// The kinds a site holds besides its own ("      also parameter 475.34 MiB in 316 blocks").
std::string other_kinds_line(const Site& s, WrapText wrap) {
  if (s.other_kinds.empty()) return "";
  std::string kinds;
  for (const SiteKind& k : s.other_kinds) {
    kinds += fmt::format("{}{} {} in {} block{}", kinds.empty() ? "" : ", ", category_name(k.kind), format_bytes(k.bytes), k.blocks,
                         plural_s(k.blocks));
  }
  return wrap(kinds, "      also ", "           ");
}

void sites_section(std::string& out, const std::vector<Site>& sites, std::size_t top, bool show_device) {
  if (sites.empty()) {
    out += "  (no live allocations)\n";
    return;
  }
  for (std::size_t i = 0; i < sites.size() && i < top; ++i) {
    const Site& s = sites[i];
    out += fmt::format("  {:>2}. {:>10}  {:5.1f}%  {:>5} blocks  {}{}\n", i + 1, format_bytes(s.bytes), s.percent, s.blocks,
                       device_column(s, show_device), s.no_stack ? no_stack_label(s) : category_name(s.category));
    if (s.no_stack) continue;
    if (!s.group.empty()) {
      out += group_row_line(s, wrap) + site_tag_lines(s, wrap);
      continue;
    }
    out += wrap(s.site + " in " + s.function + (s.via_forward_frames ? " (forward line of a backward allocation, from forward_frames)" : ""),
                "      at ", "         ");
    out += site_tag_lines(s, wrap);
    out += site_what_lines(s, wrap);
    out += other_kinds_line(s, wrap);
    for (std::size_t k = 1; k < s.call_path.size() && k < 5; ++k) out += wrap(package_relative(s.call_path[k]), "      from ", "           ");
  }
  if (sites.size() > top) out += fmt::format("  ... {} more sites (--top N shows more)\n", sites.size() - top);
}

// One line for a site in a list of what was live at a moment: bytes, percent, file:line (function).
std::string brief_site_line(const char* prefix, const Site& s) {
  return fmt::format("{}{:>10}  {:5.1f}%  {}\n", prefix, format_bytes(s.bytes), s.percent,
                     s.no_stack ? "[no stack recorded]" : s.site + " (" + s.function + ")");
}


// The OOMs a device does not study one by one (from `first`, consecutive): one line that counts
// them and says how to look at any of them. Returns the position after them.
std::size_t not_studied_ooms_line(std::string& out, const Analysis& a, std::size_t first) {
  const OomEvent& e = a.ooms[first].event;
  std::size_t end = first;
  std::uint64_t smallest = e.size, largest = e.size;
  for (; end < a.ooms.size() && !a.ooms[end].studied && a.ooms[end].event.device == e.device; ++end) {
    smallest = std::min(smallest, a.ooms[end].event.size);
    largest = std::max(largest, a.ooms[end].event.size);
  }
  const std::string sizes = smallest == largest ? format_bytes(smallest) : fmt::format("{} to {}", format_bytes(smallest), format_bytes(largest));
  out += wrap(fmt::format("{} more OOMs on device {} (#{} to #{}, requests of {}) are counted, not studied one by one: memsnap "
                          "studies the first {} and the last {} of a device; `memsnap at --oom {}` shows the first of them "
                          "(numbered from 0).",
                          end - first, e.device, first + 1, end, sizes, kStudiedOomsPerDevice / 2, kStudiedOomsPerDevice / 2, first),
              "  ", "    ");
  return end;
}
void timeline_section(std::string& out, const Analysis& a) {
  if (a.trace.analyzed == 0) {
    out += no_device_history_text(a);
    return;
  }
  out += fmt::format("  {} event{} analyzed ({} in the file, {} dropped)\n", a.trace.analyzed, plural_s(a.trace.analyzed),
                     a.trace.events, a.trace.dropped);
  for (const auto& t : a.timelines) {
    out += wrap(fmt::format("device {}: {} alloc/free pair{} completed, {} free{} of memory allocated before the "
                            "window, {} free request{} still pending ({}), {}",
                            t.device, t.matched_frees, plural_s(t.matched_frees), t.frees_before_window, plural_s(t.frees_before_window),
                            t.pending_requests, plural_s(t.pending_requests), format_bytes(t.pending_bytes), timeline_peak_text(t)),
                "  ", "    ");
    std::size_t shown = 0;
    for (const auto& m : t.steps) {
      if (shown++ == 6) {
        out += fmt::format("    ... {} annotations in all\n", t.steps.size());
        break;
      }
      out += fmt::format("    {} {}: {} live\n", m.name, m.stage, format_bytes(m.live_bytes));
    }
  }
  for (const DeviceSteps& d : a.diagnosis.steps) {
    if (d.live.empty()) continue;
    std::string live;
    for (std::size_t i = 0; i < d.live.size(); ++i) {
      if (d.live.size() > 8 && i == 4) {
        live += " ...";
        i = d.live.size() - 3;
      }
      live += (i ? ", " : "") + format_bytes(d.live[i]);
    }
    out += wrap(fmt::format("device {}: {} steps found from {} ({}); live at the step boundaries: {}", d.device,
                            d.boundaries - 1, step_source_name(d.source), d.marker, live),
                "  ", "    ");
  }
  for (std::size_t k = 0; k < a.ooms.size(); ++k) {
    const OomAnalysis& o = a.ooms[k];
    if (!o.studied) {
      k = not_studied_ooms_line(out, a, k) - 1;
      continue;
    }
    out += wrap(fmt::format("OOM on device {}: {} requested, {} free on the device; verdict {}. {}", o.event.device,
                            format_bytes(o.event.size), format_bytes(o.event.device_free), oom_verdict_name(o.verdict), o.reason),
                "  ", "    ");
    for (std::size_t i = 0; i < o.sites_before.size() && i < 3; ++i) out += brief_site_line("    held then: ", o.sites_before[i]);
  }
  // The default view's device: the OOM device, else the highest peak (analysis/view_device.h).
  const bool other_device = a.view.device >= 0 && a.view.device != a.peak_device;
  const std::int64_t device = other_device ? a.view.device : a.peak_device;
  const std::vector<Site>& peak_sites = other_device ? a.sites_at_view_peak : a.sites_at_peak;
  const bool peak_shown = std::any_of(a.timelines.begin(), a.timelines.end(), [&](const DeviceTimeline& t) {
    return t.device == device && peak_certainty(t) != PeakCertainty::TooShort;
  });
  if (!peak_sites.empty() && peak_shown) {
    out += fmt::format("  Live at the peak ({}):\n", a.timelines.size() > 1 && a.view.device == device ? view_device_text(a.view)
                                                                                                       : fmt::format("device {}", device));
    for (std::size_t i = 0; i < peak_sites.size() && i < 5; ++i) out += brief_site_line("    ", peak_sites[i]);
  }
}

void diagnosis_section(std::string& out, const Analysis& a) {
  if (a.patterns.empty()) {
    out += "  No problem pattern is supported by this snapshot's evidence.\n";
    return;
  }
  for (const auto& p : a.patterns) {
    out += wrap(p.summary.text(), fmt::format("  [{}] {} ({} confidence): ", name_of(p.id), name_of(p.verdict), name_of(p.confidence)),
                "    ");
    for (const auto& e : p.evidence) out += wrap(e.text(), "    - ", "      ");
  }
}

}  // namespace

std::string text_report(const ReportInput& in) {
  const LoadedSnapshot& loaded = in.loaded;
  const Analysis& a = in.analysis;
  std::string out;
  out += wrap(a.headline, "", "");
  out += fmt::format("\n{} ({}, {})\n", loaded.input.path, format_name(loaded.input.format), format_bytes(loaded.input.bytes));
  out += wrap("allocator settings: " + allocator_settings_line(loaded.snapshot.settings), "", "  ");
  if (in.ranks) out += ranks_text(*in.ranks);
  if (in.diff) out += diff_text(*in.diff, a.options.top);
  out += "\nTotals\n";
  totals_section(out, a.totals.overall);
  device_totals_sections(out, a.totals.devices);
  memory_pools_text(out, a.memory_pools);
  budget_text_section(out, a);
  out += "\nWhere the live memory was allocated\n";
  sites_section(out, a.sites, a.options.top, a.totals.devices.size() > 1);
  labels_text(out, a.labels);
  out += "\nFree timeline\n";
  timeline_section(out, a);
  host_memory_text(out, a.host, a.options.top);
  if (const auto lines = phase_text_lines(a); !lines.empty()) {
    out += "\nPhases\n";
    for (const auto& l : lines) out += wrap(l, "  ", l.starts_with("  ") ? "      " : "    ");
  }
  out += "\nDiagnosis\n";
  diagnosis_section(out, a);
  out += "\nNext steps\n";
  for (const auto& s : a.next_steps) out += wrap(s.text(), "  - ", "    ");
  if (!a.uncertainties.empty()) {
    out += "\nWhat this snapshot cannot tell\n";
    for (const auto& u : a.uncertainties) out += wrap(u.text(), "  - ", "    ");
  }
  return out;
}

namespace {

std::string signed_bytes(std::int64_t v) {
  std::string out(v > 0 ? "+" : v < 0 ? "-" : "");
  out += format_bytes(v < 0 ? -v : v);
  return out;
}

std::string diff_row(const DiffSite& s) {
  std::string row = fmt::format("  {:>11} {:>6} blocks  {:<7} {}", signed_bytes(s.delta_bytes),
                                fmt::format("{}{}", s.delta_blocks > 0 ? "+" : "", s.delta_blocks), name_of(s.status),
                                s.no_stack ? s.site : s.site + " (" + s.function + ")");
  if (s.verdict != DiffVerdict::None) row += fmt::format("  {}: {}", name_of(s.verdict), name_of(*s.pattern));
  return row;
}

}  // namespace


// Step i of one run against step i of the other: each step's highest live bytes, and the growth.
std::string step_aligned_text(const StepAlignedDiff& a) {
  std::string steps;
  for (std::size_t i = 0; i < a.steps && i < 6; ++i) {
    steps += fmt::format("{}{} -> {}", i ? ", " : "", format_bytes(static_cast<std::uint64_t>(std::max<std::int64_t>(0, a.peak_before[i]))),
                         format_bytes(static_cast<std::uint64_t>(std::max<std::int64_t>(0, a.peak_after[i]))));
  }
  if (a.steps > 6) steps += fmt::format(", ... ({} steps)", a.steps);
  return wrap(fmt::format("Step against step ({} steps; device {} against device {}): each step's peak {}; the later run's step "
                          "peaks are {} (median); live memory grew {} over the earlier run's steps and {} over the later's",
                          a.steps, a.device_before, a.device_after, steps, signed_bytes(a.median_delta), signed_bytes(a.growth_before),
                          signed_bytes(a.growth_after)),
              "  ", "    ");
}

std::string diff_text(const DiffReport& d, std::size_t top) {
  std::string out = "\nDiff against the earlier snapshot\n";
  out += wrap(fmt::format("{} -> {}{}{}", d.before_path, d.after_path,
                          d.steps_between ? fmt::format(", {} steps apart", *d.steps_between) : "",
                          d.seconds_between && *d.seconds_between >= 0.05 ? fmt::format(", {:.1f} s apart", *d.seconds_between) : ""),
              "  ", "    ");
  auto delta = [](std::uint64_t a, std::uint64_t b) { return signed_bytes(static_cast<std::int64_t>(b) - static_cast<std::int64_t>(a)); };
  out += wrap(fmt::format("reserved {} ({}), allocated {} ({}), inactive {} ({})", format_bytes(d.after.reserved),
                          delta(d.before.reserved, d.after.reserved), format_bytes(d.after.allocated),
                          delta(d.before.allocated, d.after.allocated), format_bytes(d.after.inactive), delta(d.before.inactive, d.after.inactive)),
              "  ", "    ");
  if (d.peak_before && d.peak_after) {
    out += wrap(fmt::format("peak allocated {} ({}; {} in the earlier)", format_bytes(*d.peak_after), signed_bytes(saturating_sub(*d.peak_after, *d.peak_before)),
                            format_bytes(*d.peak_before)),
                "  ", "    ");
  }
  if (d.relation == DiffRelation::TwoRuns) out += wrap("two runs, not two points of one run: " + d.relation_evidence, "  ", "    ");
  for (const RootChange& r : d.roots) {
    out += wrap(fmt::format("files under {} in the earlier are matched with the same files under {} in the later ({} file{})", r.before, r.after,
                            r.files, plural_s(r.files)),
                "  ", "    ");
  }
  for (const SettingChange& c : d.settings) {
    out += wrap(fmt::format("setting {}: {} -> {}", c.key, c.before.empty() ? "(absent)" : c.before, c.after.empty() ? "(absent)" : c.after), "  ", "    ");
  }
  if (!d.kinds.empty()) {
    out += fmt::format("  By kind{}:\n", d.kinds_at_peak ? ", peak against peak" : ", live at the end");
    for (const KindDelta& k : d.kinds) {
      out += wrap(fmt::format("{:>12}  {:<16} {} -> {}{}", signed_bytes(k.delta), category_name(k.category), format_bytes(k.before), format_bytes(k.after),
                              k.top_site.empty() ? "" : fmt::format(", largest at {} ({}) {}", k.top_site, k.top_function, signed_bytes(k.top_site_delta))),
                  "  ", "                ");
    }
  }
  if (d.steps) out += step_aligned_text(*d.steps);
  std::size_t shown = 0;
  out += "  Sites by growth in live bytes:\n";
  for (const DiffSite& s : d.sites) {
    if (s.status == DiffStatus::Same || s.delta_bytes <= 0 || shown == top) continue;
    out += diff_row(s) + "\n";
    ++shown;
  }
  if (shown == 0) out += "  (no site grew)\n";
  std::size_t down = 0;
  for (auto it = d.sites.rbegin(); it != d.sites.rend() && down < 3; ++it) {
    if (it->delta_bytes >= 0) break;
    if (down++ == 0) out += "  Largest decreases:\n";
    out += diff_row(*it) + "\n";
  }
  for (const auto& w : d.warnings) out += wrap(w, "  warning: ", "    ");
  return out;
}

std::string ranks_text(const RankReport& r) {
  std::string out = "\nRanks\n";
  out += wrap(fmt::format("{} snapshots in {}; the sections below describe rank {}, the one with the highest {}", r.ranks.size(),
                          r.directory, r.ranks[r.body].rank, metric_label(r.metric)),
              "  ", "  ");
  out += fmt::format("  {:>4} {:>11} {:>11} {:>11} {:>11} {:>4}  {}\n", "rank", "peak", "reserved", "allocated", "inactive", "OOM",
                     "top site");
  for (const RankResult& x : r.ranks) {
    const Totals& t = x.analysis.totals.overall;
    const bool outlier = std::any_of(r.outliers.begin(), r.outliers.end(), [&](const RankOutlier& o) { return o.rank == x.rank; });
    std::string top = "-";
    if (!x.analysis.sites.empty()) {
      const Site& s = x.analysis.sites.front();
      const std::string file = base_name(s.file);
      top = s.no_stack ? s.site : fmt::format("{}:{} ({:.0f}%)", file, s.line, s.percent);
    }
    out += fmt::format("  {:>4} {:>11} {:>11} {:>11} {:>11} {:>4}  {}{}\n", x.rank,
                       t.peak_allocated ? format_bytes(*t.peak_allocated) : "unknown", format_bytes(t.reserved), format_bytes(t.allocated), format_bytes(t.inactive),
                       x.oom_events, outlier ? "* " : "", top);
  }
  if (r.outliers.empty()) {
    out += wrap(fmt::format("No outlier rank: every rank's {} is within 10% (or 64 MiB) of the median {}.",
                            metric_label(r.metric), format_bytes(r.median)),
                "  ", "    ");
  } else if (r.spread == RankSpread::Uneven) {
    out += wrap(fmt::format("The ranks differ throughout (no rank is near a common level): each is compared with rank {}, the lowest.",
                            r.outliers.front().reference_rank),
                "  ", "    ");
  }
  for (const Sentence& w : r.warnings) out += wrap(w.text(), "  warning: ", "    ");
  for (const RankOutlier& o : r.outliers) {
    out += wrap(fmt::format("rank {} stands out: {}", o.rank, o.reason), "  * ", "    ");
    for (const DiffSite& s : o.sites) {
      out += wrap(fmt::format("{} in {} blocks at {} ({}) against rank {}", signed_bytes(s.delta_bytes),
                              fmt::format("{}{}", s.delta_blocks > 0 ? "+" : "", s.delta_blocks), s.site, s.function, o.reference_rank),
                  "      ", "        ");
    }
  }
  for (const auto& s : r.skipped) out += wrap(s, "  skipped: ", "    ");
  return out;
}


}  // namespace memsnap
