// The snapshot model: segments, blocks, trace events, interned frames and stacks, settings and
// annotations, plus counters for what the reader tolerated (unknown keys and actions).
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/enum_names.h"
#include "base/big_vector.h"
#include "model/frame_facts.h"
#include "model/pool_id.h"

namespace memsnap {

using StrId = std::uint32_t;
using FrameId = std::uint32_t;
using StackId = std::uint32_t;
inline constexpr StackId kNoStack = 0;  // stack 0 is the empty stack

enum class BlockState : std::uint8_t { ActiveAllocated, ActivePendingFree, Inactive, Unknown };
template <>
struct EnumNames<BlockState> {
  static constexpr std::array<std::string_view, 4> names = {"active_allocated", "active_pending_free", "inactive", "unknown"};
};
inline const char* block_state_name(BlockState state) { return name_of(state).data(); }

enum class Action : std::uint8_t {
  Alloc,
  FreeRequested,
  FreeCompleted,
  SegmentAlloc,
  SegmentFree,
  SegmentMap,
  SegmentUnmap,
  Snapshot,
  Oom,
  UserDefined,
  Annotate,
  Unknown,
};
inline constexpr int kActionCount = static_cast<int>(Action::Unknown) + 1;
const char* action_name(Action action);
Action parse_action(std::string_view name);

struct Frame {
  StrId filename = 0;
  StrId name = 0;
  std::int64_t line = 0;
  FrameFacts facts = 0;  // frame_facts(filename, name), set when the frame is interned
};

struct Block {
  std::uint64_t address = 0;
  std::uint64_t size = 0;
  std::uint64_t requested_size = 0;
  BlockState state = BlockState::Unknown;
  StackId stack = kNoStack;
  bool from_history = false;  // frames/requested size came from the legacy `history` list
};

struct Segment {
  std::int64_t device = 0;
  std::uint64_t address = 0;
  std::uint64_t total_size = 0;
  std::uint64_t allocated_size = 0;
  std::uint64_t active_size = 0;
  std::uint64_t requested_size = 0;
  std::int64_t stream = 0;
  bool is_large = true;
  bool is_expandable = false;
  std::int64_t pool_id[2] = {0, 0};
  StackId stack = kNoStack;
  std::uint32_t first_block = 0;  // index into Snapshot::blocks
  std::uint32_t block_count = 0;
  StackId forward_stack = kNoStack;  // forward_frames (anomaly mode), innermost first
  PoolId pool() const { return {pool_id[0], pool_id[1]}; }
};

using StreamId = std::uint16_t;  // index into Snapshot::streams
inline constexpr std::size_t kMaxStreams = 65535;

// 32 bytes: a 1 GB snapshot holds over 12 million of these.
struct TraceEvent {
  std::uint64_t addr = 0;  // for oom: device_free
  std::uint64_t size = 0;
  std::int64_t time_us = 0;
  StackId stack = kNoStack;
  StreamId stream_id = 0;  // the stream is Snapshot::streams[stream_id]
  Action action = Action::Unknown;
  bool has_time = false;
};
static_assert(sizeof(TraceEvent) == 32);

using TraceEvents = BigVector<TraceEvent>;

// Any size above this (1 PiB) is beyond any device memory there is.
inline constexpr std::uint64_t kMaxPlausibleBytes = 1ull << 50;
// Trace times are microseconds since the epoch (about 2^51 today); beyond 2^60 is not a time.
inline constexpr std::int64_t kMaxPlausibleTimeUs = std::int64_t{1} << 60;

// The two rules, shared by the event store's pass and the plausibility check's walk: a size above
// kMaxPlausibleBytes (an oom's excepted), a time outside [0, kMaxPlausibleTimeUs].
inline bool implausible_size(const TraceEvent& e) { return e.action != Action::Oom && e.size > kMaxPlausibleBytes; }
inline bool implausible_time(const TraceEvent& e) { return e.has_time && (e.time_us < 0 || e.time_us > kMaxPlausibleTimeUs); }

// The first implausible values of a device's events, found by the event store's pass while the
// events were read, so the analysis does not walk them again (analysis/plausibility.h). It stands
// for the events as the store left them: none dropped and `events` their number (nothing after
// the store changes an event's size or time).
struct TraceScan {
  static constexpr std::uint64_t kNone = ~std::uint64_t{0};
  std::uint64_t events = 0;  // events scanned (0 with events kept: not scanned, the check walks them)
  std::uint64_t first_huge_size = kNone;  // event index
  std::uint64_t first_bad_time = kNone;
};

struct EventPairs;  // model/event_pairing.h

// The alloc/free pairing of a device's events, made while the reader stored them, handed to the
// analysis once: take() gives it to the first caller (thread-safe) and nothing afterwards; a copy
// of the snapshot starts without it. Whoever finds nothing pairs the events itself, with the same
// result, so taking it changes nothing a reader of the snapshot can see.
class PairsHandOver {
 public:
  PairsHandOver() = default;
  ~PairsHandOver();
  PairsHandOver(const PairsHandOver&) {}
  PairsHandOver& operator=(const PairsHandOver&);
  PairsHandOver(PairsHandOver&& other) noexcept : pairs_(other.pairs_.exchange(nullptr)) {}
  PairsHandOver& operator=(PairsHandOver&& other) noexcept;
  void put(std::unique_ptr<EventPairs> pairs);
  std::unique_ptr<EventPairs> take() const;
  void drop();

 private:
  mutable std::atomic<EventPairs*> pairs_{nullptr};
};

struct DeviceTrace {
  TraceEvents events;  // chronological, at most max_trace_events
  std::uint64_t total = 0;         // entries in the file for this device
  std::uint64_t dropped = 0;       // oldest entries not kept (--max-trace-events)
  PairsHandOver pairs;             // when none was dropped and the events are as stored
  TraceScan scan;                  // the same pass's implausible values
};

// What a 2026 trace entry says beyond the fields of TraceEvent, kept only for the entries that
// say something (a pool other than the default, metadata, a compiled region, forward frames):
// `entry` is the entry's position in its device's list in the file (kept index + dropped).
struct EventFacts {
  std::uint64_t entry = 0;
  PoolId pool;                       // pool_id
  StrId user_metadata = 0;           // "" when none
  StrId compile_context = 0;         // "" when none or "N/A"
  StrId internal_metadata = 0;
  StackId forward_stack = kNoStack;  // forward_frames, innermost first
  StrId category = 0;                // category (profiler-derived snapshots), "" when none
};

// What an allocation says about itself beyond its frames (2026 keys): its compiled region
// (compile_context), its user_metadata label, the text of the annotate entries on it ("; "
// between several) and its profiler category. An allocation with one gets a stack of its own
// (the same frames under a new id) tagged with it, so sites can tell regions and labels apart.
struct AllocationTag {
  StrId region = 0;
  StrId label = 0;
  StrId note = 0;
  StrId category = 0;
  bool empty() const { return region == 0 && label == 0 && note == 0 && category == 0; }
  bool operator==(const AllocationTag&) const = default;
};

// A frame of FX-generated code with the keys _snapshot(augment_with_fx_traces=True) adds:
// the node's op, name and target, and fx_original_trace (the model's lines, innermost first).
struct FxFrame {
  FrameId frame = 0;
  StrId node_op = 0;
  StrId node_name = 0;
  StrId node_target = 0;
  StackId original = kNoStack;
};

// Pinned host memory (host_segments, host_traces; PyTorch 2026): the host allocator's own
// segments and history, kept apart from the devices'.
struct HostMemory {
  bool present = false;             // the file has host_segments or host_traces
  std::vector<Segment> segments;    // device -1; blocks in `blocks`
  std::vector<Block> blocks;
  std::vector<TraceEvent> events;   // host_traces, in file order
  std::uint64_t events_in_file = 0;
};

struct Annotation {
  std::int64_t device = -1;
  std::int64_t time_us = 0;
  std::string name;
  std::string stage;
  std::string json;  // the whole entry as JSON, for `dump`
};

struct AllocatorSettings {
  bool present = false;
  std::optional<std::int64_t> max_split_size;  // nullopt or -1: unlimited
  std::optional<bool> expandable_segments;
  // roundup_power2_divisions: divisions per power-of-two interval of request sizes, interval k
  // holding sizes in [2^k MiB, 2^(k+1) MiB) (the first also everything smaller, the last also
  // everything larger); 0 or 1: plain 512-byte rounding.
  std::array<std::uint32_t, 16> roundup_power2_divisions{};
  std::string conf;  // PYTORCH_CUDA_ALLOC_CONF string
  std::string json;  // the whole dict as JSON, for `dump` and reports
};

struct Snapshot {
  // Interned strings; id 0 is "".
  std::vector<std::string> strings;
  std::vector<Frame> frames;
  // Stacks: frames of stack s are stack_frames[stack_offsets[s] .. stack_offsets[s+1]), innermost first.
  std::vector<std::uint32_t> stack_offsets{0, 0};
  std::vector<FrameId> stack_frames;

  std::vector<Segment> segments;
  std::vector<Block> blocks;
  std::vector<DeviceTrace> device_traces;  // index = device
  std::vector<std::int64_t> streams{0};    // trace events' streams by StreamId (0: stream 0)
  std::unordered_map<std::int64_t, StreamId> stream_ids{{0, 0}};  // the inverse, kept by stream_id()
  bool has_device_traces_key = false;
  bool top_level_list = false;  // the file held only a list of segments
  std::vector<Annotation> annotations;
  AllocatorSettings settings;
  std::vector<std::vector<EventFacts>> event_facts;  // by device, ascending entry
  std::vector<std::pair<std::uint32_t, StackId>> block_forward_stacks;  // (block index, forward_frames)
  // Stacks made of an allocation's forward_frames followed by its own frames (blocks and trace
  // events with forward_frames get them), sorted: their site is the forward line.
  std::vector<StackId> forward_attributed;
  bool forward_attributed_stack(StackId s) const { return std::binary_search(forward_attributed.begin(), forward_attributed.end(), s); }
  // FX frames (sorted by frame) and the stacks whose FX frames got their fx_original_trace put
  // before them (sorted): their site is the model's line.
  std::vector<FxFrame> fx_frames;
  std::vector<StackId> fx_attributed;
  bool fx_attributed_stack(StackId s) const { return std::binary_search(fx_attributed.begin(), fx_attributed.end(), s); }
  const FxFrame* fx_frame(FrameId f) const;
  // Allocation tags (index 0: none) and the tagged stacks, (stack, tag index) sorted by stack.
  std::vector<AllocationTag> allocation_tags{AllocationTag{}};
  std::vector<std::pair<StackId, std::uint32_t>> tagged_stacks;
  // The tag of `stack` (an empty tag for an untagged stack).
  const AllocationTag& tag_of(StackId stack) const;
  HostMemory host;

  std::map<std::string, std::uint64_t> unknown_keys;     // "segment.foo" -> count
  std::map<std::string, std::uint64_t> unknown_actions;  // action string -> count

  std::string_view str(StrId id) const { return strings[id]; }
  std::size_t stack_size(StackId s) const { return stack_offsets[s + 1] - stack_offsets[s]; }
  const FrameId* stack_begin(StackId s) const { return stack_frames.data() + stack_offsets[s]; }
  // The facts of all of a stack's frames together (0 for kNoStack).
  FrameFacts stack_facts(StackId s) const {
    FrameFacts facts = 0;
    if (s == kNoStack) return facts;
    const FrameId* f = stack_begin(s);
    for (std::size_t i = 0; i < stack_size(s); ++i) facts |= frames[f[i]].facts;
    return facts;
  }
  std::size_t stack_count() const { return stack_offsets.size() - 1; }
  // Calls fn(block) for each block of `device` live at the end (active or pending free), in
  // segment order.
  template <typename Fn>
  void for_each_live_block(std::int64_t device, Fn&& fn) const {
    for (const Segment& seg : segments) {
      if (seg.device != device) continue;
      for (std::uint32_t i = 0; i < seg.block_count && seg.first_block + i < blocks.size(); ++i) {
        const Block& b = blocks[seg.first_block + i];
        if (b.state == BlockState::ActiveAllocated || b.state == BlockState::ActivePendingFree) fn(b);
      }
    }
  }
  // The kept trace events of `device` (empty for a device without a trace).
  const TraceEvents& events_of(std::int64_t device) const;
  std::int64_t stream(const TraceEvent& e) const { return e.stream_id < streams.size() ? streams[e.stream_id] : 0; }
  // The facts of kept event `index` of `device`, or null when it carries none.
  const EventFacts* facts_of_event(std::int64_t device, std::size_t index) const;
  PoolId pool_of_event(std::int64_t device, std::size_t index) const {
    const EventFacts* f = facts_of_event(device, index);
    return f ? f->pool : PoolId{};
  }
  // The id of `stream`, added when new; throws InputError past kMaxStreams distinct streams.
  StreamId stream_id(std::int64_t stream);
};

}  // namespace memsnap
