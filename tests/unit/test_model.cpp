// The snapshot model from the readers: the spec's vector, every layout variant, streamed traces
// with shared stacks across batches, the --max-trace-events ring, tolerated unknowns.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <unistd.h>
#include <map>

#include "analysis/totals.h"
#include "base/error.h"
#include "pickle_writer.h"
#include "test_support.h"

namespace memsnap {
namespace model_tests {

using test::PickleWriter;

std::string frame_text(const Snapshot& s, StackId stack, std::size_t i) {
  const Frame& f = s.frames[s.stack_begin(stack)[i]];
  return std::string(s.str(f.filename)) + ":" + std::to_string(f.line) + ":" + std::string(s.str(f.name));
}

TEST(Model, SpecVectorDecodesWithSharedStack) {
  const auto loaded = test::load_bytes(test::from_hex(test::kSpecVectorHex));
  const Snapshot& s = loaded.snapshot;
  ASSERT_EQ(s.segments.size(), 1u);
  const Segment& seg = s.segments[0];
  EXPECT_EQ(seg.address, 0x7f0000000000ull);
  EXPECT_EQ(seg.total_size, 20971520u);
  EXPECT_TRUE(seg.is_large);
  ASSERT_EQ(seg.block_count, 2u);
  const Block& live = s.blocks[0];
  EXPECT_EQ(live.state, BlockState::ActiveAllocated);
  EXPECT_EQ(live.size, 3145728u);
  EXPECT_EQ(live.requested_size, 3000000u);
  EXPECT_EQ(s.blocks[1].state, BlockState::Inactive);
  EXPECT_EQ(s.blocks[1].size, 17825792u);
  EXPECT_EQ(s.blocks[1].address, 0x7f0000300000ull);
  ASSERT_EQ(s.device_traces.size(), 1u);
  ASSERT_EQ(s.device_traces[0].events.size(), 1u);
  const TraceEvent& e = s.device_traces[0].events[0];
  EXPECT_EQ(e.action, Action::Alloc);
  EXPECT_EQ(e.size, 3000000u);
  EXPECT_EQ(e.time_us, 1713558427168556);
  EXPECT_EQ(e.stack, live.stack);
  EXPECT_EQ(e.stack, seg.stack);
  ASSERT_EQ(s.stack_size(e.stack), 1u);
  EXPECT_EQ(frame_text(s, e.stack, 0), "/w/train.py:7:main");
  EXPECT_EQ(s.settings.max_split_size, -1);
  EXPECT_EQ(s.settings.json, "{\"max_split_size\":-1,\"garbage_collection_threshold\":0.0}");
  EXPECT_EQ(loaded.input.pickle_protocol, 4);
  const auto totals = compute_totals(s, build_timelines(s)).overall;
  EXPECT_EQ(totals.reserved, 20971520u);
  EXPECT_EQ(totals.allocated, 3145728u);
  EXPECT_EQ(totals.inactive, 17825792u);
  EXPECT_EQ(totals.requested, 3000000u);
  EXPECT_EQ(totals.largest_inactive_block, 17825792u);
  EXPECT_EQ(totals.peak_allocated, 3000000);
}

// Writes a PyTorch-layout snapshot (protocol 4, MEMOIZE) with `devices` trace lists of
// `entries` entries each; a new stack every `stack_every` entries, later entries re-reference it
// (across APPENDS batches, i.e. after the reader released the batch that created it).
std::vector<std::uint8_t> traces_pickle(int devices, int entries, int stack_every) {
  PickleWriter w;
  std::uint32_t memo = 0;
  auto memoize = [&] { w.memoize(); return memo++; };
  std::map<std::string, std::uint32_t> keys;
  auto key = [&](const std::string& k) {
    if (auto it = keys.find(k); it != keys.end()) w.long_binget(it->second);
    else { w.str(k); keys[k] = memoize(); }
  };
  w.dict(); memoize(); w.mark();
  key("segments"); w.list(); memoize();
  key("device_traces"); w.list(); memoize();
  if (devices > 1) w.mark();
  std::uint32_t shared_frame = 0;
  bool have_shared = false;
  std::uint32_t stack = 0;
  for (int d = 0; d < devices; ++d) {
    w.list(); memoize();
    for (int batch = 0; batch < entries; batch += 1000) {
      const int n = std::min(1000, entries - batch);
      if (n > 1) w.mark();
      for (int i = batch; i < batch + n; ++i) {
        w.dict(); memoize(); w.mark();
        key("action"); key(i % 2 ? "free_completed" : "alloc");
        key("addr"); w.integer(0x7f0000000000LL + (i / 2) * 512);
        key("size"); w.integer(512);
        key("stream"); w.integer(0);
        key("compile_context"); w.str("N/A"); memoize();
        key("frames");
        if (i % stack_every == 0) {
          w.list(); stack = memoize(); w.mark();
          w.dict(); memoize(); w.mark();
          key("name"); w.str("fn" + std::to_string(i)); memoize();
          key("filename"); w.str("/w/train.py"); memoize();
          key("line"); w.integer(d * 100000 + i);
          w.setitems();
          if (have_shared) {
            w.long_binget(shared_frame);
          } else {
            w.dict(); shared_frame = memoize(); have_shared = true; w.mark();
            key("name"); w.str("main"); memoize();
            key("filename"); w.str("/w/main.py"); memoize();
            key("line"); w.integer(1);
            w.setitems();
          }
          w.appends();
        } else {
          w.long_binget(stack);
        }
        w.setitems();
      }
      if (n > 1) w.appends();
      else w.append();
    }
    if (devices == 1) w.append();
  }
  if (devices > 1) w.appends();
  w.setitems().stop();
  return w.bytes();
}

TEST(Model, StreamedTracesKeepSharedStacksAcrossBatches) {
  const auto loaded = test::load_bytes(traces_pickle(2, 2500, 100));
  const Snapshot& s = loaded.snapshot;
  ASSERT_EQ(s.device_traces.size(), 2u);
  for (int d = 0; d < 2; ++d) {
    const auto& events = s.device_traces[d].events;
    ASSERT_EQ(events.size(), 2500u);
    for (int i = 0; i < 2500; ++i) {
      ASSERT_EQ(events[i].stack, events[(i / 100) * 100].stack) << "device " << d << " entry " << i;
      ASSERT_EQ(frame_text(s, events[i].stack, 0), "/w/train.py:" + std::to_string(d * 100000 + (i / 100) * 100) + ":fn" + std::to_string((i / 100) * 100));
      ASSERT_EQ(frame_text(s, events[i].stack, 1), "/w/main.py:1:main");
    }
    EXPECT_EQ(events[2499].action, Action::FreeCompleted);
    EXPECT_EQ(events[2498].addr, 0x7f0000000000ull + 1249 * 512);
  }
  EXPECT_EQ(s.stack_count(), 1u + 2 * 25);
  EXPECT_EQ(s.frames.size(), 1u + 2 * 25);
}

TEST(Model, SingleDeviceAndSingleEntryLists) {
  const auto loaded = test::load_bytes(traces_pickle(1, 1001, 7));
  ASSERT_EQ(loaded.snapshot.device_traces.size(), 1u);
  EXPECT_EQ(loaded.snapshot.device_traces[0].events.size(), 1001u);
}

TEST(Model, MaxTraceEventsKeepsTheNewest) {
  const auto loaded = test::load_bytes(traces_pickle(2, 2500, 100), 600);
  for (const auto& t : loaded.snapshot.device_traces) {
    ASSERT_EQ(t.events.size(), 600u);
    EXPECT_EQ(t.total, 2500u);
    EXPECT_EQ(t.dropped, 1900u);
    EXPECT_EQ(t.events.front().addr, 0x7f0000000000ull + (1900 / 2) * 512);
    EXPECT_EQ(t.events.back().action, Action::FreeCompleted);
    EXPECT_EQ(t.events.back().addr, 0x7f0000000000ull + 1249 * 512);
  }
}

// A dict-of-lists snapshot in an older or unusual layout, built key by key.
class SnapshotWriter {
 public:
  PickleWriter w{3};
  void begin_dict() { w.dict().mark(); }
  void end_dict() { w.setitems(); }
  void begin_list() { w.list().mark(); }
  void end_list() { w.appends(); }
  void frame(const std::string& file, int line, const std::string& name) {
    begin_dict(); w.str("filename").str(file).str("name").str(name).str("line").integer(line); end_dict();
  }
};

TEST(Model, LegacyTopLevelListWithHistory) {
  SnapshotWriter s;
  s.begin_list();
  s.begin_dict();
  s.w.str("device").integer(0).str("address").integer(1 << 30).str("total_size").integer(2097152);
  s.w.str("allocated_size").integer(1024).str("active_size").integer(1024).str("stream").integer(0);
  s.w.str("segment_type").str("small").str("blocks");
  s.begin_list();
  s.begin_dict();
  s.w.str("size").integer(1024).str("state").str("active_allocated").str("history");
  s.begin_list();
  s.begin_dict();
  s.w.str("addr").integer(1 << 30).str("real_size").integer(1000).str("frames");
  s.begin_list(); s.frame("/w/model.py", 12, "forward"); s.end_list();
  s.end_dict();
  s.end_list();
  s.end_dict();
  s.begin_dict(); s.w.str("size").integer(2097152 - 1024).str("state").str("inactive"); s.end_dict();
  s.end_list();
  s.end_dict();
  s.end_list();
  s.w.stop();
  const auto loaded = test::load_bytes(s.w.bytes());
  const Snapshot& snap = loaded.snapshot;
  EXPECT_TRUE(snap.top_level_list);
  ASSERT_EQ(snap.blocks.size(), 2u);
  EXPECT_TRUE(snap.blocks[0].from_history);
  EXPECT_EQ(snap.blocks[0].requested_size, 1000u);
  EXPECT_EQ(snap.blocks[0].address, 1u << 30);
  EXPECT_EQ(snap.blocks[1].address, (1u << 30) + 1024);
  EXPECT_EQ(frame_text(snap, snap.blocks[0].stack, 0), "/w/model.py:12:forward");
  EXPECT_FALSE(snap.segments[0].is_large);
  EXPECT_EQ(loaded.input.pickle_protocol, 3);
  const auto t = compute_totals(snap, build_timelines(snap)).overall;
  EXPECT_EQ(t.requested, 1000u);
  EXPECT_FALSE(t.peak_allocated.has_value());
}

TEST(Model, StatesOomExpandableSettingsAnnotationsAndUnknowns) {
  SnapshotWriter s;
  s.begin_dict();
  s.w.str("segments");
  s.begin_list();
  for (int dev = 0; dev < 2; ++dev) {
    s.begin_dict();
    s.w.str("device").integer(dev).str("address").integer(0x10000000).str("total_size").integer(20971520);
    s.w.str("stream").integer(dev ? 94000000000000LL : 0).str("segment_type").str("large").str("is_expandable").boolean(true);
    s.w.str("segment_pool_id").integer(0).integer(0).op(0x86).str("mystery").integer(1).str("blocks");
    s.begin_list();
    s.begin_dict(); s.w.str("size").integer(4194304).str("requested_size").integer(4000000).str("state").str("active_awaiting_free"); s.end_dict();
    s.begin_dict(); s.w.str("size").integer(16777216).str("requested_size").integer(0).str("state").str("inactive"); s.end_dict();
    s.end_list();
    s.end_dict();
  }
  s.end_list();
  s.w.str("device_traces");
  s.begin_list();
  s.begin_list();
  s.begin_dict(); s.w.str("action").str("segment_map").str("addr").integer(0x10000000).str("size").integer(20971520).str("stream").integer(0); s.end_dict();
  s.begin_dict(); s.w.str("action").str("alloc").str("addr").integer(0x10000000).str("size").integer(4000000).str("stream").integer(0).str("pool_id").integer(0).integer(0).op(0x86); s.end_dict();
  s.begin_dict(); s.w.str("action").str("free_requested").str("addr").integer(0x10000000).str("size").integer(4000000).str("stream").integer(0); s.end_dict();
  s.begin_dict(); s.w.str("action").str("oom").str("device_free").integer(1048576).str("size").integer(31457280).str("stream").integer(0).str("time_us").integer(1713558427000000LL); s.end_dict();
  s.begin_dict(); s.w.str("action").str("teleport").str("addr").integer(0).str("size").integer(0).str("stream").integer(0).str("new_key").str("x"); s.end_dict();
  s.end_list();
  s.begin_list(); s.end_list();
  s.end_list();
  s.w.str("allocator_settings");
  s.begin_dict(); s.w.str("PYTORCH_CUDA_ALLOC_CONF").str("expandable_segments:True").str("max_split_size").integer(-1).str("expandable_segments").boolean(true); s.end_dict();
  s.w.str("external_annotations");
  s.begin_list();
  s.begin_dict(); s.w.str("name").str("ProfilerStep#0").str("stage").str("START").str("device").integer(0).str("time_us").integer(5); s.end_dict();
  s.end_list();
  s.w.str("host_segments");
  s.begin_list(); s.end_list();
  s.w.str("future_section").integer(3);
  s.end_dict();
  s.w.stop();
  const auto loaded = test::load_bytes(s.w.bytes());
  const Snapshot& snap = loaded.snapshot;
  ASSERT_EQ(snap.segments.size(), 2u);
  EXPECT_TRUE(snap.segments[0].is_expandable);
  EXPECT_EQ(snap.segments[1].stream, 94000000000000LL);
  EXPECT_EQ(snap.blocks[0].state, BlockState::ActivePendingFree);
  ASSERT_EQ(snap.device_traces.size(), 2u);
  const auto& ev = snap.device_traces[0].events;
  ASSERT_EQ(ev.size(), 5u);
  EXPECT_EQ(ev[0].action, Action::SegmentMap);
  EXPECT_EQ(ev[3].action, Action::Oom);
  EXPECT_EQ(ev[3].addr, 1048576u);
  EXPECT_EQ(ev[3].size, 31457280u);
  EXPECT_EQ(ev[4].action, Action::Unknown);
  EXPECT_EQ(snap.unknown_actions.at("teleport"), 1u);
  EXPECT_EQ(snap.unknown_keys.at("trace_entry.new_key"), 1u);
  EXPECT_EQ(snap.unknown_keys.at("segment.mystery"), 2u);
  EXPECT_EQ(snap.unknown_keys.at("snapshot.future_section"), 1u);
  EXPECT_EQ(snap.settings.conf, "expandable_segments:True");
  EXPECT_EQ(snap.settings.expandable_segments, true);
  ASSERT_EQ(snap.annotations.size(), 1u);
  EXPECT_EQ(snap.annotations[0].name, "ProfilerStep#0");
  EXPECT_EQ(snap.annotations[0].stage, "START");
  const auto totals = compute_totals(snap, build_timelines(snap));
  EXPECT_EQ(totals.overall.pending_free, 2u * 4194304);
  EXPECT_EQ(totals.overall.inactive, 2u * 16777216);
  EXPECT_EQ(totals.overall.allocated, 0u);
  ASSERT_EQ(totals.devices.size(), 2u);
  // Device 0 ends with 4,000,000 B pending; the alloc of it is the only allocation in the window.
  EXPECT_EQ(totals.devices[0].totals.peak_allocated, 4000000);
  EXPECT_EQ(totals.devices[0].totals.peak_reserved, 20971520);
  EXPECT_FALSE(totals.devices[1].totals.peak_allocated.has_value());
}

TEST(Model, WrongTypesAndNonSnapshotsAreExplained) {
  EXPECT_EQ(test::load_error(PickleWriter().str("hello").stop().bytes()),
            "the file holds a str, not a memory snapshot (expected a dict with 'segments' or a list of segments); pass "
            "the file written by torch.cuda.memory._dump_snapshot() (run `memsnap capture`)");
  PickleWriter other;
  other.dict().str("state_dict").integer(1).setitem().stop();
  EXPECT_NE(test::load_error(other.bytes()).find("a dict without 'segments' or 'device_traces'"), std::string::npos);
  PickleWriter bad;
  bad.dict().str("segments").mark().dict().str("blocks").str("oops").setitem().op('l').setitem().stop();
  EXPECT_NE(test::load_error(bad.bytes()).find("segments[0].blocks is a str, expected a list"), std::string::npos);
  PickleWriter neg;
  neg.dict().str("segments").mark().dict().mark().str("total_size").integer(-5).str("blocks").list().setitems().op('l').setitem().stop();
  EXPECT_NE(test::load_error(neg.bytes()).find("a segment's total_size is a int, expected a non-negative int"), std::string::npos);
}

}  // namespace model_tests
}  // namespace memsnap

namespace memsnap {
namespace model_tests {

// Entries of one batch alternate between the reader's fast path and the generic path (a float
// value and a new frame dict force the latter); FRAME opcodes, pool-id tuples and BINPUT memo
// writes appear inside entries. The events must come out complete and in file order.
TEST(Model, FastAndGenericTraceEntriesKeepFileOrder) {
  for (int protocol : {2, 4}) {
    PickleWriter w(protocol);
    std::uint32_t memo = 0;
    auto put = [&] {
      if (protocol >= 4) w.memoize();
      else w.long_binput(memo);
      return memo++;
    };
    w.dict(); put(); w.mark();
    w.str("device_traces"); put();
    w.list(); put();
    w.list(); put(); w.mark();
    std::uint32_t frame_list = 0, action_key = 0, alloc = 0;
    for (int i = 0; i < 300; ++i) {
      w.dict(); put(); w.mark();
      if (i == 0) { w.str("action"); action_key = put(); w.str("alloc"); alloc = put(); }
      else { w.long_binget(action_key); w.long_binget(alloc); }
      if (i % 50 == 7) w.op(0x95).le(1000, 8);  // FRAME inside an entry
      w.str("addr"); put(); w.integer(4096 + i);
      w.str("size"); put(); w.integer(i % 3 == 0 ? 5000000000LL : 512 * i);
      w.str("pool_id"); put(); w.integer(0).integer(i % 2).op(0x86); put();
      if (i % 37 == 5) { w.str("weird"); put(); w.real(0.5); }
      w.str("frames"); put();
      if (i == 0 || i % 61 == 3) {
        w.list(); frame_list = put(); w.mark();
        w.dict(); put(); w.mark(); w.str("filename"); put(); w.str("/w/t.py"); put(); w.str("line"); put(); w.integer(i);
        w.str("name"); put(); w.str("f"); put(); w.setitems();
        w.appends();
      } else {
        w.long_binget(frame_list);
      }
      w.setitems();
    }
    w.appends();
    w.append();
    w.setitems().stop();
    const auto loaded = test::load_bytes(w.bytes());
    const auto& events = loaded.snapshot.device_traces.at(0).events;
    ASSERT_EQ(events.size(), 300u) << "protocol " << protocol;
    int last_line = 0;
    for (int i = 0; i < 300; ++i) {
      ASSERT_EQ(events[i].addr, 4096u + i) << i;
      ASSERT_EQ(events[i].size, i % 3 == 0 ? 5000000000ull : 512ull * i) << i;
      ASSERT_EQ(events[i].action, Action::Alloc);
      if (i == 0 || i % 61 == 3) last_line = i;
      const Frame& f = loaded.snapshot.frames[loaded.snapshot.stack_begin(events[i].stack)[0]];
      ASSERT_EQ(f.line, last_line) << i;
    }
    EXPECT_EQ(loaded.snapshot.unknown_keys.at("trace_entry.weird"), 8u);  // i = 5, 42, ..., 264
  }
}

// The reader remembers the short str it read last after each key: PyTorch memoizes a fresh
// compile_context "N/A" in every entry. Strs that repeat, change ("oom" after "alloc" at the
// same key), have a FRAME opcode before their MEMOIZE, or are referenced later by their memo
// slot must each read as the str the bytes say.
TEST(Model, ARepeatedShortStrAfterAKeyReadsAsTheStrTheBytesSay) {
  PickleWriter w(4);
  std::uint32_t memo = 0;
  auto put = [&] {
    w.memoize();
    return memo++;
  };
  w.dict(); put(); w.mark();
  w.str("device_traces"); put();
  w.list(); put();
  w.list(); put(); w.mark();
  const char* contexts[] = {"N/A", "ab", "N/B"};
  std::uint32_t action_key = 0, addr_key = 0, size_key = 0, frames_key = 0, context_key = 0;
  std::vector<std::uint32_t> action_slot(200), context_slot(200);
  std::vector<std::string> actions(200), texts(200);
  for (int i = 0; i < 200; ++i) {
    w.dict(); put(); w.mark();
    if (i == 0) { w.str("action"); action_key = put(); } else { w.long_binget(action_key); }
    if (i % 10 == 9) {
      w.long_binget(action_slot[i - 4]);
      actions[i] = actions[i - 4];
    } else {
      actions[i] = i % 3 == 2 ? "oom" : "alloc";
      w.str(actions[i]);
      if (i % 50 == 7) w.op(0x95).le(1000, 8);  // a FRAME between the str and its MEMOIZE
      action_slot[i] = put();
    }
    if (i == 0) { w.str("addr"); addr_key = put(); } else { w.long_binget(addr_key); }
    w.integer(4096 + i);
    if (i == 0) { w.str("size"); size_key = put(); } else { w.long_binget(size_key); }
    w.integer(512);
    if (i == 0) { w.str("compile_context"); context_key = put(); } else { w.long_binget(context_key); }
    if (i % 10 == 4) {
      w.long_binget(context_slot[i - 1]);
      texts[i] = texts[i - 1];
    } else {
      texts[i] = contexts[(i / 5) % 3];
      w.str(texts[i]);
      context_slot[i] = put();
    }
    if (i == 0) { w.str("frames"); frames_key = put(); } else { w.long_binget(frames_key); }
    w.list(); put();
    w.setitems();
  }
  w.appends();
  w.append();
  w.setitems().stop();
  const auto loaded = test::load_bytes(w.bytes());
  const Snapshot& s = loaded.snapshot;
  const auto& events = s.device_traces.at(0).events;
  ASSERT_EQ(events.size(), 200u);
  std::map<std::uint64_t, std::string> said;
  for (const EventFacts& facts : s.event_facts.at(0)) said[facts.entry] = s.strings[facts.compile_context];
  for (std::size_t i = 0; i < 200; ++i) {
    EXPECT_EQ(events[i].action, actions[i] == "oom" ? Action::Oom : Action::Alloc) << i;
    EXPECT_EQ(events[i].addr, 4096u + i) << i;
    if (texts[i] == "N/A") EXPECT_FALSE(said.contains(i)) << i;
    else EXPECT_EQ(said[i], texts[i]) << i;
  }
  EXPECT_EQ(said.size(), static_cast<std::size_t>(std::count_if(texts.begin(), texts.end(), [](const std::string& t) { return t != "N/A"; })));
  EXPECT_EQ(said.size(), 130u);
}

}  // namespace model_tests
}  // namespace memsnap

namespace memsnap {
namespace model_tests {

// The typed fast path decodes PyTorch's first keys (action, addr, size, stream, time_us) in a
// straight line once it has learned their bytes. Entries that drop time_us, swap two keys, name
// device_free in addr's place (an oom) or carry a key learned nowhere else must still read as
// their bytes say, and every int encoding a pickler may write (BININT1, BININT2, BININT, LONG1
// of 0 to 8 bytes, negative and not minimal) must give its value.
TEST(Model, TypedEntriesReadEveryIntEncodingInAnyKeyOrder) {
  PickleWriter w(4);
  std::uint32_t memo = 0;
  auto put = [&] { w.memoize(); return memo++; };
  w.dict(); put(); w.mark();
  w.str("device_traces"); put();
  w.list(); put();
  w.list(); put(); w.mark();
  std::map<std::string, std::uint32_t> keys;
  auto key = [&](const std::string& k) {
    if (auto it = keys.find(k); it != keys.end()) w.long_binget(it->second);
    else { w.str(k); keys[k] = put(); }
  };
  // Value k of an int field, written in encoding k % 12: LONG1 of n = 0..8 bytes for k % 12 < 9
  // (n = 0 is zero), then BININT1, BININT2, BININT.
  auto value_of = [](int k, bool is_signed) -> std::int64_t {
    const int n = k % 12;
    if (n == 0) return 0;
    if (n <= 8) {
      const std::int64_t magnitude = (std::int64_t(1) << (8 * n - 2)) + k % 32;  // uses the top byte
      return is_signed && k % 2 ? -magnitude : magnitude;
    }
    return n == 9 ? k % 256 : n == 10 ? 256 + k : 70000 + k;
  };
  auto write = [&](int k, std::int64_t v) {
    const int n = k % 12;
    if (n <= 8) w.op(0x8a).u8(static_cast<std::uint8_t>(n)).le(static_cast<std::uint64_t>(v), n);
    else if (n == 9) w.op('K').u8(static_cast<std::uint8_t>(v));
    else if (n == 10) w.op('M').le(static_cast<std::uint64_t>(v), 2);
    else w.op('J').le(static_cast<std::uint32_t>(v), 4);
  };
  struct Expected { std::uint64_t addr, size; std::int64_t stream, time; bool oom; };
  std::vector<Expected> expected;
  std::uint32_t alloc = 0, oom = 0;
  for (int i = 0; i < 400; ++i) {
    const bool is_oom = i % 13 == 6, no_time = i % 7 == 3, swapped = i % 11 == 5, extra = i % 17 == 9;
    const Expected e{static_cast<std::uint64_t>(value_of(i, false)), static_cast<std::uint64_t>(value_of(i + 3, false)),
                     value_of(i + 5, true), no_time ? 0 : value_of(i + 7, true), is_oom};
    expected.push_back(e);
    w.dict(); put(); w.mark();
    key("action");
    if (is_oom) {
      if (oom) w.long_binget(oom); else { w.str("oom"); oom = put(); }
    } else {
      if (alloc) w.long_binget(alloc); else { w.str("alloc"); alloc = put(); }
    }
    auto addr = [&] { key(is_oom ? "device_free" : "addr"); write(i, static_cast<std::int64_t>(e.addr)); };
    auto size = [&] { key("size"); write(i + 3, static_cast<std::int64_t>(e.size)); };
    if (swapped) { size(); addr(); } else { addr(); size(); }
    key("stream"); write(i + 5, e.stream);
    if (!no_time) { key("time_us"); write(i + 7, e.time); }
    if (extra) { key("compile_context"); w.str("N/A"); put(); }
    key("frames"); w.list(); put();
    w.setitems();
  }
  w.appends();
  w.append();
  w.setitems().stop();
  // In one pickle frame, as PyTorch's files are: the typed path then reads without FRAME checks.
  const auto loaded = test::load_bytes(w.framed());
  const Snapshot& s = loaded.snapshot;
  const auto& events = s.device_traces.at(0).events;
  ASSERT_EQ(events.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(events[i].action, expected[i].oom ? Action::Oom : Action::Alloc) << i;
    EXPECT_EQ(events[i].addr, expected[i].addr) << i;
    EXPECT_EQ(events[i].size, expected[i].size) << i;
    EXPECT_EQ(s.stream(events[i]), expected[i].stream) << i;
    EXPECT_EQ(events[i].time_us, expected[i].time) << i;
    EXPECT_EQ(events[i].has_time, i % 7 != 3) << i;
  }
  // The values use LONG1's every length up to 8 bytes, negative ones among them.
  EXPECT_EQ(expected[8].addr, (std::uint64_t(1) << 62) + 8);
  EXPECT_EQ(expected[0].stream, -((std::int64_t(1) << 38) + 5));
}

// A file large enough (about 48 MB) that the reader's pager thread maps ahead and releases
// behind, and the event worker stores many batches for two devices; with a limit smaller than
// device 1's trace, its ring wraps. Every event must arrive, in order, on the right device.
TEST(Model, LargeFileThroughThePagerAndTheEventWorker) {
  PickleWriter w(4);
  std::uint32_t memo = 0;
  auto put = [&] { w.memoize(); return memo++; };
  constexpr int kPerDevice[2] = {300'000, 500'000};
  w.dict(); put(); w.mark();
  w.str("device_traces"); put();
  w.list(); put(); w.mark();
  std::uint32_t keys[7] = {}, actions[2] = {}, frames = 0;
  bool first = true;
  for (int d = 0; d < 2; ++d) {
    w.list(); put();
    for (int i = 0; i < kPerDevice[d]; ++i) {
      if (i % 1000 == 0) w.mark();
      w.dict(); put(); w.mark();
      const char* names[7] = {"action", "addr", "size", "stream", "time_us", "frames", "compile_context"};
      auto key = [&](int k) {
        if (first) { w.str(names[k]); keys[k] = put(); }
        else w.long_binget(keys[k]);
      };
      key(0);
      if (first) {  // memoize both action strs, keep "alloc" (POP drops the other)
        w.str("free_completed"); actions[1] = put(); w.op('0');
        w.str("alloc"); actions[0] = put();
      } else {
        w.long_binget(actions[i % 2]);
      }
      key(1); w.integer(0x7f0000000000LL + (static_cast<long long>(i / 2) << 12));
      key(2); w.integer(512 * (1 + i % 7));
      key(3); w.integer(d == 1 && i % 3 == 0 ? 7 : 0);
      key(4); w.integer(1'700'000'000'000'000LL + i);
      key(6); w.str("N/A"); put();
      key(5);
      if (first) {
        w.list(); frames = put(); w.mark();
        w.dict(); put(); w.mark(); w.str("filename"); put(); w.str("/w/train.py"); put(); w.str("line"); put(); w.integer(9);
        w.str("name"); put(); w.str("step"); put(); w.setitems();
        w.appends();
        first = false;
      } else {
        w.long_binget(frames);
      }
      w.setitems();
      if (i % 1000 == 999 || i + 1 == kPerDevice[d]) w.appends();
    }
  }
  w.appends();
  w.setitems().stop();
  ASSERT_GT(w.bytes().size(), 40u << 20) << "the file must be larger than the pager's read-ahead";
  const auto path = std::filesystem::temp_directory_path() / ("memsnap_large_" + std::to_string(::getpid()) + ".pickle");
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(w.bytes().data()), static_cast<std::streamsize>(w.bytes().size()));
  const auto loaded = load_snapshot(path.string(), {400'000});
  std::filesystem::remove(path);
  const Snapshot& s = loaded.snapshot;
  ASSERT_EQ(s.device_traces.size(), 2u);
  const auto& d0 = s.device_traces[0];
  const auto& d1 = s.device_traces[1];
  EXPECT_EQ(d0.total, 300'000u);
  EXPECT_EQ(d0.dropped, 0u);
  ASSERT_EQ(d0.events.size(), 300'000u);
  EXPECT_EQ(d1.total, 500'000u);
  EXPECT_EQ(d1.dropped, 100'000u);
  ASSERT_EQ(d1.events.size(), 400'000u);
  for (std::size_t k = 0; k < d0.events.size(); ++k) {
    const TraceEvent& e = d0.events[k];
    ASSERT_EQ(e.time_us, 1'700'000'000'000'000LL + static_cast<std::int64_t>(k)) << k;
    ASSERT_EQ(e.action, k % 2 ? Action::FreeCompleted : Action::Alloc) << k;
    ASSERT_EQ(e.addr, 0x7f0000000000ull + ((k / 2) << 12)) << k;
    ASSERT_EQ(e.size, 512u * (1 + k % 7)) << k;
    ASSERT_EQ(s.stream(e), 0) << k;
  }
  for (std::size_t k = 0; k < d1.events.size(); ++k) {
    const std::size_t i = k + 100'000;  // the newest 400,000 of device 1, oldest first
    const TraceEvent& e = d1.events[k];
    ASSERT_EQ(e.time_us, 1'700'000'000'000'000LL + static_cast<std::int64_t>(i)) << k;
    ASSERT_EQ(s.stream(e), i % 3 == 0 ? 7 : 0) << k;
    ASSERT_EQ(s.frames[s.stack_begin(e.stack)[0]].line, 9) << k;
  }
}

// Streams are interned by value: ids are stable, each value gets one, and the 65536th distinct
// stream is refused with a clear error (raw stream pointers can be any int64).
TEST(Model, StreamIdsInternEveryDistinctStreamOnce) {
  Snapshot s;
  EXPECT_EQ(s.stream_id(0), 0);
  std::vector<StreamId> ids;
  for (std::int64_t i = 1; i < static_cast<std::int64_t>(kMaxStreams); ++i) ids.push_back(s.stream_id(i * 1000003 - 500000000));
  ASSERT_EQ(s.streams.size(), kMaxStreams);
  for (std::int64_t i = static_cast<std::int64_t>(kMaxStreams) - 1; i >= 1; --i) {
    const std::int64_t stream = i * 1000003 - 500000000;
    ASSERT_EQ(s.stream_id(stream), ids[static_cast<std::size_t>(i - 1)]);
    ASSERT_EQ(s.streams[ids[static_cast<std::size_t>(i - 1)]], stream);
  }
  try {
    s.stream_id(-1);
    FAIL() << "a 65536th distinct stream was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("more than 65535 distinct streams"), std::string::npos) << e.what();
  }
  EXPECT_EQ(s.stream_id(0), 0);  // known streams still resolve
}

}  // namespace model_tests
}  // namespace memsnap
