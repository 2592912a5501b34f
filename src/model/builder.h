// Turns the readers' value tree (and the streamed trace entries) into the Snapshot model.
#pragma once

#include <absl/container/flat_hash_map.h>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "model/event_store.h"
#include "model/snapshot_keys.h"
#include "model/snapshot.h"
#include "read/pickle_reader.h"
#include "read/value.h"

namespace memsnap {

// Reads allocator_settings.roundup_power2_divisions into `settings` (builder_2026.cpp).
void read_roundup_divisions(const Value& dict, const Document& doc, AllocatorSettings& settings);

class SnapshotBuilder final : public TraceEntrySink {
 public:
  // The tags of the interned values the builder puts in the memo for frame dicts and frames lists.
  static constexpr std::uint32_t kFrameTag = 1;
  static constexpr std::uint32_t kStackTag = 2;

  // input_bytes: the size of what the reader reads; the segments, blocks and annotations the
  // model copies out of it may take at most max(32 MiB, 2x) that (see grow_model).
  SnapshotBuilder(Snapshot& snapshot, std::uint64_t max_trace_events, std::uint64_t input_bytes = 0);

  void trace_entry(std::size_t device, const Value& entry, const Document& doc) override;
  void trace_entry_fields(std::size_t device, const Value* pairs, std::size_t count, const Document& doc) override;
  TraceField trace_field(std::string_view key) override;
  void trace_fields(std::size_t device, const TraceFields& fields, const Document& doc) override;
  std::uint32_t frame_id(const Value& frame, const Document& doc) override { return frame_of(frame, doc); }
  Value intern_frame_ids(const std::uint32_t* ids, std::size_t count) override;
  std::optional<Value> converted(std::uint64_t index) override;
  void released(std::uint64_t first) override;
  bool adopt_split(std::size_t device, SplitTrace& split, std::size_t count, std::size_t stack_count,
                   const std::function<const Value&(std::uint64_t)>& slot, const Document& doc,
                   std::vector<Value>& stacks) override;  // builder_split.cpp

  // Reads everything not streamed (segments, settings, annotations, unstreamed traces) from the
  // document's root and puts each device's kept events in chronological order.
  void finish(const Document& doc);

 private:
  struct TransparentHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct FrameKey {
    StrId filename, name;
    std::int64_t line;
    bool operator==(const FrameKey&) const = default;
  };
  struct FrameKeyHash {
    std::size_t operator()(const FrameKey& k) const {
      return std::hash<std::uint64_t>{}((std::uint64_t(k.filename) << 32 | k.name) ^ (std::uint64_t(k.line) * 0x9e3779b97f4a7c15ull));
    }
  };

  StrId intern(std::string_view s);
  // Counts bytes the model copies out of the document; throws when the copies outgrow the
  // input (objects shared many times through the pickle memo are expanded at each reference).
  void grow_model(std::uint64_t bytes, const char* what);
  FrameId frame_of(const Value& v, const Document& doc);
  StackId stack_of(const Value& v, const Document& doc, const char* where);
  StackId intern_stack(const FrameId* ids, std::size_t count);
  void read_root_dict(const Document& doc);
  void read_segments(const Value& list, const Document& doc);
  void read_segment(const Value& dict, const Document& doc, std::size_t index);
  void read_block(const Value& dict, const Document& doc, std::uint64_t& next_address);
  void read_traces(const Value& list, const Document& doc);
  void read_settings(const Value& dict, const Document& doc);
  void read_annotations(const Value& list, const Document& doc);
  void count_unknown(const char* object, std::string_view key);
  // PyTorch 2026 keys (builder_2026.cpp).
  FrameId intern_frame(Frame f);
  StackId traceback_stack(const Value& v, const Document& doc);  // forward_frames: a list of traceback strs
  // Keeps the entry's 2026 facts; returns its stack with the forward frames put first when it has some.
  StackId note_event_facts(std::size_t device, const TraceFields& f, const Document& doc, StackId stack);
  StackId with_forward(StackId forward, StackId own);
  // FX keys of a frame dict (fx_node_op, fx_node_name, fx_node_target, fx_original_trace).
  struct FxKeys {
    const Value* values[4] = {};
    bool any = false;
    void note(FrameDictKey key, const Value& v) {
      const auto k = static_cast<std::size_t>(key) - static_cast<std::size_t>(FrameDictKey::FxNodeOp);
      if (k < 4) values[k] = &v, any = true;
    }
  };
  void note_fx_frame(FrameId frame, const FxKeys& fx);
  // A stack with FX frames: each FX frame's fx_original_trace frames put before it (listed in
  // Snapshot::fx_attributed), so its site is the model's line.
  StackId intern_fx_stack(const FrameId* ids, std::size_t count);
  bool expanding_fx_ = false;
  // Tags each allocation that has a compiled region, a label, annotate text or a category with
  // its own stack (Snapshot::allocation_tags), and the live blocks that allocation made.
  void tag_allocations();
  StackId tagged_stack(StackId stack, std::uint32_t tag);
  std::map<std::pair<StackId, std::uint32_t>, StackId> tagged_copies_;
  std::map<std::tuple<StrId, StrId, StrId, StrId>, std::uint32_t> tag_index_;  // AllocationTag -> its index
  void read_host_segments(const Value& list, const Document& doc);
  void read_host_traces(const Value& list, const Document& doc);
  bool reading_host_ = false;  // read_segment is filling Snapshot::host
  TraceField trace_key(const Value& key);
  struct KeyCacheEntry {
    const char* data = nullptr;
    std::uint32_t size = 0;
    TraceField key = TraceField::Unknown;
  };
  KeyCacheEntry key_cache_[64];
  std::vector<Value> pairs_;
  struct ActionCacheEntry {
    const char* data = nullptr;
    std::uint32_t size = 0;
    Action action = Action::Unknown;
  };
  ActionCacheEntry action_cache_[16];
  Action action_of(const Value& action);

  Snapshot& snap_;
  EventStore events_;
  std::unordered_map<std::string, StrId, TransparentHash, std::equal_to<>> string_index_;
  std::unordered_map<FrameKey, FrameId, FrameKeyHash> frame_index_;
  // Stack id by content: hash of the frame ids -> the first stack with that hash; stacks whose
  // hash an earlier stack already has go to stack_collisions_ (both compared against stack_frames).
  absl::flat_hash_map<std::uint64_t, StackId> stack_index_;
  std::unordered_multimap<std::uint64_t, StackId> stack_collisions_;
  std::vector<std::uint32_t> frame_cache_;  // container index -> frame id + 1
  std::vector<std::uint32_t> stack_cache_;  // container index -> stack id + 1
  absl::flat_hash_map<std::uint32_t, StackId> shared_stacks_;  // first chunk of shared items -> stack
  std::size_t frame_cache_used_ = 0;        // entries at or past these are all 0
  std::size_t stack_cache_used_ = 0;
  std::vector<FrameId> scratch_;
  std::uint64_t model_budget_ = 0;  // bytes grow_model allows
  std::uint64_t model_bytes_ = 0;
  std::uint64_t input_bytes_ = 0;
  std::int64_t last_stream_ = 0;  // the stream of the previous event, and its id
  StreamId last_stream_id_ = 0;
};

}  // namespace memsnap
