// The conclude stage (conclude.h): headline, next steps, uncertainties and final site categories
// for one snapshot, a diff and a rank directory, from the typed findings.
#include "analysis/conclude.h"
#include "base/base_name.h"
#include "analysis/site_what.h"

#include <algorithm>
#include <fmt/format.h>

#include "analysis/patterns.h"
#include "base/checked.h"
#include "base/format_bytes.h"
#include "base/plural.h"

namespace memsnap {
namespace {

const Pattern* find_pattern(const std::vector<Pattern>& patterns, PatternId id) {
  for (const auto& p : patterns) {
    if (p.id == id) return &p;
  }
  return nullptr;
}

std::string largest_site_headline(const Analysis& a) {
  const Totals& t = a.totals.overall;
  if (a.sites.empty() || t.allocated == 0) {
    return fmt::format("No live tensor memory in this snapshot: {} reserved, {} inactive (cached).", format_bytes(t.reserved),
                       format_bytes(t.inactive));
  }
  // The largest attributed site leads; memory without a stack is named after it.
  const auto attributed = std::find_if(a.sites.begin(), a.sites.end(), [](const Site& site) { return !site.no_stack; });
  const auto unattributed = std::find_if(a.sites.begin(), a.sites.end(), [](const Site& site) { return site.no_stack; });
  const std::string no_stack_note = unattributed != a.sites.end() && unattributed->percent >= 10
                                        ? fmt::format(" ({:.0f}% of live memory has no recorded stack)", unattributed->percent)
                                        : "";
  if (attributed == a.sites.end()) {
    return fmt::format("All {} of live memory ({} blocks) has no recorded stack, so it cannot be attributed.", format_bytes(t.allocated),
                       unattributed->blocks);
  }
  const Site& top = *attributed;
  const bool optimizer = top.category == Category::OptimizerState && a.diagnosis.optimizer_spike &&
                         a.diagnosis.optimizer_spike->first_step_in_window;
  return fmt::format("{:.0f}% of live memory ({} of {}) is {}: {}{}{}.", top.percent, format_bytes(top.bytes),
                     format_bytes(t.allocated), category_name(top.category), site_phrase(top),
                     optimizer ? ": optimizer state from the first optimizer.step(), expected retention, not a leak" : "", no_stack_note);
}

// A site by the user's line: a C++ or ??:0 site is named by the Python frame that called it;
// nothing for a site without a stack or without such a caller.
std::optional<std::string> user_place(const Site& site) {
  if (site.no_stack) return std::nullopt;
  if (site.kind != FrameKind::Native) return site_phrase(site);
  if (site.call_path.size() < 2) return std::nullopt;
  const std::string& caller = site.call_path[1];  // "file:line:function"
  const auto colon = caller.rfind(':');
  return caller.substr(0, colon) + " (" + caller.substr(colon + 1) + ", calling " + site_phrase(site) + ")";
}

// At the peak, one or two sites of a tensor or two each, every one at least a quarter of the peak
// and together at least half of it: what an expert names first, whatever their kind (" 2
// tensors hold 80% of it: 6.85 GiB from ... and 6.85 GiB from ...", " 3 tensors hold 79% of it:
// 2.78 GiB (2 tensors) from ... and 1.39 GiB from ...").
constexpr std::uint64_t kDominantShare = 4;  // each: at least 1/4 of the peak
std::string dominant_tensors_clause(const Analysis& a, const MemoryBudget& b) {
  if (b.moment != BudgetMoment::Peak || b.device != a.peak_device || b.live_bytes == 0) return "";
  std::vector<std::pair<const Site*, std::string>> named;
  std::uint64_t bytes = 0, blocks = 0;
  for (const Site& site : a.sites_at_peak) {
    if (named.size() == 2 || site.bytes * kDominantShare < b.live_bytes) break;
    const auto where = user_place(site);
    if (!where || site.blocks > 2) return "";
    named.emplace_back(&site, *where);
    bytes += site.bytes;
    blocks += site.blocks;
  }
  if (named.empty() || 2 * bytes < b.live_bytes) return "";
  std::string places;
  for (const auto& [site, where] : named) {
    // Of two sites, one that holds two tensors says so: the count above is of tensors, not lines.
    const std::string count = named.size() > 1 && site->blocks > 1 ? fmt::format(" ({} tensors)", site->blocks) : "";
    places += fmt::format("{}{}{} from {}", places.empty() ? "" : " and ", format_bytes(site->bytes), count, where);
  }
  return fmt::format(" {} hold{} {:.0f}% of it: {}.", blocks == 1 ? "One tensor" : fmt::format("{} tensors", blocks), blocks == 1 ? "s" : "",
                     100.0 * double(bytes) / double(b.live_bytes), places);
}

// Whether the budget of `site`'s device at `moment` found the site's blocks to match the
// parameters one to one (MemoryBudget::parameter_shaped_sites).
bool parameter_shaped(const Analysis& a, const Site& site, BudgetMoment moment) {
  return std::any_of(a.budgets.begin(), a.budgets.end(), [&](const MemoryBudget& b) {
    return b.device == site.device && b.moment == moment &&
           std::find(b.parameter_shaped_sites.begin(), b.parameter_shaped_sites.end(), site.site) != b.parameter_shaped_sites.end();
  });
}

// The sites live at the budget's moment: the peak device's sites at its peak, a device's sites at
// the end; none before an OOM (the sites of that moment are not kept).
std::vector<const Site*> sites_of(const Analysis& a, const MemoryBudget& b) {
  std::vector<const Site*> out;
  if (b.moment == BudgetMoment::Peak && b.device == a.peak_device) {
    for (const Site& site : a.sites_at_peak) out.push_back(&site);
  } else if (b.moment == BudgetMoment::End) {
    for (const Site& site : a.sites) {
      if (site.device == b.device) out.push_back(&site);
    }
  }
  return out;
}

// When the unknown kind or the activations lead the budget with a third of it or more, the user's
// lines that hold most of that kind: one or two sites of that kind with a stack, each at least an
// eighth of the kind's bytes and together at least half (" Most of the unknown kind comes from two
// lines: 477.75 MiB live at adam_forward.py:168 (<listcomp>), one tensor per parameter, and 294.56
// MiB live at ..."). A site's bytes are what lives at its line, whatever their kinds (a cuBLAS
// workspace at an activation's line), so the clause says "live at", not "of that kind". The other
// kinds say what they are by themselves (one tensor per parameter, a cache).
constexpr std::uint64_t kLeadShare = 3;      // a kind (or a finding, workload_lead) leads: at least 1/3 of the moment
constexpr std::uint64_t kKindSiteShare = 8;  // each named site: at least 1/8 of the kind's bytes
std::string leading_kind_sites_clause(const Analysis& a, const MemoryBudget& b) {
  const auto kinds = kinds_largest_first(b);
  if (kinds.empty() || kinds.front().second * kLeadShare < b.live_bytes) return "";
  const Category kind = kinds.front().first;
  if (kind != Category::Unknown && kind != Category::Activation) return "";
  const std::uint64_t kind_bytes = kinds.front().second;
  std::string parts;
  std::uint64_t named = 0;
  int count = 0;
  for (const Site* site : sites_of(a, b)) {
    if (count == 2 || site->bytes * kKindSiteShare < kind_bytes) break;
    if (site->category != kind) continue;
    const auto where = user_place(*site);
    if (!where) continue;
    parts += fmt::format("{}{} live at {}{}", count == 0 ? "" : " and ", format_bytes(site->bytes), *where,
                         parameter_shaped(a, *site, b.moment) ? ", one tensor per parameter," : "");
    named += site->bytes;
    ++count;
  }
  if (count == 0 || 2 * named < kind_bytes) return "";
  if (parts.back() == ',') parts.pop_back();
  return fmt::format(" Most of {} from {}: {}.", kind == Category::Unknown ? "the unknown kind comes" : "the activations come",
                     count == 1 ? "one line" : "two lines", parts);
}

// What removes attention's score matrices, for the headline: scaled_dot_product_attention, or, when
// the scores already come from its math path (the finding's fix says so), one of its fused backends.
std::string fused_attention_text(const Pattern& attention) {
  const bool math_path = !attention.fix.empty() && attention.fix.front().id == FixId::FusedSdpaBackend;
  return math_path ? "a fused scaled_dot_product_attention backend (its math path runs now)"
                   : "torch.nn.functional.scaled_dot_product_attention";
}

// When a workload finding that says what the peak's memory is holds a third of the peak or more,
// the budget's kinds (activations, temporaries, unknown) do not say it: that finding leads the
// headline, before the budget's sentence. Attention's score matrices (and their gradients in
// backward), and activations kept for a backward that never runs; the larger leads.
std::string workload_lead(const Analysis& a, const MemoryBudget& b) {
  if (b.moment != BudgetMoment::Peak) return "";
  const Pattern* lead = nullptr;
  for (PatternId id : {PatternId::AttentionScores, PatternId::ActivationsWithoutBackward}) {
    const Pattern* p = find_pattern(a.patterns, id);
    if (!p || !p->saving_bytes || *p->saving_bytes * kLeadShare < b.live_bytes) continue;
    if (!lead || *p->saving_bytes > *lead->saving_bytes) lead = p;
  }
  if (!lead) return "";
  if (lead->id == PatternId::AttentionScores) {
    return lead->summary.text() + "; " + fused_attention_text(*lead) + " would not materialize them. ";
  }
  // Low confidence: gradients and optimizer state are live, so the run trained and a backward may
  // follow the dump (activations_without_backward's evidence says so).
  return lead->summary.text() + (lead->confidence == Confidence::Low ? "; if a backward does follow after the dump (the run trained before "
                                                                       "the recording), it needs these activations. "
                                                                     : ". ");
}

// The peak's own allocation is an activation run out of place beside its input
// (out_of_place_activation): what in place would take off the peak, after the budget's sentence.
std::string out_of_place_clause(const Analysis& a, const MemoryBudget& b) {
  const Pattern* p = find_pattern(a.patterns, PatternId::OutOfPlaceActivation);
  if (b.moment != BudgetMoment::Peak || b.device != a.peak_device || b.live_bytes == 0 || !p || !p->saving_bytes) return "";
  return fmt::format(" {}; in place, the peak is {} ({:.0f}%) lower.", p->summary.text(), format_bytes(*p->saving_bytes),
                     100.0 * double(*p->saving_bytes) / double(b.live_bytes));
}

// With no problem pattern, the headline says what the memory is: the main budget in one sentence.
std::string budget_headline(const Analysis& a) {
  const MemoryBudget* b = main_budget(a.budgets);
  if (!b) return largest_site_headline(a);
  std::string sentence = budget_sentence(*b);
  if (a.diagnosis.optimizer_spike && a.diagnosis.optimizer_spike->first_step_in_window) {
    sentence = sentence.substr(0, sentence.size() - 1) + "; the optimizer state is from the first optimizer.step(): expected retention, not a leak.";
  }
  const std::string tensors = dominant_tensors_clause(a, *b);
  sentence = workload_lead(a, *b) + sentence + (tensors.empty() ? leading_kind_sites_clause(a, *b) : tensors) + out_of_place_clause(a, *b);
  if (const Pattern* p = find_pattern(a.patterns, PatternId::TrainingStateInEvaluation); p && p->saving_bytes) {
    const std::uint64_t peak = b->moment == BudgetMoment::Peak ? b->live_bytes : 0;
    return fmt::format("{} The peak is in an evaluation with the training state still resident: {} of gradients and optimizer "
                       "state{} that the forward does not use; free it if no training follows.",
                       sentence, format_bytes(*p->saving_bytes),
                       peak > 0 ? fmt::format(" ({:.0f}% of the peak)", 100.0 * double(*p->saving_bytes) / double(peak)) : "");
  }
  return sentence;
}

// The device imbalance when the OOM happened on the heaviest device: balancing the devices is
// the fix before a smaller batch.
const Pattern* imbalance_behind_oom(const Analysis& a) {
  const Pattern* p = find_pattern(a.patterns, PatternId::DeviceImbalance);
  if (!p || a.ooms.empty() || a.ooms.front().event.device != a.peak_device) return nullptr;
  return p;
}

// A training forward that the OOM cut short, holding the activations it kept for its backward
// (activation_pressure's cut_by_oom): what filled the device, said before the capacity sentence.
const ActivationPressure* activations_held_at_oom(const Analysis& a) {
  const auto& held = a.diagnosis.activation;
  if (!held || !held->cut_by_oom || held->peak <= 0 || !find_pattern(a.patterns, PatternId::ActivationPressure)) return nullptr;
  return &*held;
}

// The attention_scores finding when the activations that dominate the peak are largely attention's
// score matrices: its fix saves at least half of what checkpointing would, and unlike
// checkpointing costs no recompute (fused attention is faster too), so it comes first.
const Pattern* attention_before_checkpointing(const Analysis& a) {
  const Pattern* pressure = find_pattern(a.patterns, PatternId::ActivationPressure);
  const Pattern* attention = find_pattern(a.patterns, PatternId::AttentionScores);
  if (!pressure || !attention || !pressure->saving_bytes || !attention->saving_bytes) return nullptr;
  return 2 * *attention->saving_bytes >= *pressure->saving_bytes ? attention : nullptr;
}

std::string headline(const Analysis& a) {
  for (const auto& p : a.patterns) {
    if (p.id == PatternId::Fragmentation && p.verdict == Verdict::Problem) return "Out of memory from fragmentation: " + p.summary.text() + ".";
    if (p.id == PatternId::Capacity) {
      const bool in_optimizer = a.diagnosis.optimizer_spike && a.diagnosis.optimizer_spike->oom;
      if (in_optimizer) {
        return "Out of memory at capacity inside optimizer.step(): " + p.summary.text() + "; the optimizer state is expected, not a leak.";
      }
      if (const Pattern* imbalance = imbalance_behind_oom(a)) {
        return fmt::format("Out of memory at capacity on the heaviest device: {}; {}: balance the devices before shrinking the batch.",
                           p.summary.text(), imbalance->summary.text());
      }
      if (const ActivationPressure* held = activations_held_at_oom(a)) {
        return fmt::format("Out of memory at capacity in the forward pass, whose peak held {} of activations for its backward "
                           "({:.0f}% of the {}): {}.",
                           format_bytes(held->freeable), 100.0 * double(held->freeable) / double(held->peak),
                           format_bytes(static_cast<std::uint64_t>(held->peak)), p.summary.text());
      }
      return "Out of memory at capacity: " + p.summary.text() + ".";
    }
  }
  for (PatternId id : {PatternId::RetainedAutogradGraph, PatternId::GrowingContainer}) {
    if (const Pattern* p = find_pattern(a.patterns, id)) return "Leak: " + p->summary.text() + ".";
  }
  for (PatternId id : {PatternId::ReferenceCycles, PatternId::ActivationPressure, PatternId::ReplicatedGradients}) {
    const Pattern* p = find_pattern(a.patterns, id);
    if (!p) continue;
    if (const Pattern* attention = id == PatternId::ActivationPressure ? attention_before_checkpointing(a) : nullptr) {
      return fmt::format("{}. Try {} first: it removes {} of attention's score-sized tensors (scores, softmax outputs, their "
                         "gradients) without recompute.",
                         p->summary.text(), fused_attention_text(*attention), format_bytes(*attention->saving_bytes));
    }
    return p->summary.text() + ".";
  }
  return budget_headline(a);
}

// The run's peak (the highest of the devices'), or live memory when no trace shows one.
std::uint64_t run_peak(const Analysis& a) {
  std::int64_t peak = 0;
  for (const DeviceTimeline& t : a.timelines) {
    if (t.peak_allocated && peak_certainty(t) != PeakCertainty::TooShort) peak = std::max(peak, *t.peak_allocated);
  }
  return peak > 0 ? static_cast<std::uint64_t>(peak) : a.totals.overall.allocated;
}

// The trace shows an optimizer step: a phase, steps marked by it, or optimizer state found.
bool optimizer_step_seen(const Analysis& a) {
  for (const DevicePhases& d : a.phases) {
    if (d.has(Phase::OptimizerStep)) return true;
  }
  for (const DeviceSteps& d : a.diagnosis.steps) {
    if (d.source == StepSource::OptimizerStep || d.source == StepSource::OptimizerTrace) return true;
  }
  return a.diagnosis.optimizer_spike.has_value();
}

// Patterns whose saving is peak memory (the others save reserved or cached bytes).
bool saves_peak(PatternId id) {
  switch (id) {
    case PatternId::Fragmentation:
    case PatternId::Capacity:
    case PatternId::CachedMemory:
    case PatternId::PendingFrees:
    case PatternId::NonPytorchMemory:
    case PatternId::OptimizerStateSpike: return false;
    default: return true;
  }
}

// A fix fits the workload: sharding only when model state dominates the peak.
bool fix_fits(const Snapshot& s, const Analysis& a, const Fix& f, std::uint64_t peak) {
  if (f.id == FixId::ShardState) return model_state(s).total() * 2 >= peak;
  if (f.id == FixId::Checkpointing) {  // only a training run keeps activations for a backward
    const bool known = std::any_of(a.phases.begin(), a.phases.end(), [](const DevicePhases& d) { return !d.spans.empty(); });
    const bool backward = std::any_of(a.phases.begin(), a.phases.end(), [](const DevicePhases& d) { return d.has(Phase::Backward); });
    return a.diagnosis.activation.has_value() || backward || !known;
  }
  return true;
}

// Leaks and OOM verdicts lead (a device imbalance behind a capacity OOM before them); then the
// patterns by the peak bytes they would save.
std::uint64_t rank_key(const Pattern& p, std::uint64_t peak, bool imbalance_behind_oom) {
  if (p.id == PatternId::DeviceImbalance && imbalance_behind_oom) return UINT64_MAX;
  if (is_leak_pattern(p.id) || ((p.id == PatternId::Capacity || p.id == PatternId::Fragmentation) && p.verdict == Verdict::Problem)) {
    return UINT64_MAX - 1;
  }
  return p.saving_bytes && saves_peak(p.id) ? std::min(*p.saving_bytes, peak) : 0;
}

// A finding that says what to shrink and how much of the peak that saves (activation_pressure,
// attention_scores, device_imbalance, ...).
bool names_a_saving(const Pattern& p) { return p.saving_bytes && *p.saving_bytes > 0 && saves_peak(p.id); }

// A capacity OOM's fixes that hold for any workload: a smaller batch, checkpointing, lower
// precision, sharding. Where a finding names what to shrink, they follow its steps; its pool fixes
// (the OOM inside a CUDA graph's private pool) are about this OOM and keep their place.
bool generic_capacity_fix(PatternId id, const Fix& f) {
  return id == PatternId::Capacity && (f.id == FixId::SmallerBatch || f.id == FixId::Checkpointing || f.id == FixId::LowerPrecision ||
                                       f.id == FixId::ShardState);
}

// A generic fix that a specific one of another finding says better: checkpointing, when
// activation_pressure names the modules to wrap and what it saves.
bool said_better(const Analysis& a, PatternId id, const Fix& f) {
  return id == PatternId::Capacity && f.id == FixId::Checkpointing && find_pattern(a.patterns, PatternId::ActivationPressure);
}

std::vector<NextStep> pattern_steps(const Snapshot& s, const Analysis& a, std::uint64_t peak) {
  std::vector<const Pattern*> order;
  for (const Pattern& p : a.patterns) order.push_back(&p);
  const bool imbalance = imbalance_behind_oom(a) != nullptr;
  std::stable_sort(order.begin(), order.end(),
                   [&](const Pattern* x, const Pattern* y) { return rank_key(*x, peak, imbalance) > rank_key(*y, peak, imbalance); });
  if (const Pattern* attention = attention_before_checkpointing(a)) {  // fused attention before checkpointing
    const auto pressure = std::find_if(order.begin(), order.end(), [](const Pattern* p) { return p->id == PatternId::ActivationPressure; });
    const auto at = std::find(order.begin(), order.end(), attention);
    if (pressure < at) std::rotate(pressure, at, at + 1);
  }
  const bool defer_generic = std::any_of(order.begin(), order.end(), [](const Pattern* p) { return names_a_saving(*p); });
  std::vector<NextStep> out, generic;
  std::size_t after_savings = 0;  // where the deferred generic fixes go: after the last finding that names a saving
  for (const Pattern* p : order) {
    bool first = true;
    for (const auto& f : p->fix) {
      if (!fix_fits(s, a, f, peak) || said_better(a, p->id, f)) continue;
      NextStep step = fix_step(p->id, f);
      if (first && p->saving_bytes && saves_peak(p->id) && peak > 0) {
        step.saving_bytes = std::min(*p->saving_bytes, peak);
        step.peak_bytes = peak;
      }
      first = false;
      (defer_generic && generic_capacity_fix(p->id, f) ? generic : out).push_back(std::move(step));
    }
    // After a saving's steps, and never before the capacity OOM's own (its pool fixes) when it leads.
    if (names_a_saving(*p) || p->id == PatternId::Capacity) after_savings = out.size();
  }
  out.insert(out.begin() + static_cast<std::ptrdiff_t>(after_savings), generic.begin(), generic.end());
  return out;
}

// "look at" a site by the user's line: a C++ or ??:0 site is named by the Python frame that called it.
// A site worth a look holds at least this share of live memory (a 512 B site next to 7 GiB
// without stacks is no lead).
constexpr double kMinLookAtPercent = 1.0;

// When the peak stands this far above what its device holds at the end, the peak's sites are the
// ones to shrink: the look-at steps name them ("at the peak") instead of the end's.
constexpr double kPeakOverEnd = 1.5;

std::optional<NextStep> look_at_step(const Site& site, bool several_devices, const std::string& when, bool per_parameter) {
  // A library workspace (cuBLAS, CUDA graphs) is the library's own and expected: nothing to look at.
  if (site.percent < kMinLookAtPercent || site.category == Category::Workspace) return std::nullopt;
  const auto where = user_place(site);
  if (!where) return std::nullopt;
  return NextStep{NextStepKind::LookAtSite, {}, {},
                  sentence("look at {}: it holds {} {}{} in {} block{} ({}{})", *where, Bytes(site.bytes), when,
                           several_devices && site.device >= 0 ? fmt::format(" on device {}", site.device) : std::string(), site.blocks,
                           plural_s(site.blocks), kind_text(site.category),
                           per_parameter ? "; one tensor per parameter" : ""),
                  {}, 0};
}

// The peak device's peak is kPeakOverEnd times what that device holds at the end, or more.
bool peak_well_above_end(const Analysis& a) {
  if (a.sites_at_peak.empty()) return false;
  for (const DeviceTimeline& t : a.timelines) {
    if (t.device != a.peak_device || !t.peak_allocated || peak_certainty(t) == PeakCertainty::TooShort) continue;
    for (const auto& d : a.totals.devices) {
      if (d.device == t.device) return double(*t.peak_allocated) >= kPeakOverEnd * double(d.totals.allocated);
    }
  }
  return false;
}

std::vector<NextStep> next_steps(const Snapshot& s, const Analysis& a) {
  const std::uint64_t peak = run_peak(a);
  std::vector<NextStep> out = pattern_steps(s, a, peak);
  std::size_t named = 0;
  const bool at_peak = peak_well_above_end(a);
  const std::vector<Site>& sites = at_peak ? a.sites_at_peak : a.sites;
  const bool several_devices = std::any_of(a.sites.begin(), a.sites.end(), [&](const Site& x) { return x.device != a.sites.front().device; });
  const std::string when = !at_peak ? "live" : several_devices ? fmt::format("at device {}'s peak", a.peak_device) : "at the peak";
  for (const Site& site : sites) {
    if (named == 3) break;
    const bool per_parameter = parameter_shaped(a, site, at_peak ? BudgetMoment::Peak : BudgetMoment::End);
    if (auto step = look_at_step(site, several_devices && !at_peak, when, per_parameter)) {
      out.push_back(std::move(*step));
      ++named;
    }
  }
  const Pattern* leak = find_pattern(a.patterns, PatternId::RetainedAutogradGraph);
  if (!leak) leak = find_pattern(a.patterns, PatternId::GrowingContainer);
  const bool optimizer = optimizer_step_seen(a);
  if (a.trace.analyzed == 0) {
    out.push_back(NextStep::said(NextStepKind::CaptureHistory,
                   sentence("capture again with torch.cuda.memory._record_memory_history(max_entries=100000) enabled before the run, so "
                            "frees, peaks and OOMs can be analyzed (`memsnap capture`)")));
  } else if (leak) {
    const bool container = leak->id == PatternId::GrowingContainer;
    out.push_back(NextStep::said(NextStepKind::ConfirmLeakWithDiff,
                   sentence("to confirm the {} with a diff: dump a snapshot at a fixed point of {} now and again at the same point 20 "
                            "or more {} later, then run memsnap EARLY --diff LATER; {} should grow in both bytes and blocks (`memsnap "
                            "capture --diff`)",
                            container ? "leak" : "retained graph",
                            optimizer ? std::string("a step (e.g. right after optimizer.step())") : std::string("an iteration"),
                            optimizer ? "steps" : "iterations",
                            container && !leak->sites.empty() ? leak->sites.front() : std::string("the activation sites above"))));
  } else if (a.ooms.empty() && optimizer) {
    out.push_back(NextStep::said(NextStepKind::DiffIfGrowing,
                   sentence("if memory grows over steps, dump a second snapshot many steps later at the same point of the step (right "
                            "after optimizer.step()) and run memsnap EARLY --diff LATER (`memsnap capture --diff`)")));
  }
  if (out.empty()) {  // nothing found and no stack to name: what would make the memory attributable
    out.push_back(NextStep::said(NextStepKind::CaptureHistory,
                   sentence("no finding to act on and no live memory with a stack: call "
                            "torch.cuda.memory._record_memory_history(max_entries=100000) before the model is created, so its "
                            "parameters and buffers get stacks too (`memsnap capture`)")));
  }
  return out;
}

std::vector<Sentence> uncertainties(const Snapshot& s, const Analysis& a) {
  std::vector<Sentence> out = a.diagnosis.uncertainties;
  if ((!s.has_device_traces_key || a.trace.events == 0) && a.host.events > 0) {
    out.push_back(sentence("device history was not recorded (record_cuda=False): when device memory was freed, its peak and the "
                           "moment of an OOM cannot be known; the pinned host history ({} events) is analyzed on its own",
                           a.host.events));
  } else if (!s.has_device_traces_key || a.trace.events == 0) {
    out.push_back(sentence("the snapshot has no trace history: when memory was freed, the peak and the moment of an OOM cannot be known; "
                           "only the final state is analyzed"));
  }
  if (a.trace.dropped) {
    out.push_back(sentence("{} older trace events were dropped by --max-trace-events; the window covers the newest {}", a.trace.dropped,
                           a.trace.analyzed));
  }
  std::uint64_t before = 0, freed_before = 0;
  for (const auto& tl : a.timelines) {
    before += tl.live_from_before_window;
    freed_before += tl.frees_before_window;
  }
  if (before || freed_before) {
    // "75 live blocks refer", "1 free refers", "4 live blocks and 1 free refer": no count of zero.
    std::string what;
    if (before) what = fmt::format("{} live block{}", before, plural_s(before));
    if (freed_before) what += fmt::format("{}{} free{}", before ? " and " : "", freed_before, plural_s(freed_before));
    const bool one = before + freed_before == 1;
    out.push_back(sentence("the trace starts mid-run (or history was enabled late): {} refer{} to allocations made before the window; "
                           "the peak counts them from the final state",
                           what, std::string(one ? "s" : "")));
  }
  for (const Site& site : a.sites) {
    if (site.no_stack && site.bytes) {
      out.push_back(sentence("{} of live memory ({:.0f}%) in {} block{} has no stack: allocated before history was recorded, "
                             "recorded without context, or from the backward pass without C++ frames",
                             Bytes(site.bytes), site.percent, site.blocks, plural_s(site.blocks)));
    }
  }
  if (std::any_of(s.blocks.begin(), s.blocks.end(), [](const Block& b) { return b.from_history; })) {
    out.push_back(sentence("an old (PyTorch <= 2.0) snapshot: block stacks and requested sizes come from the legacy 'history' field"));
  }
  for (const auto& tl : a.timelines) {
    if (peak_certainty(tl) != PeakCertainty::TooShort) continue;
    out.push_back(sentence("device {}'s trace holds {} event{} and no allocation, too few to show a peak or when memory was allocated; "
                           "history recorded with a ring of {} entr{} (legacy torch.cuda.memory._record_memory_history(True) keeps "
                           "one) would look like this: record again with max_entries=100000",
                           tl.device, tl.events, plural_s(tl.events), tl.events, tl.events == 1 ? "y" : "ies"));
  }
  if (std::any_of(a.timelines.begin(), a.timelines.end(), [](const DeviceTimeline& t) { return peak_certainty(t) != PeakCertainty::TooShort; })) {
    out.push_back(sentence("the peak is in requested bytes (what the trace records), reconstructed backwards from the final state as "
                           "memory_viz does; rounded block sizes can be larger"));
  }
  if (!s.unknown_actions.empty() || !s.unknown_keys.empty()) {
    out.push_back(sentence("the snapshot holds {} unknown trace actions and {} unknown keys (newer PyTorch?); they were ignored",
                           s.unknown_actions.size(), s.unknown_keys.size()));
  }
  for (const auto& v : a.invariant_violations) out.push_back(sentence("inconsistent snapshot: {}", v));
  return out;
}

bool is_diff_capture(const NextStep& s) {
  return s.kind == NextStepKind::ConfirmLeakWithDiff || s.kind == NextStepKind::DiffIfGrowing;
}

}  // namespace

void settle_categories(const std::vector<Pattern>& patterns, std::vector<Site>& sites) {
  for (const Pattern& p : patterns) {
    if (p.id != PatternId::GrowingContainer) continue;
    for (Site& site : sites) {
      if (std::find(p.sites.begin(), p.sites.end(), site.site) != p.sites.end()) site.category = Category::UserContainer;
    }
  }
}

Conclusions conclude(const Snapshot& s, const Analysis& a) { return {headline(a), next_steps(s, a), uncertainties(s, a)}; }

void conclude_diff(const DiffReport& d, Analysis& a) {
  a.headline = diff_headline(d);
  std::vector<NextStep> steps;
  for (const Pattern& dp : d.patterns) {
    for (const auto& f : dp.fix) steps.push_back(fix_step(dp.id, f));
    auto it = std::find_if(a.patterns.begin(), a.patterns.end(), [&](const Pattern& p) { return p.id == dp.id; });
    if (it == a.patterns.end()) {
      a.patterns.insert(a.patterns.begin(), dp);
      continue;
    }
    it->evidence.insert(it->evidence.begin(), dp.evidence.begin(), dp.evidence.end());
    for (auto s = dp.sites.rbegin(); s != dp.sites.rend(); ++s) {
      if (std::find(it->sites.begin(), it->sites.end(), *s) == it->sites.end()) it->sites.insert(it->sites.begin(), *s);
    }
    if (dp.verdict == Verdict::Leak) it->confidence = Confidence::High;
  }
  // The diff's own fixes first, without repeating steps the single-snapshot findings already
  // give, and without the advice to capture a pair: this is the pair.
  for (auto& s : a.next_steps) {
    if (!is_diff_capture(s) && std::find(steps.begin(), steps.end(), s) == steps.end()) steps.push_back(std::move(s));
  }
  a.next_steps = std::move(steps);
  for (auto w = d.warnings.rbegin(); w != d.warnings.rend(); ++w) a.uncertainties.insert(a.uncertainties.begin(), sentence("diff: {}", *w));
}

void conclude_ranks(const RankReport& r, Analysis& body) {
  body.headline = ranks_headline(r);
  body.patterns = r.patterns;
  std::vector<NextStep> steps;
  for (const RankOutlier& o : r.outliers) {
    for (const DiffSite& s : o.sites) {
      steps.push_back(NextStep::said(NextStepKind::LookAtRankSite,
                       sentence("rank {}: look at {} ({}): {} and {} blocks against rank {} ({})", o.rank, s.site, s.function,
                                Bytes(s.delta_bytes, true), fmt::format("{}{}", s.delta_blocks > 0 ? "+" : "", s.delta_blocks),
                                o.reference_rank, category_name(s.category))));
    }
  }
  for (const Pattern& p : r.patterns) {
    for (const auto& f : p.fix) {
      const NextStep step = fix_step(p.id, f);
      if (std::find(steps.begin(), steps.end(), step) == steps.end()) steps.push_back(step);
    }
  }
  // The body's own pattern fixes give way to the patterns across ranks above.
  for (auto& s : body.next_steps) {
    if (s.kind != NextStepKind::Fix && std::find(steps.begin(), steps.end(), s) == steps.end()) steps.push_back(std::move(s));
  }
  body.next_steps = std::move(steps);
  for (const auto& s : r.skipped) body.uncertainties.insert(body.uncertainties.begin(), sentence("skipped {}", s));
  body.uncertainties.insert(body.uncertainties.begin(), r.warnings.begin(), r.warnings.end());
}

namespace {


// "autocast_copy +231.40 MiB (largest at linear.py:15 (forward), +79.16 MiB)", for the kinds that moved most.
std::string kind_changes(const DiffReport& d, std::size_t most) {
  std::string out;
  for (std::size_t i = 0; i < d.kinds.size() && i < most; ++i) {
    const KindDelta& k = d.kinds[i];
    out += fmt::format("{}{} {}", out.empty() ? "" : ", ", category_name(k.category), Bytes(k.delta, true).text());
    if (!k.top_site.empty()) out += fmt::format(" (largest at {} ({}), {})", k.top_site, k.top_function, Bytes(k.top_site_delta, true).text());
  }
  return out;
}

// Two runs (two configurations of one script): peak against peak, by kind.
std::string two_runs_headline(const DiffReport& d) {
  const std::string later = base_name(d.after_path), earlier = base_name(d.before_path);
  std::string what;
  if (d.kinds_at_peak) {
    const std::int64_t delta = saturating_sub(*d.peak_after, *d.peak_before);
    what = fmt::format("{}'s peak is {} {} than {}'s ({} against {})", later, format_bytes(delta < 0 ? -delta : delta), delta >= 0 ? "higher" : "lower",
                       earlier, format_bytes(*d.peak_after), format_bytes(*d.peak_before));
  } else {
    const std::int64_t live = saturating_difference(d.before.allocated, d.after.allocated);
    what = fmt::format("{} holds {} {} live memory than {}", later, format_bytes(live < 0 ? -live : live), live >= 0 ? "more" : "less", earlier);
  }
  const std::string kinds = kind_changes(d, 2);
  return fmt::format("These are two runs, not two points of one run ({}), so they are compared {}: {}{}{}.", d.relation_evidence,
                     d.kinds_at_peak ? "peak against peak" : "at the end", what, kinds.empty() ? "" : ": ", kinds);
}

std::string peak_change(const DiffReport& d) {
  if (!d.peak_before || !d.peak_after) return "";
  return fmt::format(", peak {} ({})", format_bytes(*d.peak_after), Bytes(saturating_sub(*d.peak_after, *d.peak_before), true).text());
}

}  // namespace

std::string diff_headline(const DiffReport& d) {
  if (d.relation == DiffRelation::TwoRuns) return two_runs_headline(d);
  const std::int64_t live = saturating_difference(d.before.allocated, d.after.allocated);
  const std::string change = fmt::format("live memory {} {} (to {}{})", live >= 0 ? "grew by" : "shrank by", format_bytes(live < 0 ? -live : live),
                                         format_bytes(static_cast<std::int64_t>(d.after.allocated)), peak_change(d));
  const DiffSite* top = nullptr;
  for (const DiffSite& s : d.sites) {
    if (s.delta_bytes > 0) {
      top = &s;
      break;
    }
  }
  if (!top) {
    return fmt::format("Between the two snapshots{} {}; no allocation site grew, so nothing leaks between them.", steps_phrase(d), change);
  }
  if (d.stacks_on_neither) {
    return fmt::format("Between the two snapshots{} {} in {} blocks; neither snapshot recorded stacks, so the growth cannot be placed by site "
                       "and no leak verdict is possible (record with _record_memory_history(stacks=\"python\") or \"all\").",
                       steps_phrase(d), change, fmt::format("{}{}", top->delta_blocks > 0 ? "+" : "", top->delta_blocks));
  }
  std::string tail;
  if (top->verdict != DiffVerdict::None) tail = fmt::format(": {} ({})", name_of(top->verdict), name_of(*top->pattern));
  const bool any_leak = std::any_of(d.sites.begin(), d.sites.end(), [](const DiffSite& s) { return is_leak(s.verdict); });
  if (!d.warnings.empty()) tail += "; no leak verdict, because the pair may not be from one run: " + d.warnings.front();
  else if (!any_leak) tail += "; no site grew in both bytes and blocks enough to call it a leak";
  return fmt::format("Between the two snapshots{} {}; the site that grew most is {} ({}): {} in {} blocks{}.", steps_phrase(d), change,
                     top->site, top->function.empty() ? "no function" : top->function, Bytes(top->delta_bytes, true).text(),
                     fmt::format("{}{}", top->delta_blocks > 0 ? "+" : "", top->delta_blocks), tail);
}


// The comparison itself: balanced, uneven, or the ranks that stand out.
static std::string ranks_comparison_headline(const RankReport& r) {
  const Analysis& body = r.ranks[r.body].analysis;
  if (r.ranks.size() == 1) {  // nothing to compare with: the rank's own headline
    return fmt::format("One rank only (rank {}), nothing to compare it with: {}", r.ranks[r.body].rank, body.headline);
  }
  std::size_t lo = 0, hi = 0;
  for (std::size_t i = 0; i < r.ranks.size(); ++i) {
    if (r.ranks[i].metric < r.ranks[lo].metric) lo = i;
    if (r.ranks[i].metric > r.ranks[hi].metric) hi = i;
  }
  if (r.outliers.empty()) {
    return fmt::format("The {} ranks are balanced ({} from {} to {}); rank {}: {}", r.ranks.size(), metric_label(r.metric),
                       format_bytes(r.ranks[lo].metric), format_bytes(r.ranks[hi].metric), r.ranks[r.body].rank, body.headline);
  }
  std::vector<std::int64_t> ranks;
  for (const auto& o : r.outliers) ranks.push_back(o.rank);
  const RankOutlier& o = r.outliers.front();
  std::string why;
  if (!o.sites.empty()) {
    const DiffSite& s = o.sites.front();
    why = fmt::format("; {} ({}) explains {}{} of it against rank {}", s.site, s.function, s.delta_bytes > 0 ? "+" : "-",
                      format_bytes(s.delta_bytes > 0 ? s.delta_bytes : -s.delta_bytes), o.reference_rank);
  }
  if (r.spread == RankSpread::Uneven) {
    return fmt::format("The {} ranks differ throughout, with no common level ({} from {} on rank {} to {} on rank {}); rank {} has {}{}.", r.ranks.size(),
                       metric_label(r.metric), format_bytes(r.ranks[lo].metric), r.ranks[lo].rank, format_bytes(r.ranks[hi].metric),
                       r.ranks[hi].rank, o.rank, o.reason, why);
  }
  return fmt::format("Rank{} {} of {} stand{} out: rank {} has {}{}.", ranks.size() > 1 ? "s" : "", rank_list(ranks), r.ranks.size(),
                     ranks.size() > 1 ? "" : "s", o.rank, o.reason, why);
}


std::string ranks_headline(const RankReport& r) {
  if (r.warnings.empty()) return ranks_comparison_headline(r);
  return ranks_comparison_headline(r) + " Caution: the files may not be ranks of one job (" + r.warnings.front().text() + ").";
}

}  // namespace memsnap
