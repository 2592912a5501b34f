// Site attribution and category inference for live memory.
#include "analysis/attribution.h"

#include <algorithm>
#include <array>
#include <fmt/format.h>
#include <unordered_map>

#include "analysis/allocation_tags.h"
#include "analysis/known_allocators.h"
#include "analysis/site_what.h"

namespace memsnap {
namespace {

constexpr std::size_t kCallPathFrames = 12;

std::vector<std::string> call_path(const Snapshot& s, StackId stack, std::size_t from) {
  std::vector<std::string> path;
  const FrameId* frames = s.stack_begin(stack);
  for (std::size_t i = from; i < s.stack_size(stack) && path.size() < kCallPathFrames; ++i) {
    if (frame_kind(s.frames[frames[i]].facts) == FrameKind::Native && i != from) continue;
    path.push_back(format_frame(s, frames[i]));
  }
  return path;
}

// C++ signatures lose their parameter lists ("at::native::mm(at::Tensor const&, ...)" ->
// "at::native::mm"); Python names stay as they are.
std::string display_function(std::string_view name, FrameKind kind) {
  if (kind != FrameKind::Native || name.find("::") == std::string_view::npos) return std::string(name);
  const auto paren = name.find('(');
  if (paren == std::string_view::npos || paren == 0 || name.substr(0, paren).ends_with("operator")) return std::string(name);
  return std::string(name.substr(0, paren));
}

}  // namespace

std::string site_label(const Snapshot& s, StackId stack) {
  const SiteChoice c = choose_site(s, stack);
  if (!c.found) return "";
  const Frame& f = s.frames[c.frame];
  return fmt::format("{}:{}", s.str(f.filename), f.line);
}

std::string format_frame(const Snapshot& s, FrameId frame) {
  const Frame& f = s.frames[frame];
  return fmt::format("{}:{}:{}", s.str(f.filename), f.line, s.str(f.name));
}

// Frames are innermost first, so the innermost decisive frame wins: a forward or backward pass
// run inside optimizer.step(closure) (as Lightning does) is activation or gradient memory, not
// optimizer state.
StackSignals stack_signals(const Snapshot& s, StackId stack) {
  StackSignals out;
  const FrameId* frames = s.stack_begin(stack);
  for (std::size_t i = 0; i < s.stack_size(stack); ++i) {
    const FrameFacts facts = s.frames[frames[i]].facts;
    auto innermost = [&](std::size_t& position, FrameFacts fact) {
      if (position == StackSignals::kNever && (facts & fact)) position = i;
    };
    innermost(out.optimizer, kOptimizerCode);
    innermost(out.backward, kBackwardCall);
    innermost(out.forward, kForwardCall);
    innermost(out.functional, kFunctionalOp);
    out.communication |= (facts & kCommunication) != 0;
    out.autograd_engine |= (facts & kAutogradEngine) != 0;
    out.parameter_init |= (facts & kParameterInit) != 0;
    out.python |= frame_kind(facts) != FrameKind::Native;
  }
  out.known = match_known_allocator(s, stack, s.stack_facts(stack));
  return out;
}

namespace {

constexpr CategoryRule kCategoryRules[] = {
    {[](const StackSignals& g) { return g.known_position() < g.forward && g.known_position() < g.backward; }, Category::Unknown,
     "a known allocator (known_allocators.cpp) inside any forward or backward call: its entry's kind", true},
    {[](const StackSignals& g) { return g.communication; }, Category::Communication,
     "a torch.distributed, c10d or NCCL frame anywhere on the stack"},
    {[](const StackSignals& g) { return g.optimizer != g.kNever && g.optimizer < g.backward && g.optimizer < g.forward; },
     Category::OptimizerState, "torch/optim/ inside any backward or forward call"},
    {[](const StackSignals& g) { return g.backward != g.kNever && g.backward < g.forward; }, Category::Gradient,
     "backward() or autograd.grad() inside any forward call"},
    {[](const StackSignals& g) { return g.autograd_engine && (!g.python || g.forward == g.kNever); }, Category::Gradient,
     "the C++ autograd engine, with no Python forward call around it"},
    {[](const StackSignals& g) { return g.parameter_init; }, Category::Parameter,
     "creating, loading or moving a module's parameters"},
    {[](const StackSignals& g) { return g.forward != g.kNever; }, Category::Activation, "inside a forward call"},
    {[](const StackSignals& g) { return g.functional != g.kNever; }, Category::Activation,
     "a torch.nn.functional op with no module call around it (F.relu at a script's top level): the computation's output"},
    {[](const StackSignals&) { return true; }, Category::Unknown, "no decisive frame"},
};

}  // namespace

std::span<const CategoryRule> category_rules() { return kCategoryRules; }

const CategoryRule& category_rule(const StackSignals& signals) {
  for (const CategoryRule& rule : kCategoryRules) {
    if (rule.holds(signals)) return rule;
  }
  return kCategoryRules[std::size(kCategoryRules) - 1];
}

Category categorize_stack(const Snapshot& s, StackId stack) {
  if (const auto tagged = tag_kind(s, stack)) return tagged->kind;
  const StackSignals signals = stack_signals(s, stack);
  const CategoryRule& rule = category_rule(signals);
  return rule.from_known_allocator ? signals.known.entry->kind : rule.category;
}

std::vector<LiveItem> live_blocks(const Snapshot& s, std::int64_t device) {
  std::vector<LiveItem> items;
  for (const Segment& seg : s.segments) {
    if (device >= 0 && seg.device != device) continue;
    for (std::uint32_t i = 0; i < seg.block_count; ++i) {
      const Block& b = s.blocks[seg.first_block + i];
      if (b.state == BlockState::ActiveAllocated) items.push_back({b.stack, b.size, b.requested_size, Provenance::InWindow, seg.device});
    }
  }
  return items;
}

Site describe_site(const Snapshot& s, StackId stack, const SiteChoice& choice) {
  Site site;
  site.example_stack = stack;
  if (!choice.found) {
    site.no_stack = true;
    site.site = "[no stack recorded]";
    add_tag_texts(s, stack, site);
    return site;
  }
  const Frame& f = s.frames[choice.frame];
  site.via_forward_frames = s.forward_attributed_stack(stack);
  site.via_fx_original_trace = s.fx_attributed_stack(stack);
  add_tag_texts(s, stack, site);
  site.frame = choice.frame;
  site.kind = choice.kind;
  site.file = std::string(s.str(f.filename));
  site.line = f.line;
  site.function = display_function(s.str(f.name), choice.kind);
  site.site = fmt::format("{}:{}", site.file, site.line);
  site.call_path = call_path(s, stack, choice.position);
  site.category = categorize_stack(s, stack);
  describe_what(s, stack, choice.position, site);
  return site;
}

SiteCache::Entry& SiteCache::entry(StackId stack) {
  auto [it, inserted] = entries_.try_emplace(stack);
  if (inserted && stack != kNoStack) it->second.choice = choose_site(snapshot_, stack);
  return it->second;
}

std::uint64_t SiteCache::key(StackId stack) {
  const AllocationTag& tag = snapshot_.tag_of(stack);
  if (grouping_ == SiteGrouping::Region) return tag.region;
  if (grouping_ == SiteGrouping::Label) return tag.label;
  const SiteChoice& c = entry(stack).choice;
  return (c.found ? std::uint64_t(c.frame) + 1 : 0) | std::uint64_t(tag.region) << 33;  // frame + 1 takes 33 bits
}

const Site& SiteCache::describe(StackId stack) {
  Entry& e = entry(stack);
  if (!e.site) e.site = std::make_unique<Site>(describe_site(snapshot_, stack, e.choice));
  return *e.site;
}

std::vector<Site> attribute(const Snapshot& s, const std::vector<LiveItem>& items) {
  SiteCache cache(s);
  return attribute(items, cache);
}

bool SiteCache::workspace_by_size(StackId stack, std::uint64_t requested) const {
  return cublas_workspace_by_size(snapshot_, stack, requested);
}

namespace {

// The kinds besides a site's own (`main`) worth saying: at least 1% of the site and 1 MiB.
constexpr std::uint64_t kOtherKindFloor = std::uint64_t(1) << 20;
template <std::size_t N>
std::vector<SiteKind> other_kinds(const std::array<std::uint64_t, N>& bytes, const std::array<std::uint64_t, N>& blocks, std::size_t main,
                                   std::uint64_t site_bytes) {
  std::vector<SiteKind> out;
  for (std::size_t k = 0; k < N; ++k) {
    if (k == main || bytes[k] < kOtherKindFloor || bytes[k] * 100 < site_bytes) continue;
    out.push_back({static_cast<Category>(k), bytes[k], blocks[k]});
  }
  std::stable_sort(out.begin(), out.end(), [](const SiteKind& x, const SiteKind& y) { return x.bytes > y.bytes; });
  return out;
}

// A site whose largest block is cuBLAS's workspace told by its size: the known entry's name and
// note, and how it was told.
void say_workspace_by_size(Site& site) {
  site.category = Category::Workspace;
  site.known = find_known_allocator("cublas_workspace");
  const std::string size = fmt::format("{}, its default size before Hopper", kDefaultCublasWorkspaceText);
  site.what = site.what.empty() ? size : fmt::format("{}, at {}", size, site.what);
}

}  // namespace

std::vector<Site> attribute(const std::vector<LiveItem>& items, SiteCache& cache) {
  // Stacks repeat a lot: look each (device, stack)'s site up once. Items come device by device,
  // so the maps are per device and start again when the device changes.
  std::unordered_map<std::int64_t, std::unordered_map<StackId, std::size_t>> site_of_stack_by_device;
  std::unordered_map<std::int64_t, std::unordered_map<std::uint64_t, std::size_t>> site_index_by_device;  // frame id + 1 (0 = no stack)
  std::int64_t device = 0;
  std::unordered_map<StackId, std::size_t>* site_of_stack = nullptr;
  std::unordered_map<std::uint64_t, std::size_t>* site_index = nullptr;
  // Per site and category: the bytes, and the largest allocation (stack, bytes).
  constexpr std::size_t kKinds = EnumNames<Category>::names.size();
  struct Kinds {
    std::array<std::uint64_t, kKinds> bytes{};
    std::array<std::uint64_t, kKinds> blocks{};
    std::array<std::pair<StackId, std::uint64_t>, kKinds> largest{};
    std::array<bool, kKinds> largest_by_size{};  // that largest is a workspace told by its size
  };
  std::unordered_map<std::size_t, Kinds> kinds;
  std::vector<Site> sites;
  std::uint64_t total = 0;
  for (const LiveItem& item : items) {
    total += item.bytes;
    if (!site_of_stack || item.device != device) {
      device = item.device;
      site_of_stack = &site_of_stack_by_device[device];
      site_index = &site_index_by_device[device];
    }
    std::size_t idx;
    if (auto it = site_of_stack->find(item.stack); it != site_of_stack->end()) {
      idx = it->second;
    } else {
      auto [pos, inserted] = site_index->emplace(cache.key(item.stack), sites.size());
      if (inserted) {
        sites.push_back(cache.grouping() == SiteGrouping::Site ? cache.describe(item.stack)
                                                               : group_row(cache.describe(item.stack), cache.grouping()));
        sites.back().device = device;
      }
      idx = pos->second;
      site_of_stack->emplace(item.stack, idx);
    }
    Site& site = sites[idx];
    if (item.stack != kNoStack) merge_tag_texts(cache.describe(item.stack), site);
    site.bytes += item.bytes;
    site.requested += item.requested;
    site.bytes_by_provenance[static_cast<std::size_t>(item.provenance)] += item.bytes;
    ++site.blocks;
    const bool by_size = item.stack != kNoStack && cache.workspace_by_size(item.stack, item.requested);
    const auto kind = static_cast<std::size_t>(item.stack == kNoStack ? Category::Unknown
                                               : by_size             ? Category::Workspace
                                                                     : cache.describe(item.stack).category);
    Kinds& k = kinds[idx];
    k.bytes[kind] += item.bytes;
    ++k.blocks[kind];
    if (item.bytes >= k.largest[kind].second) {
      k.largest[kind] = {item.stack, item.bytes};
      k.largest_by_size[kind] = by_size;
    }
  }
  // A site's category is the one holding most of its bytes (a backward node's 32 MiB cuBLAS
  // workspace does not make its gradients a workspace); its example, what and entry are the
  // largest allocation of that category.
  for (auto& [idx, k] : kinds) {
    const auto kind = static_cast<std::size_t>(std::max_element(k.bytes.begin(), k.bytes.end()) - k.bytes.begin());
    sites[idx].example_stack = k.largest[kind].first;
    if (sites[idx].no_stack) continue;
    const Site& largest_stack = cache.describe(k.largest[kind].first);
    sites[idx].category = largest_stack.category;
    sites[idx].what = largest_stack.what;
    sites[idx].what_frame = largest_stack.what_frame;
    sites[idx].what_op = largest_stack.what_op;
    sites[idx].known = largest_stack.known;
    if (k.largest_by_size[kind]) say_workspace_by_size(sites[idx]);
    sites[idx].other_kinds = other_kinds(k.bytes, k.blocks, kind, sites[idx].bytes);
  }
  for (Site& site : sites) site.percent = total ? 100.0 * static_cast<double>(site.bytes) / static_cast<double>(total) : 0;
  std::stable_sort(sites.begin(), sites.end(), [](const Site& a, const Site& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.site != b.site ? a.site < b.site : a.device < b.device;
  });
  return sites;
}

}  // namespace memsnap
