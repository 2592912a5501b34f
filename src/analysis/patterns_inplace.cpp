// out_of_place_activation: the allocation that makes a device's peak is an activation (relu,
// silu, dropout, ...) written to a new tensor while its input, a block of the same size, is freed
// right after it from the same line: both copies are live at the peak only because the op runs out
// of place. In place, the output reuses the input's memory; the saving is measured on the live
// curve (the peak may move to another moment of the trace).
#include <algorithm>
#include <array>
#include <limits>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "analysis/frame_filter.h"
#include "analysis/patterns_internal.h"
#include "base/plural.h"

namespace memsnap::patterns_detail {
namespace {

// The input's free may follow the output's alloc by a free_requested and the free_completed.
constexpr std::size_t kNearEvents = 4;
// The saving must be at least this much, and this share of the peak.
constexpr std::uint64_t kMinInplaceBytes = 64 * kMiB;
constexpr std::size_t kMinInplacePercent = 10;

// torch.nn.functional's activations and dropouts that take inplace=True.
constexpr std::array<std::string_view, 19> kFunctionalInplace = {
    "relu",      "relu6",       "hardtanh",  "leaky_relu", "elu",           "selu",                  "celu",
    "rrelu",     "silu",        "mish",      "hardswish",  "hardsigmoid",   "threshold",             "dropout",
    "dropout1d", "dropout2d",   "dropout3d", "alpha_dropout", "feature_alpha_dropout"};
// ATen's elementwise activations with an in-place variant (x.relu_(), torch.sigmoid_(x)).
constexpr std::array<std::string_view, 10> kAtenInplace = {"relu",      "silu",        "hardtanh", "leaky_relu", "elu",
                                                           "hardswish", "hardsigmoid", "mish",     "sigmoid",    "tanh"};

struct Activation {
  std::string_view op;
  bool functional = false;  // torch.nn.functional's (inplace=True), else a tensor method's (x.op_())
};

// The activation that allocated a block, by its stack: a torch/nn/functional.py frame of one of
// kFunctionalInplace, else an at::_ops::<op>::call frame of one of kAtenInplace.
std::optional<Activation> inplace_activation(const Snapshot& s, StackId stack) {
  if (stack == kNoStack) return std::nullopt;
  const FrameId* frames = s.stack_begin(stack);
  std::optional<Activation> aten;
  for (std::size_t i = 0; i < s.stack_size(stack); ++i) {
    const Frame& f = s.frames[frames[i]];
    const std::string_view name = s.str(f.name);
    if (s.str(f.filename).ends_with("torch/nn/functional.py")) {
      const auto it = std::ranges::find(kFunctionalInplace, name);
      return it == kFunctionalInplace.end() ? aten : std::optional<Activation>(Activation{*it, true});
    }
    constexpr std::string_view kOps = "at::_ops::";
    if (aten || !name.starts_with(kOps)) continue;
    const std::string_view op = name.substr(kOps.size(), name.find("::", kOps.size()) - kOps.size());
    if (const auto it = std::ranges::find(kAtenInplace, op); it != kAtenInplace.end()) aten = Activation{*it, false};
  }
  return aten;
}

// The innermost user frame of a stack (file and line), when it has one; each stack's once.
using UserLine = std::optional<std::pair<StrId, std::int64_t>>;
class UserLines {
 public:
  explicit UserLines(const Snapshot& s) : s_(s) {}
  const UserLine& operator()(StackId stack) {
    auto it = memo_.find(stack);
    if (it == memo_.end()) it = memo_.emplace(stack, find(stack)).first;
    return it->second;
  }

 private:
  UserLine find(StackId stack) const {
    if (stack == kNoStack) return std::nullopt;
    const SiteChoice choice = choose_site(s_, stack);
    if (!choice.found || choice.kind != FrameKind::User) return std::nullopt;
    const Frame& f = s_.frames[choice.frame];
    return std::pair{f.filename, f.line};
  }
  const Snapshot& s_;
  std::unordered_map<StackId, UserLine> memo_;
};

// The lifetime live at the peak that was allocated last: the allocation that made the peak.
const Lifetime* peak_allocation(const DeviceTimeline& t) {
  const Lifetime* last = nullptr;
  for (std::size_t i : t.lifetimes_at_peak) {
    const Lifetime& l = t.lifetimes[i];
    if (l.alloc != kBeforeWindow && (!last || l.alloc > last->alloc)) last = &l;
  }
  return last;
}

// Lifetimes of one size by the index of their free_completed event.
using FreedBySize = std::unordered_map<EventIndex, const Lifetime*>;

FreedBySize freed_of_size(const DeviceTimeline& t, std::uint64_t size) {
  FreedBySize out;
  for (const Lifetime& l : t.lifetimes) {
    if (l.size == size && l.free != kStillLive) out.emplace(l.free, &l);
  }
  return out;
}

// The input of an activation's output: the block freed by the first free_completed after the
// output's alloc, within kNearEvents, of the output's size, allocated before it, and freed from
// the output's own line when both stacks name one.
const Lifetime* freed_input(UserLines& lines, const TraceEvents& events, const FreedBySize& freed, const Lifetime& out) {
  const std::size_t to = std::min<std::size_t>(events.size(), std::size_t(out.alloc) + 1 + kNearEvents);
  for (std::size_t k = std::size_t(out.alloc) + 1; k < to; ++k) {
    if (events[k].action != Action::FreeCompleted) continue;
    const auto it = freed.find(static_cast<EventIndex>(k));
    if (it == freed.end()) return nullptr;
    const Lifetime& in = *it->second;
    if (in.alloc != kBeforeWindow && in.alloc > out.alloc) return nullptr;
    const UserLine& out_line = lines(out.stack);
    const UserLine& free_line = lines(in.free_stack);
    return out_line && free_line && *out_line != *free_line ? nullptr : &in;
  }
  return nullptr;
}

// Every time the peak's line ran out of place (its stack, each with its input freed right after):
// the states each pair was live together in, [first, last].
struct Overlap {
  std::size_t first, last;
};

std::vector<Overlap> out_of_place_runs(UserLines& lines, const DeviceTimeline& t, const TraceEvents& events, const FreedBySize& freed,
                                       const Lifetime& peak_out) {
  std::vector<Overlap> runs;
  for (const Lifetime& out : t.lifetimes) {
    if (out.stack != peak_out.stack || out.size != peak_out.size || out.alloc == kBeforeWindow) continue;
    if (const Lifetime* in = freed_input(lines, events, freed, out)) runs.push_back({std::size_t(out.alloc) + 1, in->free});
  }
  std::ranges::sort(runs, {}, &Overlap::first);
  return runs;
}

// The peak with every run in place: the curve less the output's size in the states of each run.
std::int64_t peak_in_place(const LiveCurve& curve, const std::vector<Overlap>& runs, std::uint64_t size) {
  std::int64_t peak = std::numeric_limits<std::int64_t>::min();
  std::size_t from = 0;  // the first state not yet counted
  for (const Overlap& r : runs) {
    if (r.first > from) peak = std::max(peak, curve.max_between(from, r.first - 1));
    const std::size_t first = std::max(from, r.first);
    if (r.last >= first) peak = std::max(peak, subtract_live_delta(curve.max_between(first, r.last), size));
    from = std::max(from, r.last + 1);
  }
  if (from < curve.size()) peak = std::max(peak, curve.max_between(from, curve.size() - 1));
  return peak;
}

std::string spelling(const Activation& a) {
  if (!a.functional) return fmt::format("x.{}_()", a.op);
  if (a.op == "relu") return "F.relu(x, inplace=True), nn.ReLU(inplace=True) or x.relu_()";
  return fmt::format("F.{}(x, ..., inplace=True), or the module's inplace=True", a.op);
}

}  // namespace

std::optional<Pattern> out_of_place_activation(const Snapshot& s, const DeviceTimeline& t, const DevicePhases& d) {
  if (!t.peak_allocated || t.curve.empty()) return std::nullopt;
  const Lifetime* out = peak_allocation(t);
  if (!out) return std::nullopt;
  const auto activation = inplace_activation(s, out->stack);
  if (!activation) return std::nullopt;
  const TraceEvents& events = s.events_of(t.device);
  UserLines lines(s);
  const FreedBySize freed = freed_of_size(t, out->size);
  const Lifetime* in = freed_input(lines, events, freed, *out);
  if (!in || !in->live_at(t.peak_index)) return std::nullopt;

  const auto peak = static_cast<std::uint64_t>(*t.peak_allocated);
  const std::vector<Overlap> runs = out_of_place_runs(lines, t, events, freed, *out);
  const std::int64_t lower = peak_in_place(t.curve, runs, out->size);
  if (lower < 0 || lower >= *t.peak_allocated) return std::nullopt;  // a curve below zero is a hostile file's
  const std::uint64_t saving = peak - static_cast<std::uint64_t>(lower);
  if (saving < kMinInplaceBytes || saving * 100 < peak * kMinInplacePercent) return std::nullopt;

  const bool same_line = lines(out->stack) && lines(in->free_stack);
  const std::string op(activation->op);
  const std::string out_site = site_label(s, out->stack);
  const std::string in_site = in->stack == kNoStack ? std::string("before the recording began") : site_label(s, in->stack);
  Pattern p;
  p.id = PatternId::OutOfPlaceActivation;
  p.verdict = Verdict::Problem;
  p.confidence = same_line ? Confidence::High : Confidence::Medium;
  p.saving_bytes = saving;
  p.summary = sentence("{} runs out of place at the peak: {} allocates {} while its input of the same size, from {}, is freed right "
                       "after it, so both copies are live at the peak",
                       op, out_site, Bytes(out->size), in_site);
  const std::string where = peak_place_text(d);
  p.evidence.push_back(sentence("the {} peak is reached{} by {}'s output ({}); the first block freed after it is one of the same size, "
                                "{} event{} later{}",
                                Bytes(peak), where.empty() ? std::string() : " in " + where, op, Bytes(out->size),
                                in->free - out->alloc, plural_s(in->free - out->alloc),
                                std::string(same_line ? ", from the same line" : "")));
  if (runs.size() > 1) {
    p.evidence.push_back(sentence("the same line runs out of place {} times in the trace, each time beside its input", runs.size()));
  }
  p.evidence.push_back(sentence("an activation's output has its input's shape and dtype, and nothing held the input past this line "
                                "(had autograd saved it for backward, it would not have been freed): writing the output into it "
                                "changes no other tensor"));
  p.evidence.push_back(sentence("in place, the live curve is {} lower while each output and its input were both live, and the peak "
                                "is {} ({:.0f}% lower{})",
                                Bytes(out->size), Bytes(lower), pct(double(saving), double(peak)),
                                std::string(saving < out->size ? ": another moment of the trace is then the highest" : "")));
  p.sites.push_back(out_site);
  p.fix.push_back(fix(FixId::InplaceActivation, op, out_site, spelling(*activation), Bytes(saving)));
  return p;
}

}  // namespace memsnap::patterns_detail
