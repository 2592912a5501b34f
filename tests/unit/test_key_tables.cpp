// The reader's and builder's tables: every pickle opcode row gets the treatment its use names,
// and every snapshot key row is read without being counted as unknown while any other key is
// counted, so adding an opcode or a key is one row (plus its handling) and these tests follow.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "model/snapshot_keys.h"
#include "pickle_writer.h"
#include "read/pickle_opcodes.h"
#include "test_support.h"

namespace memsnap {
namespace key_tables_tests {

using test::PickleWriter;

std::string error_after_one_int(std::uint8_t opcode) {
  PickleWriter w;
  w.integer(1).op(opcode).raw("os\nsystem\n").stop();
  return test::load_error(w.bytes());
}

TEST(PickleOpcodes, EveryRowIsOneByteWithItsName) {
  std::set<std::uint8_t> bytes;
  for (const PickleOpcode& row : kPickleOpcodes) {
    EXPECT_TRUE(bytes.insert(row.byte).second) << row.name << " repeats a byte";
    EXPECT_STREQ(pickle_opcode_name(row.byte), row.name);
  }
  EXPECT_EQ(bytes.size(), 68u);  // pickletools' opcodes of protocols 0-5
  EXPECT_EQ(pickle_opcode_name(0xff), nullptr);
  EXPECT_EQ(op::kMark, '(');
  EXPECT_EQ(op::kFrame, 0x95);
}

TEST(PickleOpcodes, TheUseColumnDecidesWhatTheReaderDoes) {
  for (const PickleOpcode& row : kPickleOpcodes) {
    const std::string error = error_after_one_int(row.byte);
    const bool refused = error.starts_with(std::string("refusing pickle opcode ") + row.name + " at byte 4: ");
    const bool text = error.starts_with(std::string("unsupported pickle opcode ") + row.name + " at byte 4 ");
    EXPECT_EQ(refused, row.use == OpUse::kRefused) << row.name << ": " << error;
    EXPECT_EQ(text, row.use == OpUse::kText) << row.name << ": " << error;
  }
  EXPECT_EQ(error_after_one_int(0xff).substr(0, 50), "malformed pickle at byte 4: unknown opcode byte 0x");
}

// A JSON value of the right type for each field the builder reads.
nlohmann::json frame_json() {
  return {{"filename", "/home/me/train.py"}, {"name", "main"}, {"line", 3}, {"fx_node_op", "call_function"},
          {"fx_node_name", "mm"}, {"fx_node_target", "aten.mm.default"}, {"fx_original_trace", ""}};
}

nlohmann::json trace_value(TraceField field) {
  switch (field) {
    case TraceField::Action: return "alloc";
    case TraceField::Addr: case TraceField::Size: case TraceField::Stream: case TraceField::Time: return 512;
    case TraceField::Frames: return nlohmann::json::array({frame_json()});
    case TraceField::PoolId: return nlohmann::json::array({0, 0});
    case TraceField::ForwardFrames: return nlohmann::json::array();
    case TraceField::UserMetadata: case TraceField::CompileContext: case TraceField::InternalMetadata: case TraceField::Category:
    case TraceField::Ignored: case TraceField::Unknown: return "N/A";
  }
  return nullptr;
}

nlohmann::json block_value(BlockKey key) {
  switch (key) {
    case BlockKey::Address: return 0;
    case BlockKey::Size: return 512;
    case BlockKey::RequestedSize: return 500;
    case BlockKey::State: return "active_allocated";
    case BlockKey::Frames: return nlohmann::json::array({frame_json()});
    case BlockKey::History: case BlockKey::ForwardFrames: case BlockKey::Ignored: case BlockKey::Unknown: return nlohmann::json::array();
  }
  return nullptr;
}

nlohmann::json segment_value(SegmentKey key, const nlohmann::json& block) {
  switch (key) {
    case SegmentKey::Device: case SegmentKey::Address: case SegmentKey::Stream: return 0;
    case SegmentKey::TotalSize: case SegmentKey::AllocatedSize: case SegmentKey::ActiveSize: case SegmentKey::RequestedSize:
      return 512;
    case SegmentKey::SegmentType: return "large";
    case SegmentKey::IsExpandable: return false;
    case SegmentKey::Frames: return nlohmann::json::array();
    case SegmentKey::Blocks: return nlohmann::json::array({block});
    case SegmentKey::PoolId: return nlohmann::json::array({0, 0});
    case SegmentKey::ForwardFrames: return nlohmann::json::array();
    case SegmentKey::Unknown: return 1;
  }
  return nullptr;
}

nlohmann::json root_value(RootKey key, const nlohmann::json& segment, const nlohmann::json& entry) {
  switch (key) {
    case RootKey::Segments: return nlohmann::json::array({segment});
    case RootKey::DeviceTraces: return nlohmann::json::array({nlohmann::json::array({entry})});
    case RootKey::AllocatorSettings: return nlohmann::json::object();
    case RootKey::ExternalAnnotations: case RootKey::HostSegments: case RootKey::HostTraces: case RootKey::Ignored:
    case RootKey::Unknown: return nlohmann::json::array();
  }
  return nullptr;
}

// A snapshot with every key of every table, plus `extra` ("" for none) in each object.
std::string snapshot_with_every_key(const std::string& extra) {
  nlohmann::json frame = frame_json(), entry, block, segment, root;
  for (const auto& row : frame_keys()) EXPECT_TRUE(frame.contains(row.key)) << row.key;
  for (const auto& row : trace_entry_keys()) entry[std::string(row.key)] = trace_value(row.field);
  for (const auto& row : block_keys()) block[std::string(row.key)] = block_value(row.field);
  if (!extra.empty()) entry[extra] = block[extra] = 1;
  for (const auto& row : segment_keys()) segment[std::string(row.key)] = segment_value(row.field, block);
  if (!extra.empty()) segment[extra] = 1;
  for (const auto& row : root_keys()) root[std::string(row.key)] = root_value(row.field, segment, entry);
  if (!extra.empty()) root[extra] = 1;
  return root.dump();
}

LoadedSnapshot load_json(const std::string& json) {
  return test::load_bytes(std::vector<std::uint8_t>(json.begin(), json.end()));
}

TEST(SnapshotKeys, EveryKeyOfTheTablesIsRead) {
  const LoadedSnapshot loaded = load_json(snapshot_with_every_key(""));
  const Snapshot& s = loaded.snapshot;
  EXPECT_TRUE(s.unknown_keys.empty()) << s.unknown_keys.begin()->first;
  ASSERT_EQ(s.segments.size(), 1u);
  EXPECT_EQ(s.segments[0].total_size, 512u);
  ASSERT_EQ(s.blocks.size(), 1u);
  EXPECT_EQ(s.blocks[0].requested_size, 500u);
  ASSERT_EQ(s.frames.size(), 1u);
  EXPECT_EQ(s.str(s.frames[0].filename), "/home/me/train.py");
  ASSERT_EQ(s.device_traces.size(), 1u);
  ASSERT_EQ(s.device_traces[0].events.size(), 1u);
  EXPECT_EQ(s.device_traces[0].events[0].size, 512u);
  EXPECT_EQ(s.device_traces[0].events[0].time_us, 512);
}

TEST(SnapshotKeys, AKeyInNoTableIsCountedPerObject) {
  const LoadedSnapshot loaded = load_json(snapshot_with_every_key("added_in_torch_3"));
  const std::map<std::string, std::uint64_t> expected = {{"block.added_in_torch_3", 1},
                                                         {"segment.added_in_torch_3", 1},
                                                         {"snapshot.added_in_torch_3", 1},
                                                         {"trace_entry.added_in_torch_3", 1}};
  EXPECT_EQ(loaded.snapshot.unknown_keys, expected);
}

TEST(SnapshotKeys, LookupFallsBackToUnknown) {
  EXPECT_EQ(field_of(trace_entry_keys(), "device_free"), TraceField::Addr);
  EXPECT_EQ(field_of(trace_entry_keys(), "forward_frames"), TraceField::ForwardFrames);
  EXPECT_EQ(field_of(trace_entry_keys(), "Action"), TraceField::Unknown);
  EXPECT_EQ(field_of(root_keys(), "host_traces"), RootKey::HostTraces);
  EXPECT_EQ(field_of(root_keys(), "traces"), RootKey::Ignored);
}

}  // namespace key_tables_tests
}  // namespace memsnap
