// The workload-aware patterns, read from the phases (phases.h) at the peak: stale gradients kept
// through the forward (zero_grad after it), saved activations with no backward, forward tensors
// still live after their backward finished, out-of-place temporaries of the optimizer step at the
// peak, and attention scores (with their gradients in backward) dominating the peak; for the peak's
// device they also run out_of_place_activation (patterns_inplace.cpp). Each estimates the peak
// bytes it would save.
#include <algorithm>
#include <cctype>
#include <fmt/format.h>
#include <map>
#include <ranges>
#include <unordered_map>

#include "analysis/patterns_internal.h"
#include "analysis/site_what.h"
#include "base/units.h"
#include "base/plural.h"

namespace memsnap::patterns_detail {
namespace {

// A finding needs at least this much of the peak, and this share of it.
constexpr std::uint64_t kMinWorkloadBytes = 64 * kMiB;
constexpr std::size_t kMinWorkloadPercent = 5;
// Saved activations with no backward: bytes and share of the peak, and how often a site repeats
// (once per layer) for its tensors to count as saved for a backward.
constexpr std::uint64_t kMinSavedBytes = 256 * kMiB;
constexpr std::size_t kMinSavedPercent = 10;
constexpr std::size_t kMinRepeats = 3;
constexpr std::size_t kMinSavedSites = 3;
// Attention scores.
constexpr std::uint64_t kMinScoresBytes = 128 * kMiB;
constexpr std::size_t kMinScoresPercent = 15;

struct PeakContext {
  const Snapshot& s;
  const DeviceTimeline& t;
  const DevicePhases& d;
  const TraceEvents& events;
  std::size_t p = 0;        // the peak is the state after p events
  std::uint64_t peak = 0;
  std::size_t span = 0;     // the peak's span
  std::vector<std::uint8_t> phase_memo;  // by stack: Phase + 1 (0: not known yet)
  std::vector<std::uint8_t> held_memo;   // by stack: 1 + held_without_autograd (0: not known yet)
  bool training_elsewhere = false;       // another device shows a backward or an optimizer step
  std::uint64_t trained_state = 0;       // gradient + optimizer state bytes live at the peak (the budget)
  std::uint64_t gradients = 0, optimizer_state = 0;  // its two parts
  std::uint64_t trained_before = 0;      // of trained_state, allocated before the recording began

  // The lifetimes live at the peak (p is the peak's index), in order: the few every detector reads
  // (so none of them checks live_at(p) again).
  auto live_at_peak() const {
    return t.lifetimes_at_peak | std::views::transform([this](std::size_t i) -> const Lifetime& { return t.lifetimes[i]; });
  }
  Phase stack_phase(StackId stack) {
    if (stack == kNoStack || stack >= phase_memo.size()) return Phase::Other;
    if (phase_memo[stack] == 0) phase_memo[stack] = static_cast<std::uint8_t>(phase_of_stack(s, stack)) + 1;
    return static_cast<Phase>(phase_memo[stack] - 1);
  }
  // Memory a forward keeps whether or not autograd saves anything: autocast's cast cache (until
  // the autocast region exits), a KV cache, a library workspace. inference_mode frees none of it.
  bool held_without_autograd(StackId stack) {
    if (stack == kNoStack || stack >= held_memo.size()) return false;
    if (held_memo[stack] == 0) {
      const Category kind = categorize_stack(s, stack);
      held_memo[stack] = 1 + (kind == Category::AutocastCopy || kind == Category::KvCache || kind == Category::Workspace);
    }
    return held_memo[stack] == 2;
  }
  // The span holding event k, or SIZE_MAX.
  std::size_t span_of(std::size_t k) const {
    const auto it = std::upper_bound(d.spans.begin(), d.spans.end(), k, [](std::size_t x, const PhaseSpan& sp) { return x < sp.first; });
    if (it == d.spans.begin()) return SIZE_MAX;
    const std::size_t i = static_cast<std::size_t>(it - d.spans.begin()) - 1;
    return k < d.spans[i].end ? i : SIZE_MAX;
  }
  bool significant(std::uint64_t bytes, std::uint64_t min_bytes = kMinWorkloadBytes, std::size_t percent = kMinWorkloadPercent) const {
    return bytes >= min_bytes && bytes * 100 >= peak * percent;
  }
  std::string where() const { return peak_place_text(d); }
};

// Sums of lifetimes by allocation site, largest first.
struct SiteBytes {
  SiteBytes() = default;
  SiteBytes(const SiteBytes&) = delete;  // by_stack_ points into by_site
  SiteBytes& operator=(const SiteBytes&) = delete;
  std::map<std::string, std::uint64_t> by_site;
  std::uint64_t bytes = 0, blocks = 0;
  void add(const Snapshot& s, const Lifetime& l) {
    bytes += l.size;
    ++blocks;
    *sum_of(s, l.stack) += l.size;
  }
  std::vector<std::pair<std::string, std::uint64_t>> largest() const {
    std::vector<std::pair<std::string, std::uint64_t>> v(by_site.begin(), by_site.end());
    std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    return v;
  }
  std::string top() const {
    for (const auto& [site, bytes] : largest()) {
      if (site != "[no stack recorded]") return site;
    }
    return "";
  }

 private:
  // The sum of the stack's site in by_site (each stack's site named once: a pattern adds up
  // hundreds of thousands of lifetimes from a few thousand stacks).
  std::uint64_t* sum_of(const Snapshot& s, StackId stack) {
    if (stack == kNoStack) return &by_site["[no stack recorded]"];
    if (stack >= by_stack_.size()) by_stack_.resize(std::max<std::size_t>(s.stack_count(), stack + 1), nullptr);
    std::uint64_t*& sum = by_stack_[stack];
    if (!sum) {
      const std::string site = site_label(s, stack);
      sum = &by_site[site.empty() ? std::string("[no stack recorded]") : site];
    }
    return sum;
  }
  std::vector<std::uint64_t*> by_stack_;  // by stack id: its site's entry in by_site (map nodes stay put)
};

void add_site_evidence(Pattern& p, const SiteBytes& sb, std::string_view what) {
  const auto sites = sb.largest();
  for (std::size_t i = 0; i < sites.size() && i < 3; ++i) {
    p.evidence.push_back(sentence("{} allocated at {}: {}", std::string(what), sites[i].first, Bytes(sites[i].second)));
    if (sites[i].first != "[no stack recorded]") p.sites.push_back(sites[i].first);
  }
}

Pattern workload_pattern(PatternId id, Verdict verdict, const PeakContext& c, std::uint64_t saving) {
  Pattern p;
  p.id = id;
  p.verdict = verdict;
  p.confidence = c.d.backward_from_free_order || c.d.iterations < 2 ? Confidence::Medium : Confidence::High;
  p.saving_bytes = saving;
  return p;
}

// --------------------------------------------------- stale gradients through the forward

std::optional<Pattern> stale_gradients(PeakContext& c) {
  if (c.d.peak->phase != Phase::Forward) return std::nullopt;
  // The backward that follows the peak's forward, and a zero_grad between them.
  std::size_t backward = c.d.spans.size();
  for (std::size_t i = c.span + 1; i < c.d.spans.size(); ++i) {
    if (c.d.spans[i].phase == Phase::Backward) {
      backward = i;
      break;
    }
  }
  const std::size_t until = backward < c.d.spans.size() ? c.d.spans[backward].first : c.events.size();
  SiteBytes stale;
  std::size_t zero_grad_event = SIZE_MAX;
  for (const Lifetime& l : c.live_at_peak()) {
    if (l.free == kStillLive || l.free < c.p || l.free >= until) continue;
    const std::size_t sp = c.span_of(l.free);
    const bool by_zero_grad = (sp != SIZE_MAX && c.d.spans[sp].phase == Phase::ZeroGrad) ||
                              c.stack_phase(l.free_stack) == Phase::ZeroGrad || c.stack_phase(c.events[l.free].stack) == Phase::ZeroGrad;
    if (!by_zero_grad) continue;
    stale.add(c.s, l);
    zero_grad_event = std::min<std::size_t>(zero_grad_event, l.free);
  }
  if (!c.significant(stale.bytes)) return std::nullopt;
  Pattern p = workload_pattern(PatternId::StaleGradients, Verdict::Problem, c, stale.bytes);
  p.summary = sentence("Last step's gradients stay live through the forward pass: {} ({:.0f}% of the {} peak) is freed by "
                       "optimizer.zero_grad() only after the forward, so it adds to the activations at the peak",
                       Bytes(stale.bytes), pct(double(stale.bytes), double(c.peak)), Bytes(c.peak));
  p.evidence.push_back(sentence("the peak is in {}; {} blocks ({}) live then are freed by zero_grad at event {}, after the peak and "
                                "before the backward pass",
                                c.where(), stale.blocks, Bytes(stale.bytes), zero_grad_event));
  add_site_evidence(p, stale, "gradients");
  p.fix.push_back(fix(FixId::ZeroGradBeforeForward, Bytes(stale.bytes)));
  return p;
}

// --------------------------------------------------- saved activations with no backward

std::optional<Pattern> activations_without_backward(PeakContext& c) {
  if (c.d.peak->phase != Phase::Evaluation || c.d.has(Phase::Backward) || c.d.has(Phase::OptimizerStep)) return std::nullopt;
  // A pass cut short by an OOM, or one device of a run that trains on another, may yet run a backward.
  if (!c.t.oom_events.empty() || c.training_elsewhere) return std::nullopt;
  const PhaseSpan& sp = c.d.spans[c.span];
  // Forward allocations live at the peak, by site: those of the peak's pass, and those of an
  // earlier forward allocated before the window (their stacks come from the final state; with no
  // backward in the trace, nothing released them). A site that repeats (once per layer) holds
  // tensors kept for a backward, not one layer's working set.
  std::unordered_map<std::string, std::vector<const Lifetime*>> by_site;
  std::vector<std::vector<const Lifetime*>*> site_of_stack(c.s.stack_count(), nullptr);  // into by_site, named once a stack
  for (const Lifetime& l : c.live_at_peak()) {
    const bool before = l.alloc == kBeforeWindow;
    if (!before && (l.alloc < sp.first || l.alloc >= c.p)) continue;
    if (l.stack == kNoStack || c.stack_phase(l.stack) != Phase::Forward || c.held_without_autograd(l.stack)) continue;
    auto*& site = site_of_stack[l.stack];
    if (!site) site = &by_site[site_label(c.s, l.stack)];
    site->push_back(&l);
  }
  SiteBytes saved;
  std::uint64_t saved_before = 0, blocks_before = 0;
  std::size_t sites = 0;
  for (const auto& [site, ls] : by_site) {
    if (ls.size() < kMinRepeats) continue;
    ++sites;
    for (const Lifetime* l : ls) {
      saved.add(c.s, *l);
      if (l->alloc == kBeforeWindow) saved_before += l->size, ++blocks_before;
    }
  }
  if (sites < kMinSavedSites || !c.significant(saved.bytes, kMinSavedBytes, kMinSavedPercent)) return std::nullopt;
  Pattern p = workload_pattern(PatternId::ActivationsWithoutBackward, Verdict::Problem, c, saved.bytes);
  p.summary = sentence("Activations are kept for a backward pass that never runs: {} ({:.0f}% of the {} peak) of forward tensors "
                       "from {} sites, each repeated layer after layer, is live at the peak with no backward or optimizer step in "
                       "the trace; under torch.inference_mode() autograd keeps none of it",
                       Bytes(saved.bytes), pct(double(saved.bytes), double(c.peak)), Bytes(c.peak), sites);
  p.evidence.push_back(sentence("the peak is in {}; {} forward tensors ({}) allocated in that pass are still live then", c.where(),
                                saved.blocks - blocks_before, Bytes(saved.bytes - saved_before)));
  if (blocks_before > 0) {
    p.evidence.push_back(sentence("{} more forward tensors ({}) were allocated before the recording began, by the same forward code, "
                                  "and are still live: an earlier forward whose autograd graph (or output) is still held",
                                  blocks_before, Bytes(saved_before)));
  }
  p.evidence.push_back(sentence("no allocation or free in the window carries a backward or torch/optim frame, and the order of "
                                "frees shows no backward pass either"));
  if (c.trained_state >= kMinWorkloadBytes) {
    // Gradients and optimizer state say the run trained: a backward may follow the dump.
    p.confidence = Confidence::Low;
    p.evidence.push_back(sentence("but {} of gradients and optimizer state is live too, so this run trained before the recording: "
                                  "if a backward follows after the dump, these activations are what it needs (expected); "
                                  "only a forward that is never differentiated (evaluation, a forward-only benchmark) wastes them",
                                  Bytes(c.trained_state)));
  }
  add_site_evidence(p, saved, "saved tensors");
  p.fix.push_back(fix(FixId::InferenceMode, Bytes(saved.bytes)));
  return p;
}

// --------------------------------------------------- forward tensors alive after backward

std::optional<Pattern> forward_tensors_after_backward(PeakContext& c) {
  if (!c.d.has(Phase::Backward)) return std::nullopt;
  // Spans before the peak's whose backward finished before the peak's span.
  std::vector<bool> done(c.d.spans.size(), false);
  bool backward_after = false;
  for (std::size_t i = c.span; i-- > 0;) {
    if (c.d.spans[i].phase == Phase::Backward) backward_after = true;
    if (c.d.spans[i].phase == Phase::Forward && backward_after) done[i] = true;
  }
  SiteBytes kept;
  for (const Lifetime& l : c.live_at_peak()) {
    if (l.alloc == kBeforeWindow || l.alloc >= c.p) continue;
    const std::size_t sp = c.span_of(l.alloc);
    if (sp == SIZE_MAX || !done[sp] || c.stack_phase(l.stack) != Phase::Forward || c.held_without_autograd(l.stack)) continue;
    kept.add(c.s, l);
  }
  if (!c.significant(kept.bytes)) return std::nullopt;
  Pattern p = workload_pattern(PatternId::ForwardTensorsAfterBackward, Verdict::Problem, c, kept.bytes);
  p.summary = sentence("Forward tensors outlive their backward pass: {} ({:.0f}% of the {} peak) allocated in an earlier forward is "
                       "still live at the peak, held by outputs, a loss or logging rather than by autograd",
                       Bytes(kept.bytes), pct(double(kept.bytes), double(c.peak)), Bytes(c.peak));
  p.evidence.push_back(sentence("the peak is in {}; {} blocks ({}) from a forward pass whose backward had finished are live then",
                                c.where(), kept.blocks, Bytes(kept.bytes)));
  add_site_evidence(p, kept, "tensors");
  p.fix.push_back(fix(FixId::DropForwardRefs, Bytes(kept.bytes), kept.top().empty() ? std::string("the sites above") : kept.top()));
  return p;
}

// --------------------------------------------------- optimizer step temporaries at the peak

// The innermost Python frame of the stack is user or third-party code (not torch's).
bool innermost_python_outside_torch(const Snapshot& s, StackId stack) {
  if (stack == kNoStack) return false;
  const FrameId* frames = s.stack_begin(stack);
  for (std::size_t i = 0; i < s.stack_size(stack); ++i) {
    const FrameKind kind = frame_kind(s.frames[frames[i]].facts);
    if (kind == FrameKind::Native || kind == FrameKind::Generated) continue;
    return kind == FrameKind::User || kind == FrameKind::ThirdParty;
  }
  return false;
}

std::optional<Pattern> optimizer_step_temporaries(PeakContext& c) {
  if (c.d.peak->phase != Phase::OptimizerStep) return std::nullopt;
  const PhaseSpan& sp = c.d.spans[c.span];
  SiteBytes temps;
  for (const Lifetime& l : c.live_at_peak()) {
    if (l.alloc == kBeforeWindow || l.alloc < sp.first || l.alloc >= c.p) continue;
    if (l.free == kStillLive || l.free >= sp.end) continue;
    // torch.optim's own foreach / fused kernels already update in place as far as they can: only
    // a hand-written update (user or third-party code) is to change.
    if (c.stack_phase(l.stack) != Phase::OptimizerStep || !innermost_python_outside_torch(c.s, l.stack)) continue;
    temps.add(c.s, l);
  }
  if (!c.significant(temps.bytes)) return std::nullopt;
  Pattern p = workload_pattern(PatternId::OptimizerStepTemporaries, Verdict::Problem, c, temps.bytes);
  p.summary = sentence("The peak is inside optimizer.step(): {} ({:.0f}% of the {} peak) of temporaries allocated and freed within "
                       "the step are live at the peak (out-of-place updates)",
                       Bytes(temps.bytes), pct(double(temps.bytes), double(c.peak)), Bytes(c.peak));
  p.evidence.push_back(sentence("the peak is in {}; {} temporaries ({}) of that step are live then and freed before it ends",
                                c.where(), temps.blocks, Bytes(temps.bytes)));
  add_site_evidence(p, temps, "temporaries");
  p.fix.push_back(fix(FixId::ForeachOrFused, Bytes(temps.bytes)));
  return p;
}

// --------------------------------------------------- attention scores dominating the peak

bool attention_name(std::string_view name) {
  const std::string n = ascii_lower(name);
  return n.find("softmax") != std::string::npos || n.find("attention") != std::string::npos || n.find("attn") != std::string::npos;
}

// A loss's log_softmax (cross_entropy over B*T*V logits, torch's or a hand-written one) is no
// attention, whatever its function is called.
bool loss_stack(const Snapshot& s, StackId stack) {
  const FrameId* frames = s.stack_begin(stack);
  for (std::size_t i = 0; i < s.stack_size(stack); ++i) {
    const std::string_view name = s.str(s.frames[frames[i]].name);
    if (name.find("log_softmax") != std::string_view::npos || name.find("cross_entropy") != std::string_view::npos ||
        name.find("nll_loss") != std::string_view::npos) {
      return true;
    }
  }
  return false;
}

// A frame of the stack is SDPA's math (unfused) path: scaled_dot_product_attention was called but
// fell back to materializing the scores.
bool sdpa_math_stack(const Snapshot& s, StackId stack) {
  if (stack == kNoStack) return false;
  const FrameId* frames = s.stack_begin(stack);
  for (std::size_t i = 0; i < s.stack_size(stack); ++i) {
    if (s.str(s.frames[frames[i]].name).find("_scaled_dot_product_attention_math") != std::string_view::npos) return true;
  }
  return false;
}

// A frame of the stack computes attention scores: the user's frame is in a function named like
// attention or softmax, or any frame is a softmax (torch.nn.functional.softmax, at::_softmax, the
// SDPA math path's); a loss is not.
bool attention_stack(const Snapshot& s, StackId stack) {
  if (loss_stack(s, stack)) return false;
  const SiteChoice choice = choose_site(s, stack);
  if (choice.found && (choice.kind == FrameKind::User || choice.kind == FrameKind::ThirdParty) &&
      attention_name(s.str(s.frames[choice.frame].name))) {
    return true;
  }
  const FrameId* frames = s.stack_begin(stack);
  for (std::size_t i = 0; i < s.stack_size(stack); ++i) {
    if (s.str(s.frames[frames[i]].name).find("softmax") != std::string_view::npos) return true;
  }
  return sdpa_math_stack(s, stack);
}

// The score matrices are the largest tensors attention makes (B*H*T^2 against B*H*T*d for
// queries, keys and values): of the attention blocks live at the peak, those at least a quarter
// of the largest (scores, softmax outputs, their bf16 copies and dropout masks).
constexpr std::uint64_t kScoreShare = 4;

// The autograd nodes a hand-written attention's backward runs (scores = q @ k^T or einsum, a scale,
// a mask, softmax or exp / sum, dropout, out = p @ v): each allocates gradients of the score
// matrices. A linear layer's (MmBackward0, AddmmBackward0) and an activation's nodes are not here.
constexpr std::string_view kAttentionBackwardNodes[] = {
    "SoftmaxBackward", "DivBackward",       "ExpBackward",   "SubBackward",          "MulBackward",
    "BmmBackward",     "BaddbmmBackward",   "WhereBackward", "MaskedFillBackward",   "NativeDropoutBackward",
};

// The autograd node that allocated a block ("DivBackward0"), when it is one of the above: the
// innermost node frame of its stack.
std::optional<std::string> attention_backward_node(const Snapshot& s, StackId stack) {
  const FrameId* frames = s.stack_begin(stack);
  for (std::size_t i = 0; i < s.stack_size(stack); ++i) {
    if (!(s.frames[frames[i]].facts & kBackwardNode)) continue;
    const std::string full = short_cxx_name(s.str(s.frames[frames[i]].name));  // "DivBackward0::apply"
    std::string_view node = full;
    for (std::string_view suffix : {"::apply", "_apply_functional"}) {
      if (node.ends_with(suffix)) node.remove_suffix(suffix.size());
    }
    const bool known = std::ranges::any_of(kAttentionBackwardNodes, [&](std::string_view n) { return node.starts_with(n); });
    return known ? std::optional<std::string>(node) : std::nullopt;
  }
  return std::nullopt;
}

// "2 x 512.00 MiB, 1 x 128.00 MiB": the largest three sizes of a size -> blocks map.
std::string size_counts_text(const std::map<std::uint64_t, std::uint64_t>& sizes) {
  std::string text;
  std::size_t listed = 0;
  for (auto it = sizes.rbegin(); it != sizes.rend() && listed < 3; ++it, ++listed) {
    text += fmt::format("{}{} x {}", text.empty() ? "" : ", ", it->second, Bytes(it->first).text());
  }
  return text;
}

// Blocks a backward node of attention allocated at the peak with exactly a score block's size:
// the gradients of the score matrices, which a fused attention kernel never materializes either.
struct ScoreGradients {
  std::uint64_t bytes = 0, blocks = 0;
  std::map<std::uint64_t, std::uint64_t> sizes;       // size -> blocks
  std::map<std::string, std::uint64_t> bytes_by_node;  // "DivBackward0" -> bytes
};

ScoreGradients score_gradients(PeakContext& c, const std::map<std::uint64_t, std::uint64_t>& score_sizes,
                               const std::unordered_map<StackId, bool>& attention_stacks) {
  ScoreGradients g;
  std::unordered_map<StackId, std::optional<std::string>> nodes;
  for (const Lifetime& l : c.live_at_peak()) {
    const StackId stack = allocating_stack(l);
    if (stack == kNoStack || !score_sizes.contains(l.size) || attention_stacks.at(stack)) continue;
    if (c.stack_phase(stack) != Phase::Backward) continue;
    auto it = nodes.find(stack);
    if (it == nodes.end()) it = nodes.emplace(stack, attention_backward_node(c.s, stack)).first;
    if (!it->second) continue;
    g.bytes += l.size;
    ++g.blocks;
    ++g.sizes[l.size];
    g.bytes_by_node[*it->second] += l.size;
  }
  return g;
}

std::string node_bytes_text(const std::map<std::string, std::uint64_t>& by_node) {
  std::vector<std::pair<std::string, std::uint64_t>> nodes(by_node.begin(), by_node.end());
  std::ranges::stable_sort(nodes, [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string text;
  for (std::size_t i = 0; i < nodes.size() && i < 4; ++i) {
    text += fmt::format("{}{} ({})", i == 0 ? "" : ", ", nodes[i].first, Bytes(nodes[i].second).text());
  }
  if (nodes.size() > 4) text += fmt::format(" and {} more", nodes.size() - 4);
  return text;
}

// The finding's words: what the score-sized blocks are, at which sizes, from which nodes.
void say_attention_scores(Pattern& p, const PeakContext& c, const SiteBytes& scores, const std::map<std::uint64_t, std::uint64_t>& score_sizes,
                          const ScoreGradients& grads, bool sdpa_math_path) {
  const std::uint64_t total = scores.bytes + grads.bytes;
  if (grads.blocks == 0) {
    p.summary = sentence("Attention scores dominate the peak: {} ({:.0f}% of the {} peak) is allocated in attention / softmax code "
                         "that materializes the B*H*T^2 score matrices",
                         Bytes(scores.bytes), pct(double(scores.bytes), double(c.peak)), Bytes(c.peak));
  } else {
    p.summary = sentence("Attention scores dominate the peak: {} ({:.0f}% of the {} peak) is B*H*T^2 score matrices: {} allocated in "
                         "attention / softmax code and {} of their gradients in the backward pass",
                         Bytes(total), pct(double(total), double(c.peak)), Bytes(c.peak), Bytes(scores.bytes), Bytes(grads.bytes));
  }
  p.evidence.push_back(sentence("at the peak ({}): {} score-sized block{} ({}: {}) allocated in attention or softmax code; its smaller "
                                "blocks (queries, keys, values: B*H*T*d) are not counted",
                                c.where().empty() ? std::string("its phase unknown") : c.where(), scores.blocks,
                                plural_s(scores.blocks), Bytes(scores.bytes), size_counts_text(score_sizes)));
  if (grads.blocks > 0) {
    p.evidence.push_back(sentence("and {} block{} of exactly those sizes ({}: {}) allocated by the backward of attention's operations: "
                                  "{}. These are the scores' gradients, told by their size and their autograd node (the snapshot "
                                  "does not tie a backward node to the forward line it differentiates)",
                                  grads.blocks, plural_s(grads.blocks), Bytes(grads.bytes), size_counts_text(grads.sizes),
                                  node_bytes_text(grads.bytes_by_node)));
  }
  if (sdpa_math_path) {
    p.evidence.push_back(sentence("most of the scores are allocated in at::native::_scaled_dot_product_attention_math: "
                                  "scaled_dot_product_attention is called, but none of its fused backends took these inputs"));
  }
  add_site_evidence(p, scores, "scores");
  p.fix.push_back(fix(sdpa_math_path ? FixId::FusedSdpaBackend : FixId::FusedAttention,
                      scores.top().empty() ? std::string("the sites above") : scores.top(), Bytes(total),
                      std::string(grads.blocks == 0 ? "scores and softmax outputs" : "scores, softmax outputs and their gradients in backward")));
}

std::optional<Pattern> attention_scores(PeakContext& c) {
  std::unordered_map<StackId, bool> memo;
  std::vector<const Lifetime*> attention;
  std::uint64_t largest = 0;
  for (const Lifetime& l : c.live_at_peak()) {
    const StackId stack = allocating_stack(l);
    if (stack == kNoStack) continue;
    auto it = memo.find(stack);
    if (it == memo.end()) it = memo.emplace(stack, attention_stack(c.s, stack)).first;
    if (!it->second) continue;
    attention.push_back(&l);
    largest = std::max(largest, l.size);
  }
  SiteBytes scores;
  std::map<std::uint64_t, std::uint64_t> score_sizes;  // size -> blocks
  std::uint64_t math_path = 0;                          // of the scores' bytes, those of SDPA's math path
  for (const Lifetime* l : attention) {
    if (l->size * kScoreShare < largest) continue;
    scores.add(c.s, *l);
    ++score_sizes[l->size];
    if (sdpa_math_stack(c.s, allocating_stack(*l))) math_path += l->size;
  }
  const ScoreGradients grads = score_gradients(c, score_sizes, memo);
  const std::uint64_t total = scores.bytes + grads.bytes;
  if (scores.blocks == 0 || !c.significant(total, kMinScoresBytes, kMinScoresPercent)) return std::nullopt;
  Pattern p = workload_pattern(PatternId::AttentionScores, Verdict::Problem, c, total);
  say_attention_scores(p, c, scores, score_sizes, grads, 2 * math_path >= scores.bytes);
  return p;
}

// --------------------------------------------------- training state through an evaluation

// Gradients and optimizer state at the peak of a pass with no backward anywhere: at least this
// much, and this share of the peak.
constexpr std::size_t kMinStatePercent = 20;

std::optional<Pattern> training_state_in_evaluation(PeakContext& c) {
  if (c.d.peak->phase != Phase::Evaluation || c.d.has(Phase::Backward) || c.d.has(Phase::OptimizerStep) || c.training_elsewhere) {
    return std::nullopt;
  }
  if (!c.significant(c.trained_state, kMinWorkloadBytes, kMinStatePercent)) return std::nullopt;
  Pattern p = workload_pattern(PatternId::TrainingStateInEvaluation, Verdict::Problem, c, c.trained_state);
  p.confidence = Confidence::Medium;  // the snapshot cannot tell whether training resumes after the evaluation
  p.summary = sentence("An evaluation runs with the training state resident: {} of gradients and {} of optimizer state ({:.0f}% of the "
                       "{} peak) are live at its peak, with no backward or optimizer step in the trace",
                       Bytes(c.gradients), Bytes(c.optimizer_state), pct(double(c.trained_state), double(c.peak)), Bytes(c.peak));
  p.evidence.push_back(sentence("the peak is in {}; the memory budget at the peak counts {} of gradients and {} of optimizer state",
                                c.where(), Bytes(c.gradients), Bytes(c.optimizer_state)));
  if (c.trained_before > 0) {
    p.evidence.push_back(sentence("{} of it was allocated before the recording began: training steps (or a warm-up) ran before it and "
                                  "left their state behind",
                                  Bytes(c.trained_before)));
  }
  p.evidence.push_back(sentence("gradients stay allocated after optimizer.step() until zero_grad(set_to_none=True); optimizer state "
                                "lives as long as the optimizer. The snapshot cannot tell whether training resumes after this "
                                "evaluation: if it does, the optimizer state is expected and only the gradients are waste"));
  p.fix.push_back(fix(FixId::FreeTrainingStateForEvaluation, Bytes(c.gradients), Bytes(c.optimizer_state)));
  if (c.gradients >= kMinWorkloadBytes) p.fix.push_back(fix(FixId::ZeroGradBeforeEvaluation, Bytes(c.gradients)));
  return p;
}

}  // namespace

namespace {

// Gradients and optimizer state live at the device's peak (the run trained before this moment),
// from the peak's memory budget, which gives stack-less blocks their kinds by size.
void trained_state_at_peak(const Measured& a, std::int64_t device, PeakContext& c) {
  const MemoryBudget* b = peak_budget(a.budgets, device);
  if (!b) return;
  for (const BudgetRow& row : b->rows) {
    if (row.kind != Category::Gradient && row.kind != Category::OptimizerState) continue;
    (row.kind == Category::Gradient ? c.gradients : c.optimizer_state) += row.bytes;
    if (row.provenance == Provenance::BeforeWindow) c.trained_before += row.bytes;
  }
  c.trained_state = c.gradients + c.optimizer_state;
}

}  // namespace

std::vector<Pattern> workload_patterns(const Snapshot& s, const Measured& a) {
  std::vector<Pattern> out;
  for (std::size_t i = 0; i < a.timelines.size() && i < a.phases.size(); ++i) {
    const DeviceTimeline& t = a.timelines[i];
    const DevicePhases& d = a.phases[i];
    if (t.device != a.peak_device || !d.peak || !t.peak_allocated || *t.peak_allocated <= 0) continue;
    PeakContext c{s, t, d, s.events_of(t.device), t.peak_index, static_cast<std::uint64_t>(*t.peak_allocated), d.peak->span,
                  std::vector<std::uint8_t>(s.stack_count(), 0), std::vector<std::uint8_t>(s.stack_count(), 0)};
    trained_state_at_peak(a, t.device, c);
    for (const DevicePhases& other : a.phases) c.training_elsewhere |= other.has(Phase::Backward) || other.has(Phase::OptimizerStep);
    for (auto detect : {stale_gradients, activations_without_backward, forward_tensors_after_backward, optimizer_step_temporaries,
                        attention_scores, training_state_in_evaluation}) {
      if (auto p = detect(c)) out.push_back(std::move(*p));
    }
    if (auto p = out_of_place_activation(s, t, d)) out.push_back(std::move(*p));
  }
  return out;
}

}  // namespace memsnap::patterns_detail
