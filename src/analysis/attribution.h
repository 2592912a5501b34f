// Where the memory went: live blocks grouped by the most useful user frame, with a category
// inferred from the stack (parameter, gradient, optimizer state, activation, ...) by one
// decision table over the frames' facts.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <unordered_map>
#include <string>
#include <vector>

#include "base/enum_names.h"
#include "analysis/frame_filter.h"
#include "analysis/known_allocators.h"
#include "analysis/provenance.h"
#include "model/snapshot.h"

namespace memsnap {

// The kinds of memory. kv_cache: inference KV caches; autocast_copy: autocast's casts of the
// weights; workspace: cuBLAS / CUDA-graph / Inductor workspaces. Unknown stays last.
enum class Category {
  Parameter, Gradient, OptimizerState, Activation, Temporary, Communication, KvCache, AutocastCopy, Workspace, UserContainer, Unknown
};
template <>
struct EnumNames<Category> {
  static constexpr std::array<std::string_view, 11> names = {
      "parameter", "gradient",      "optimizer_state", "activation", "temporary", "communication",
      "kv_cache",  "autocast_copy", "workspace",       "user_container", "unknown"};
};
inline const char* category_name(Category c) { return name_of(c).data(); }

// What a stack's frames show for its category: the innermost position of each decisive frame
// (kNever: none) and whether any frame shows the others.
struct StackSignals {
  static constexpr std::size_t kNever = static_cast<std::size_t>(-1);
  std::size_t optimizer = kNever;  // torch/optim/
  std::size_t backward = kNever;   // tensor.backward() / autograd.grad()
  std::size_t forward = kNever;    // forward / Module.__call__
  std::size_t functional = kNever; // torch.nn.functional
  bool communication = false;
  bool autograd_engine = false;
  bool parameter_init = false;
  bool python = false;             // any frame that is not native
  KnownMatch known;                // the stack's known-allocator entry, if any
  std::size_t known_position() const { return known.entry ? known.position : kNever; }
};
StackSignals stack_signals(const Snapshot& snapshot, StackId stack);

// One row of the category table: the first row that holds gives the category.
struct CategoryRule {
  bool (*holds)(const StackSignals&);
  Category category;
  std::string_view reason;
  bool from_known_allocator = false;  // the category is the known-allocator entry's kind
};
std::span<const CategoryRule> category_rules();
const CategoryRule& category_rule(const StackSignals& signals);

// Category from the stack's frames alone (no trace evidence).
Category categorize_stack(const Snapshot& snapshot, StackId stack);

// categorize_stack, each stack decided once (a moment or a walk meets millions of blocks on a few
// thousand stacks): an array by stack id.
class CategoryMemo {
 public:
  explicit CategoryMemo(const Snapshot& s) : s_(s) {}
  Category operator()(StackId stack) {
    if (stack >= kinds_.size()) kinds_.resize(std::max<std::size_t>(stack + 1, s_.stack_count()), kNotYet);
    std::uint8_t& k = kinds_[stack];
    if (k == kNotYet) k = static_cast<std::uint8_t>(categorize_stack(s_, stack));
    return static_cast<Category>(k);
  }

 private:
  static constexpr std::uint8_t kNotYet = 0xff;
  const Snapshot& s_;
  std::vector<std::uint8_t> kinds_;  // by stack: its Category, or kNotYet
};

// Bytes and blocks of one kind among a site's blocks.
struct SiteKind {
  Category kind = Category::Unknown;
  std::uint64_t bytes = 0;
  std::uint64_t blocks = 0;
  bool operator==(const SiteKind&) const = default;
};

struct Site {
  bool no_stack = false;    // the "[no stack recorded]" bucket
  std::int64_t device = -1; // the device of its blocks: a site is per device (-1: none, e.g. pinned host memory)
  FrameId frame = 0;        // the chosen frame (when !no_stack)
  FrameKind kind = FrameKind::Native;
  std::string site;         // "file:line", or "[no stack recorded]"
  std::string file;
  std::int64_t line = 0;
  std::string function;
  std::uint64_t bytes = 0;  // rounded block bytes (or trace sizes, for timeline sets)
  std::uint64_t requested = 0;
  std::uint64_t blocks = 0;
  double percent = 0;       // of the attributed total
  Category category = Category::Unknown;
  // The kinds of its blocks other than `category` that hold at least 1% of its bytes and 1 MiB,
  // largest first: a line whose call allocates two kinds (vllm.LLM(): the KV cache and the model's
  // weights) says both.
  std::vector<SiteKind> other_kinds;
  StackId example_stack = kNoStack;  // the stack of the largest contribution
  std::vector<std::string> call_path;  // Python frames from the site outward, "file:line:function"
  bool via_forward_frames = false;  // the site is the forward line of a backward allocation (forward_frames)
  bool via_fx_original_trace = false;  // the site is the model line of compiled code (fx_original_trace)
  // From the allocations' tags (analysis/allocation_tags.h): the compiled region (sites never
  // span two), the user_metadata labels and annotate texts of its allocations (each once).
  std::string region;
  std::vector<std::string> labels;
  std::vector<std::string> notes;
  std::string group;  // "label" / "region": a row of --group-by label|region (site: the label or region)
  // What the memory is (analysis/site_what.h), from the example stack's frames below the site:
  std::string what;                    // "vllm/worker/cache_engine.py:_allocate_kv_cache", "" when none
  std::string what_frame;              // that frame as "file:line:function"
  std::string what_op;                 // the innermost informative C++ frame ("at::native::bmm"), "" when none
  const KnownAllocator* known = nullptr;  // the matched known-allocator entry
  std::vector<std::string> full_stack;    // only for a site read back from a JSON report (query/merge)
  std::array<std::uint64_t, kProvenanceCount> bytes_by_provenance{};  // bytes, indexed by Provenance
};

// One allocation to attribute: a live block or a live trace allocation.
struct LiveItem {
  StackId stack = kNoStack;
  std::uint64_t bytes = 0;
  std::uint64_t requested = 0;
  Provenance provenance = Provenance::InWindow;
  std::int64_t device = -1;  // its device (-1: none)
  StackId free_stack = kNoStack;  // a moment's item freed later in the trace: the free's stack
};

// The site a stack is attributed to (bytes and blocks zero), from choose_site's choice.
Site describe_site(const Snapshot& snapshot, StackId stack, const SiteChoice& choice);

// What the site tables' rows are (--group-by): sites (split by compiled region), compiled
// regions, or user_metadata labels.
enum class SiteGrouping { Site, Region, Label };
template <>
struct EnumNames<SiteGrouping> {
  static constexpr std::array<std::string_view, 3> names = {"site", "region", "label"};
};

// Each stack's chosen frame and description, worked out once for all the live sets one analysis
// attributes (the end, the peak, every OOM). Not thread-safe.
class SiteCache {
 public:
  explicit SiteCache(const Snapshot& snapshot, SiteGrouping grouping = SiteGrouping::Site) : snapshot_(snapshot), grouping_(grouping) {}
  // The row of `stack`: its chosen frame + 1 (0: no frame, the "[no stack recorded]" site) and
  // its compiled region; or, grouped by region or label, the tag's region or label.
  std::uint64_t key(StackId stack);
  // The chosen frame + 1 in a key of grouping Site (0: the "[no stack recorded]" site).
  static std::uint64_t frame_of_key(std::uint64_t key) { return key & ((std::uint64_t{1} << 33) - 1); }
  SiteGrouping grouping() const { return grouping_; }
  // describe_site() of `stack`.
  const Site& describe(StackId stack);
  Category category(StackId stack) const { return categorize_stack(snapshot_, stack); }
  // A Python-only stack's block of cuBLAS's default workspace size (cublas_workspace_by_size).
  bool workspace_by_size(StackId stack, std::uint64_t requested) const;

 private:
  struct Entry {
    SiteChoice choice;
    std::unique_ptr<Site> site;  // described on first use
  };
  Entry& entry(StackId stack);
  const Snapshot& snapshot_;
  SiteGrouping grouping_ = SiteGrouping::Site;
  std::unordered_map<StackId, Entry> entries_;
};

// Groups items by site and device, largest first (a line that allocates on two devices is two
// sites); blocks without a stack form the "[no stack recorded]" site of their device.
std::vector<Site> attribute(const std::vector<LiveItem>& items, SiteCache& cache);
std::vector<Site> attribute(const Snapshot& snapshot, const std::vector<LiveItem>& items);

// The live (active_allocated) blocks of the final state, optionally of one device only.
std::vector<LiveItem> live_blocks(const Snapshot& snapshot, std::int64_t device = -1);

// "file:line" of the frame a stack is attributed to, or "" for an empty stack.
std::string site_label(const Snapshot& snapshot, StackId stack);

// Formats a frame as "file:line:function".
std::string format_frame(const Snapshot& snapshot, FrameId frame);

}  // namespace memsnap
