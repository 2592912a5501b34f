// The memory budget (memory_budget.h): the live set of each moment split by kind, provenance and
// the source of the kind, with the stack-less blocks explained by size arithmetic.
#include "analysis/memory_budget.h"
#include "analysis/allocation_tags.h"

#include <algorithm>
#include <fmt/format.h>
#include <map>
#include <optional>
#include <tuple>
#include <unordered_map>

#include "analysis/known_allocators.h"
#include "analysis/plausibility.h"
#include "base/format_bytes.h"
#include "base/plural.h"

namespace memsnap {
namespace {

constexpr std::size_t kCategoryCount = EnumNames<Category>::names.size();
// A stack-less set is called "k copies of one set" when its sizes whose counts k divides hold at
// least half its bytes, in at least kMinSetBlocks blocks of at least two sizes.
constexpr std::uint64_t kCopies = 4;
constexpr std::uint64_t kMinSetBlocks = 8;
// Matched gradient sizes must cover this share of the gradients' bytes.
constexpr double kMinMatchedShare = 0.9;
constexpr std::size_t kListedSizes = 4;

using SizeCounts = std::map<std::uint64_t, std::uint64_t>;  // requested size -> blocks

// One item's decided kind.
struct Decision {
  Category kind = Category::Unknown;
  KindSource source = KindSource::NoEvidence;
};

std::uint64_t bytes_of(const SizeCounts& counts) {
  std::uint64_t total = 0;
  for (const auto& [size, n] : counts) total += size * n;
  return total;
}

std::uint64_t blocks_of(const SizeCounts& counts) {
  std::uint64_t total = 0;
  for (const auto& [size, n] : counts) total += n;
  return total;
}

// "96 x 100.00 MiB, 128 x 25.00 MiB": the largest groups by bytes, then how many more.
std::string size_groups_text(const SizeCounts& counts) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> groups(counts.begin(), counts.end());
  std::stable_sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) { return a.first * a.second > b.first * b.second; });
  std::string out;
  for (std::size_t i = 0; i < groups.size() && i < kListedSizes; ++i) {
    out += fmt::format("{}{} x {}", i ? ", " : "", groups[i].second, format_bytes(groups[i].first));
  }
  if (groups.size() > kListedSizes) out += fmt::format(" and {} more sizes", groups.size() - kListedSizes);
  return out;
}

bool has_stack(const Snapshot& s, const LiveItem& item) { return item.stack != kNoStack && s.stack_size(item.stack) > 0; }

// The stack rule's kind of an item with a stack: its allocation stack's kind, except that a block
// allocated in backward that a backward stack frees later in the trace is a temporary of the
// backward pass, not a gradient that outlives it, and that a Python-only stack's block of cuBLAS's
// default workspace size is that workspace (cublas_workspace_by_size).
Category stack_rule_kind(const Snapshot& s, const LiveItem& item, CategoryMemo& kinds) {
  if (cublas_workspace_by_size(s, item.stack, item.requested)) return Category::Workspace;
  const Category kind = kinds(item.stack);
  const bool freed_in_backward =
      item.free_stack != kNoStack && s.stack_size(item.free_stack) > 0 && kinds(item.free_stack) == Category::Gradient;
  return kind == Category::Gradient && freed_in_backward ? Category::Temporary : kind;
}

// Takes up to `n` not yet decided stack-less items of `size` as `kind`, in their order or, given
// `first`, those of that provenance before the others; returns how many it took.
std::uint64_t assign(std::vector<Decision>& decisions, const std::vector<std::size_t>& stackless, const std::vector<LiveItem>& items,
                     std::uint64_t size, std::uint64_t n, Category kind, std::optional<Provenance> first = std::nullopt) {
  std::uint64_t taken = 0;
  for (int pass = 0; pass < (first ? 2 : 1); ++pass) {
    for (std::size_t k : stackless) {
      if (taken == n) return taken;
      if (items[k].requested != size || decisions[k].source != KindSource::NoEvidence) continue;
      if (first && (items[k].provenance == *first) != (pass == 0)) continue;
      decisions[k] = {kind, KindSource::SizeMatch};
      ++taken;
    }
  }
  return taken;
}

// Stack-less blocks matched one to one to the gradients' sizes are the parameters; two more of
// every gradient size are optimizer moments, one more is a gradient allocated before recording
// (the last step's, which the window frees in zero_grad).
bool match_gradients(const SizeCounts& unexplained, const SizeCounts& gradients, std::vector<Decision>& decisions,
                     const std::vector<std::size_t>& stackless, const std::vector<LiveItem>& items, std::vector<std::string>& evidence) {
  const std::uint64_t gradient_bytes = bytes_of(gradients);
  if (gradient_bytes == 0) return false;
  SizeCounts matched, moments, second;
  for (const auto& [size, n] : gradients) {
    const auto it = unexplained.find(size);
    if (it == unexplained.end()) continue;
    matched[size] = std::min(n, it->second);
    if (it->second >= 3 * n) moments[size] = 2 * n;
    else if (it->second >= 2 * n) second[size] = n;
  }
  const auto covers = [&](const SizeCounts& part, double times) {
    return static_cast<double>(bytes_of(part)) >= kMinMatchedShare * times * static_cast<double>(gradient_bytes);
  };
  const std::uint64_t matched_bytes = bytes_of(matched);
  if (!covers(matched, 1) && static_cast<double>(matched_bytes) < kMinMatchedShare * static_cast<double>(bytes_of(unexplained))) {
    evidence.push_back(fmt::format("the stack-less sizes do not match the gradients' ({} in {} blocks): their kind is unknown",
                                   format_bytes(gradient_bytes), blocks_of(gradients)));
    return false;
  }
  for (const auto& [size, n] : matched) assign(decisions, stackless, items, size, n, Category::Parameter);
  evidence.push_back(fmt::format("{} stack-less blocks ({}) match the gradients' sizes one to one: the parameters", blocks_of(matched),
                                 format_bytes(matched_bytes)));
  if (covers(moments, 2)) {
    for (const auto& [size, n] : moments) assign(decisions, stackless, items, size, n, Category::OptimizerState);
    evidence.push_back(fmt::format("two more stack-less blocks of each gradient size ({} in {} blocks): optimizer moments "
                                   "(Adam's exp_avg and exp_avg_sq)",
                                   format_bytes(bytes_of(moments)), blocks_of(moments)));
  } else if (covers(second, 1)) {
    for (const auto& [size, n] : second) assign(decisions, stackless, items, size, n, Category::Gradient);
    evidence.push_back(fmt::format("one more stack-less block of each gradient size ({} in {} blocks): gradients allocated "
                                   "before recording (the previous step's)",
                                   format_bytes(bytes_of(second)), blocks_of(second)));
  }
  return true;
}

// Optimizer moments recorded with their stacks (created by the first optimizer.step()) hold one
// block per parameter and moment: Adam's two moments when the size counts are even, else one (SGD
// momentum). Their halved (or whole) counts are the parameters' sizes; stack-less blocks of those
// sizes are the parameters (those allocated before the recording first), then the gradients (the
// backward pass allocates them on autograd's thread, which records no Python frames).
bool match_optimizer_state(const SizeCounts& optimizer, const SizeCounts& gradients_here, std::vector<Decision>& decisions,
                           const std::vector<std::size_t>& stackless, const std::vector<LiveItem>& items, std::vector<std::string>& evidence) {
  std::uint64_t even_bytes = 0;
  for (const auto& [size, n] : optimizer) even_bytes += n % 2 == 0 ? size * n : 0;
  const std::uint64_t moments = static_cast<double>(even_bytes) >= kMinMatchedShare * static_cast<double>(bytes_of(optimizer)) ? 2 : 1;
  SizeCounts parameters;
  for (const auto& [size, n] : optimizer) {
    if (n / moments > 0) parameters[size] = n / moments;
  }
  const std::uint64_t parameter_bytes = bytes_of(parameters);
  if (parameter_bytes == 0 || blocks_of(parameters) < 2) return false;
  std::vector<Decision> trial = decisions;
  std::uint64_t params = 0, grads = 0, param_blocks = 0, grad_blocks = 0;
  for (const auto& [size, n] : parameters) {
    const std::uint64_t p = assign(trial, stackless, items, size, n, Category::Parameter, Provenance::BeforeWindow);
    params += p * size;
    param_blocks += p;
  }
  if (static_cast<double>(params) < kMinMatchedShare * static_cast<double>(parameter_bytes)) return false;
  for (const auto& [size, n] : parameters) {  // one gradient per parameter, less those with stacks
    const auto known = gradients_here.find(size);
    const std::uint64_t missing = known == gradients_here.end() ? n : n - std::min(n, known->second);
    const std::uint64_t g = assign(trial, stackless, items, size, missing, Category::Gradient, Provenance::InWindow);
    grads += g * size;
    grad_blocks += g;
  }
  decisions = std::move(trial);
  evidence.push_back(fmt::format("the optimizer state ({} in {} blocks, with stacks) is {} per parameter: {} stack-less blocks of "
                                 "its sizes ({}) are the parameters{}",
                                 format_bytes(bytes_of(optimizer)), blocks_of(optimizer),
                                 moments == 2 ? "two moments (Adam's exp_avg and exp_avg_sq)" : "one buffer (momentum)", param_blocks,
                                 format_bytes(params),
                                 grad_blocks ? fmt::format(", and {} more ({}) the gradients, allocated in backward by autograd's "
                                                           "thread, which records no Python frames",
                                                           grad_blocks, format_bytes(grads))
                                             : std::string()));
  return true;
}

// With nothing to compare with: sizes that occur a multiple of 4 times holding most of the bytes
// are 4 copies of one set, the weights, their gradients and two AdamW moments.
bool match_copies(const SizeCounts& unexplained, std::vector<Decision>& decisions, const std::vector<std::size_t>& stackless,
                  const std::vector<LiveItem>& items, std::vector<std::string>& evidence) {
  SizeCounts set;  // one copy
  for (const auto& [size, n] : unexplained) {
    if (n % kCopies == 0) set[size] = n / kCopies;
  }
  const std::uint64_t copies_bytes = kCopies * bytes_of(set);
  if (set.size() < 2 || kCopies * blocks_of(set) < kMinSetBlocks || 2 * copies_bytes < bytes_of(unexplained)) return false;
  for (const auto& [size, n] : set) {
    assign(decisions, stackless, items, size, n, Category::Parameter);
    assign(decisions, stackless, items, size, n, Category::Gradient);
    assign(decisions, stackless, items, size, 2 * n, Category::OptimizerState);
  }
  evidence.push_back(fmt::format("{} of the stack-less memory is {} copies of one set of {} blocks ({} each): inferred as the "
                                 "weights, their gradients and two AdamW moments (16 bytes a parameter in fp32)",
                                 format_bytes(copies_bytes), kCopies, blocks_of(set), format_bytes(bytes_of(set))));
  return true;
}

// Blocks with a stack but no decisive frame (kind unknown) that, site by site, match the
// parameters' sizes one to one: one tensor per parameter, kept by code memsnap knows no frame of
// (a hand-written optimizer's state, an EMA, a copy of the weights). Said as evidence; the kind
// stays unknown, since the snapshot does not tell which of those it is.
void note_parameter_shaped(const Snapshot& s, const std::vector<LiveItem>& items, const std::vector<Decision>& decisions,
                           MemoryBudget& budget) {
  SizeCounts parameters;
  std::map<std::string, SizeCounts> unknown_by_site;
  std::unordered_map<StackId, SizeCounts*> sizes_of;  // each stack's site named once (map nodes stay put)
  for (std::size_t k = 0; k < items.size(); ++k) {
    if (decisions[k].source != KindSource::StackRule) continue;
    if (decisions[k].kind == Category::Parameter) {
      ++parameters[items[k].requested];
    } else if (decisions[k].kind == Category::Unknown) {
      SizeCounts*& sizes = sizes_of[items[k].stack];
      if (!sizes) sizes = &unknown_by_site[site_label(s, items[k].stack)];
      ++(*sizes)[items[k].requested];
    }
  }
  if (blocks_of(parameters) < kMinSetBlocks) return;
  for (const auto& [site, sizes] : unknown_by_site) {
    if (sizes != parameters || site.empty()) continue;
    budget.parameter_shaped_sites.push_back(site);
    budget.evidence.push_back(fmt::format("{} holds {} blocks ({}) whose sizes match the parameters' one to one: one tensor per "
                                          "parameter, such as a hand-written optimizer's state, an EMA or a copy of the weights",
                                          site, blocks_of(sizes), format_bytes(bytes_of(sizes))));
  }
}

// The blocks stack_rule_kind() took from the gradients as the backward's temporaries, said with their bytes.
void note_backward_temporaries(const std::vector<LiveItem>& items, const std::vector<Decision>& decisions, MemoryBudget& budget) {
  std::uint64_t bytes = 0, blocks = 0;
  for (std::size_t k = 0; k < items.size(); ++k) {
    if (decisions[k].kind != Category::Temporary || decisions[k].source != KindSource::StackRule) continue;
    bytes += items[k].bytes;
    ++blocks;
  }
  if (blocks == 0) return;
  budget.evidence.push_back(fmt::format("{} in {} block{} allocated in backward is freed in backward too (a backward stack frees it): "
                                        "intermediate results of the backward pass, not gradients kept for the optimizer",
                                        format_bytes(bytes), blocks, plural_s(blocks)));
}

// Stack-less blocks of cuBLAS's default workspace size (cublas_workspace_by_size's rule, without
// even the Python frames): that workspace, unless the gradients have that size too (then they
// may be parameters, and the gradients' matching decides). cuBLAS keeps one a handle and stream,
// so a few of them at most. Takes them out of `unexplained`.
constexpr std::uint64_t kMaxWorkspacesBySize = 4;
void take_cublas_workspaces(const SizeCounts& gradients, SizeCounts& unexplained, std::vector<Decision>& decisions,
                            const std::vector<std::size_t>& stackless, const std::vector<LiveItem>& items, MemoryBudget& budget) {
  const auto it = unexplained.find(kDefaultCublasWorkspaceBytes);
  if (it == unexplained.end() || it->second > kMaxWorkspacesBySize || gradients.contains(kDefaultCublasWorkspaceBytes)) return;
  const std::uint64_t n = assign(decisions, stackless, items, kDefaultCublasWorkspaceBytes, it->second, Category::Workspace);
  unexplained.erase(it);
  budget.evidence.push_back(fmt::format("{} stack-less block{} of {}: cuBLAS's default workspace before Hopper "
                                        "(CUBLAS_WORKSPACE_CONFIG :4096:2:16:8), allocated by the first GEMM and kept",
                                        n, plural_s(n), kDefaultCublasWorkspaceText));
}

// Decides the kind of every item: the stack rule for items with a stack, size arithmetic for the rest.
std::vector<Decision> decide(const Snapshot& s, const std::vector<LiveItem>& items, const std::vector<Category>& rule_kinds,
                             const SizeCounts& gradients, const SizeCounts& optimizer, MemoryBudget& budget) {
  std::vector<Decision> decisions(items.size());
  std::vector<std::size_t> stackless;
  SizeCounts unexplained, gradients_here;  // stack-less sizes; gradients with stacks at this moment
  for (std::size_t k = 0; k < items.size(); ++k) {
    if (const auto tagged = tag_kind(s, items[k].stack)) {
      decisions[k] = {tagged->kind, tagged->from_profiler ? KindSource::ProfilerCategory : KindSource::UserMetadata};
    } else if (has_stack(s, items[k])) {
      decisions[k] = {rule_kinds[k], KindSource::StackRule};
      if (decisions[k].kind == Category::Gradient) ++gradients_here[items[k].requested];
    } else {
      stackless.push_back(k);
      ++unexplained[items[k].requested];
    }
  }
  note_parameter_shaped(s, items, decisions, budget);
  note_backward_temporaries(items, decisions, budget);
  if (stackless.empty()) return decisions;
  for (const auto& [size, n] : unexplained) budget.stackless_sizes.push_back({size, n});
  std::stable_sort(budget.stackless_sizes.begin(), budget.stackless_sizes.end(),
                   [](const SizeGroup& a, const SizeGroup& b) { return a.size * a.count > b.size * b.count; });
  std::uint64_t before = 0, no_trace = 0;
  for (std::size_t k : stackless) {
    before += items[k].provenance == Provenance::BeforeWindow ? items[k].bytes : 0;
    no_trace += items[k].provenance == Provenance::NoTrace ? items[k].bytes : 0;
  }
  budget.evidence.push_back(fmt::format("{} stack-less block{}: {}", stackless.size(), plural_s(stackless.size()),
                                         size_groups_text(unexplained)));
  if (before > 0) {
    budget.evidence.push_back(fmt::format("{} of it was allocated before the recording began (no alloc in the window: proven by the trace)",
                                          format_bytes(before)));
  }
  if (no_trace > 0) budget.evidence.push_back(fmt::format("{} of it is on a device without a trace: when it was allocated is unknown", format_bytes(no_trace)));
  take_cublas_workspaces(gradients, unexplained, decisions, stackless, items, budget);
  if (unexplained.empty()) return decisions;
  std::vector<std::string> gradient_evidence;  // kept when no other match explains the blocks
  const bool by_gradients = match_gradients(unexplained, gradients, decisions, stackless, items, gradient_evidence);
  if (!by_gradients && match_optimizer_state(optimizer, gradients_here, decisions, stackless, items, budget.evidence)) return decisions;
  budget.evidence.insert(budget.evidence.end(), gradient_evidence.begin(), gradient_evidence.end());
  if (by_gradients) return decisions;
  if (gradients.empty() && !match_copies(unexplained, decisions, stackless, items, budget.evidence)) {
    budget.evidence.push_back("the stack-less sizes match no gradient set and no multiple of one set: their kind is unknown");
  }
  return decisions;
}

// The rows of one moment, largest first.
void fill_rows(MemoryBudget& b, const std::vector<LiveItem>& items, const std::vector<Decision>& decisions) {
  std::map<std::tuple<Category, Provenance, KindSource>, BudgetRow> rows;
  for (std::size_t k = 0; k < items.size(); ++k) {
    // A block allocated in the window keeps "in_window"; the rest is "allocated before recording"
    // or, with no trace, of unknown provenance.
    const Decision& d = decisions[k];
    BudgetRow& row = rows[{d.kind, items[k].provenance, d.source}];
    row = {d.kind, items[k].provenance, d.source, row.bytes + items[k].bytes, row.blocks + 1, 0};
    ++b.blocks;
  }
  for (auto& [key, row] : rows) {
    row.share = b.live_bytes ? 100.0 * static_cast<double>(row.bytes) / static_cast<double>(b.live_bytes) : 0;
    b.rows.push_back(row);
  }
  std::stable_sort(b.rows.begin(), b.rows.end(), [](const BudgetRow& x, const BudgetRow& y) { return x.bytes > y.bytes; });
}

struct Moment {
  MemoryBudget budget;
  std::vector<LiveItem> items;
  std::vector<Category> rule_kinds;  // by item: stack_rule_kind for an item with a stack (Unknown without)
};

// Each item's stack rule kind, once (kind_sizes and decide read it).
void rule_kinds_of(const Snapshot& s, Moment& m, CategoryMemo& kinds) {
  m.rule_kinds.resize(m.items.size(), Category::Unknown);
  for (std::size_t k = 0; k < m.items.size(); ++k) {
    if (has_stack(s, m.items[k])) m.rule_kinds[k] = stack_rule_kind(s, m.items[k], kinds);
  }
}

// The sizes of the live blocks of `kind` with stacks at each moment (stack_rule_kind: gradients
// without the backward's temporaries). `kind` is never Unknown, the rule kind of an item without
// a stack, so the rule kinds alone pick the items with stacks.
std::vector<SizeCounts> kind_sizes(const std::vector<Moment>& moments, Category kind) {
  std::vector<SizeCounts> out;
  for (const Moment& m : moments) {
    SizeCounts& counts = out.emplace_back();
    for (std::size_t k = 0; k < m.items.size(); ++k) {
      if (m.rule_kinds[k] == kind) ++counts[m.items[k].requested];
    }
  }
  return out;
}

// The gradients' sizes: those live at the moment holding the most gradient bytes.
SizeCounts gradient_sizes(const std::vector<Moment>& moments) {
  SizeCounts best;
  for (SizeCounts& counts : kind_sizes(moments, Category::Gradient)) {
    if (bytes_of(counts) > bytes_of(best)) best = std::move(counts);
  }
  return best;
}

// The optimizer state's sizes at the moment holding the least of it (but some): its lasting
// moments, without the temporaries optimizer.step() allocates while it runs.
SizeCounts optimizer_sizes(const std::vector<Moment>& moments) {
  SizeCounts best;
  for (SizeCounts& counts : kind_sizes(moments, Category::OptimizerState)) {
    if (bytes_of(counts) > 0 && (best.empty() || bytes_of(counts) < bytes_of(best))) best = std::move(counts);
  }
  return best;
}

std::uint64_t non_negative(std::int64_t v) { return v > 0 ? static_cast<std::uint64_t>(v) : 0; }

// The moments of one device: the end, then (with a trace) the peak and each OOM.
std::vector<Moment> moments_of(const Snapshot& s, const std::vector<DeviceTimeline>& timelines, const DeviceTotals& d,
                               std::size_t first_oom) {
  std::vector<Moment> out;
  Moment& end = out.emplace_back();
  end.budget.device = d.device;
  end.budget.live_bytes = d.totals.allocated;
  end.items = final_live_items(s, timelines, d.device);
  const auto t = std::find_if(timelines.begin(), timelines.end(), [&](const DeviceTimeline& x) { return x.device == d.device; });
  if (t == timelines.end()) return out;
  end.budget.event_index = t->events;
  if (t->peak_allocated && peak_certainty(*t) == PeakCertainty::InWindow) {  // not a lower bound, not too short a window
    Moment& peak = out.emplace_back();
    peak.budget = {d.device, BudgetMoment::Peak, 0, t->peak_index, non_negative(*t->peak_allocated), 0, {}, {}, {}, {}};
    peak.items = t->live_at_peak;
  }
  for (std::size_t i = 0; i < t->live_at_oom.size() && i < t->studied_ooms.size(); ++i) {
    Moment& oom = out.emplace_back();
    const std::size_t at = studied_oom_event(*t, i);
    oom.budget = {d.device, BudgetMoment::Oom, first_oom + t->studied_ooms[i], at, non_negative(t->curve[at]), 0, {}, {}, {}, {}};
    oom.items = live_items(*t, t->live_at_oom[i]);
  }
  return out;
}

std::string capitalized(std::string text) {
  if (!text.empty()) text[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(text[0])));
  return text;
}

bool about(std::uint64_t value, std::uint64_t target) {
  const double v = static_cast<double>(value), t = static_cast<double>(target);
  return t > 0 && v >= 0.98 * t && v <= 1.02 * t;
}

// " (16 bytes a parameter)" when gradients equal the parameters and the optimizer state is twice
// them: fp32 weights, gradients and two AdamW moments.
std::string per_parameter_note(const std::array<std::uint64_t, kCategoryCount>& kinds) {
  const std::uint64_t params = kinds[static_cast<std::size_t>(Category::Parameter)];
  const bool adam = about(kinds[static_cast<std::size_t>(Category::Gradient)], params) &&
                    about(kinds[static_cast<std::size_t>(Category::OptimizerState)], 2 * params);
  return adam ? " (16 bytes a parameter: fp32 weights, gradients and two AdamW moments)" : "";
}

// What the reader must know about the stack-less part: how much came from before the recording,
// and, when most of it is of unknown kind, its sizes.
std::string stackless_note(const MemoryBudget& b) {
  std::uint64_t before = 0, unknown = 0;
  for (const BudgetRow& row : b.rows) {
    before += row.provenance == Provenance::BeforeWindow ? row.bytes : 0;
    unknown += row.kind == Category::Unknown && row.source == KindSource::NoEvidence ? row.bytes : 0;
  }
  const auto percent = [&](std::uint64_t x) { return 100.0 * static_cast<double>(x) / static_cast<double>(b.live_bytes); };
  // "all of it" rather than "100%" ("almost all of it" when it only rounds to 100%), and no
  // before-recording clause under 1% (never "0% was ...").
  const auto share = [&](std::uint64_t x) {
    return x >= b.live_bytes ? std::string("all of it") : percent(x) >= 99.5 ? std::string("almost all of it") : fmt::format("{:.0f}%", percent(x));
  };
  std::string out;
  if (b.live_bytes > 0 && percent(before) >= 1) out += fmt::format("; {} was allocated before recording", share(before));
  if (2 * unknown >= b.live_bytes && b.live_bytes > 0) {
    SizeCounts sizes;
    for (const SizeGroup& g : b.stackless_sizes) sizes[g.size] = g.count;
    out += fmt::format("; {} has no stack and matches no known set ({})", share(unknown), size_groups_text(sizes));
  }
  return out;
}

// A kind in the budget sentence, as an expert names it ("activations", "KV cache").
std::string kind_phrase(Category kind) {
  switch (kind) {
    case Category::Parameter: return "parameters";
    case Category::Gradient: return "gradients";
    case Category::OptimizerState: return "optimizer state";
    case Category::Activation: return "activations";
    case Category::Temporary: return "temporaries";
    case Category::Communication: return "communication buffers";
    case Category::KvCache: return "KV cache";
    case Category::AutocastCopy: return "autocast weight copies";
    case Category::Workspace: return "workspaces";
    case Category::UserContainer: return "user containers";
    case Category::Unknown: break;
  }
  return "unknown kind";
}

// "parameters 12.69 GiB, gradients 12.69 GiB, ..." (kinds_list), or ", all activations" when one
// kind holds everything.
std::string kinds_phrase(const std::vector<std::pair<Category, std::uint64_t>>& order) {
  if (order.size() == 1) {
    const Category only = order.front().first;
    return only == Category::Unknown ? ", all of unknown kind" : ", all " + kind_phrase(only);
  }
  return ": " + kinds_list(order, kind_phrase);
}

}  // namespace

std::vector<MemoryBudget> memory_budgets(const Snapshot& s, const std::vector<DeviceTimeline>& timelines, const TotalsReport& totals) {
  std::vector<MemoryBudget> out;
  CategoryMemo kinds(s);
  // OOMs are numbered as Measures::ooms: in timeline order.
  std::map<std::int64_t, std::size_t> first_oom;
  std::size_t n = 0;
  for (const DeviceTimeline& t : timelines) {
    first_oom[t.device] = n;
    n += t.oom_events.size();
  }
  for (const DeviceTotals& d : totals.devices) {
    std::vector<Moment> moments = moments_of(s, timelines, d, first_oom.count(d.device) ? first_oom[d.device] : 0);
    for (Moment& m : moments) rule_kinds_of(s, m, kinds);
    const SizeCounts gradients = gradient_sizes(moments);
    const SizeCounts optimizer = optimizer_sizes(moments);
    for (Moment& m : moments) {
      const std::vector<Decision> decisions = decide(s, m.items, m.rule_kinds, gradients, optimizer, m.budget);
      fill_rows(m.budget, m.items, decisions);
      out.push_back(std::move(m.budget));
    }
  }
  return out;
}

std::vector<std::string> budget_violations(const std::vector<MemoryBudget>& budgets) {
  std::vector<std::string> out;
  for (const MemoryBudget& b : budgets) {
    std::uint64_t sum = 0;
    bool absurd = b.live_bytes > kMaxPlausibleBytes;  // named by implausible_values already
    for (const BudgetRow& row : b.rows) {
      sum += row.bytes;
      absurd |= row.bytes > kMaxPlausibleBytes;
    }
    if (!absurd && sum != b.live_bytes) {
      out.push_back(fmt::format("device {}: the memory budget {} adds up to {} B but {} B are live", b.device, moment_text(b), sum,
                                b.live_bytes));
    }
  }
  return out;
}

std::array<std::uint64_t, EnumNames<Category>::names.size()> bytes_by_kind(const MemoryBudget& b) {
  std::array<std::uint64_t, kCategoryCount> out{};
  for (const BudgetRow& row : b.rows) out[static_cast<std::size_t>(row.kind)] += row.bytes;
  return out;
}

std::vector<std::pair<Category, std::uint64_t>> kinds_largest_first(const MemoryBudget& b) {
  const auto bytes = bytes_by_kind(b);
  std::vector<std::pair<Category, std::uint64_t>> out;
  for (std::size_t k = 0; k < bytes.size(); ++k) {
    if (bytes[k] > 0) out.emplace_back(static_cast<Category>(k), bytes[k]);
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& x, const auto& y) { return x.second > y.second; });
  return out;
}

const MemoryBudget* peak_budget(const std::vector<MemoryBudget>& budgets, std::int64_t device) {
  for (const MemoryBudget& b : budgets) {
    if (b.device == device && b.moment == BudgetMoment::Peak) return &b;
  }
  return nullptr;
}

std::string kind_text(Category kind) {
  std::string out(name_of(kind));
  std::replace(out.begin(), out.end(), '_', ' ');
  return out;
}

std::string kinds_list(std::vector<std::pair<Category, std::uint64_t>> kinds, std::string (*name)(Category)) {
  constexpr std::size_t kListed = 5;
  constexpr std::uint64_t kNegligible = 10000;  // under 1/10000 of the memory
  std::erase_if(kinds, [](const auto& kind) { return kind.second == 0; });
  std::uint64_t total = 0;
  for (const auto& kind : kinds) total += kind.second;
  while (kinds.size() > kListed + 1 && kinds.back().second * kNegligible < total) kinds.pop_back();
  const std::size_t listed = kinds.size() == kListed + 1 ? kinds.size() : std::min(kinds.size(), kListed);
  std::string out;
  for (std::size_t i = 0; i < listed; ++i) out += fmt::format("{}{} {}", i ? ", " : "", name(kinds[i].first), format_bytes(kinds[i].second));
  std::uint64_t rest = 0;
  for (std::size_t i = listed; i < kinds.size(); ++i) rest += kinds[i].second;
  if (rest > 0) out += fmt::format(", {} other kinds {}", kinds.size() - listed, format_bytes(rest));
  return out;
}

std::string moment_text(const MemoryBudget& b) {
  switch (b.moment) {
    case BudgetMoment::End: return "at the end";
    case BudgetMoment::Peak: return "at the peak";
    case BudgetMoment::Oom: return fmt::format("before OOM {}", b.oom + 1);
  }
  return "";
}

const MemoryBudget* main_budget(const std::vector<MemoryBudget>& budgets) {
  const MemoryBudget* best = nullptr;
  auto rank = [](const MemoryBudget& b) { return b.moment == BudgetMoment::Oom ? 2 : b.moment == BudgetMoment::Peak ? 1 : 0; };
  for (const MemoryBudget& b : budgets) {
    if (b.live_bytes == 0) continue;
    if (!best || rank(b) > rank(*best) || (rank(b) == rank(*best) && b.moment != BudgetMoment::Oom && b.live_bytes > best->live_bytes)) {
      best = &b;
    }
  }
  return best;
}

std::string budget_sentence(const MemoryBudget& b) {
  const auto kinds = bytes_by_kind(b);
  return fmt::format("{} {} is live on device {}{}{}{}.", capitalized(moment_text(b)), format_bytes(b.live_bytes), b.device,
                     kinds_phrase(kinds_largest_first(b)), per_parameter_note(kinds), stackless_note(b));
}

}  // namespace memsnap
