// Frame classification, following the workflow's rule: attribute memory to the user's own code,
// skipping allocator, interpreter and framework internals. The kinds are one decision table
// over the frame facts; the patterns behind the facts are in model/frame_facts.cpp.
#include "analysis/frame_filter.h"

namespace memsnap {
namespace {

constexpr KindRule kKindRules[] = {
    {kNativeFile, 0, FrameKind::Native, "a C/C++/CUDA source, a shared object or no file (??:0)"},
    {kCxxName, kPythonFile, FrameKind::Native, "a C++ function name outside a Python file"},
    {kGeneratedCode, 0, FrameKind::Generated, "code torch.fx or Inductor generated"},
    {kTorchPath | kInstalledPackage, 0, FrameKind::Torch, "PyTorch installed as a package"},
    {kTorchPath | kPytorchCheckout, 0, FrameKind::Torch, "a PyTorch source checkout"},
    {kTorchPath, kHomeDir, FrameKind::Torch, "a torch/ folder outside a home directory"},
    {kInstalledPackage, 0, FrameKind::ThirdParty, "an installed package that is not PyTorch"},
    {kStdlibPath, 0, FrameKind::Stdlib, "the Python standard library or interpreter"},
    {0, 0, FrameKind::User, "anything else: the user's code (a torch/ folder in a home directory too)"},
};
static_assert(kKindRules[std::size(kKindRules) - 1].all_of == 0 && kKindRules[std::size(kKindRules) - 1].none_of == 0,
              "the last kind rule must match every frame");

constexpr FrameFacts kKindFacts = kNativeFile | kPythonFile | kCxxName | kGeneratedCode | kTorchPath | kInstalledPackage |
                                  kHomeDir | kPytorchCheckout | kStdlibPath;

// Choice slots, best first; a native frame takes none (it is chosen only when no Python frame is).
constexpr int kNoSlot = -1;
int slot_of(FrameKind kind) {
  switch (kind) {
    case FrameKind::User: return 0;
    case FrameKind::ThirdParty: return 1;
    case FrameKind::Torch: return 2;
    case FrameKind::Native: return kNoSlot;
    case FrameKind::Stdlib: case FrameKind::Generated: return 3;
  }
  return 3;
}

}  // namespace

const char* frame_kind_name(FrameKind kind) {
  switch (kind) {
    case FrameKind::User: return "user";
    case FrameKind::ThirdParty: return "third_party";
    case FrameKind::Torch: return "torch";
    case FrameKind::Stdlib: return "stdlib";
    case FrameKind::Native: return "native";
    case FrameKind::Generated: return "generated";
  }
  return "native";
}

std::span<const KindRule> frame_kind_rules() { return kKindRules; }

const KindRule& kind_rule(FrameFacts facts) {
  for (const KindRule& rule : kKindRules) {
    if ((facts & rule.all_of) == rule.all_of && (facts & rule.none_of) == 0) return rule;
  }
  return kKindRules[std::size(kKindRules) - 1];
}

FrameKind frame_kind(FrameFacts facts) { return kind_rule(facts).kind; }

FrameKind classify_frame(std::string_view filename, std::string_view name) {
  return frame_kind(frame_facts(filename, name, kKindFacts));
}

bool is_omitted_frame(std::string_view filename, std::string_view name) {
  return frame_facts(filename, name, kOmitted) != 0;
}

SiteChoice choose_site(const Snapshot& s, StackId stack) {
  const std::size_t n = s.stack_size(stack);
  const FrameId* frames = s.stack_begin(stack);
  SiteChoice best[4];  // user, third-party, torch, any python
  SiteChoice native, backward_node;
  for (std::size_t i = 0; i < n; ++i) {
    const FrameFacts facts = s.frames[frames[i]].facts;
    const FrameKind kind = frame_kind(facts);
    const SiteChoice here{frames[i], kind, i, true};
    const int slot = slot_of(kind);
    if (slot == 0) return here;
    if (slot > 0 && !best[slot].found) best[slot] = here;
    if (slot == kNoSlot && !backward_node.found && (facts & kBackwardNode)) backward_node = here;
    if (slot == kNoSlot && !native.found && !(facts & (kOmitted | kUninformative))) native = here;
  }
  for (int slot = 1; slot < 4; ++slot) {
    if (best[slot].found) return best[slot];
  }
  if (backward_node.found) return backward_node;  // e.g. torch::autograd::generated::MmBackward0::apply
  if (native.found) return native;
  if (n > 0) return {frames[0], FrameKind::Native, 0, true};
  return {};
}

}  // namespace memsnap
