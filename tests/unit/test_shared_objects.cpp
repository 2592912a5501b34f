// Objects a pickle shares through its memo: the model may not grow past twice the input (each
// reference would otherwise be expanded again), and what the model can share stays shared.
#include <gtest/gtest.h>

#include <string>

#include "base/error.h"
#include "pickle_writer.h"
#include "test_support.h"

namespace memsnap {
namespace shared_objects_tests {

using test::PickleWriter;

std::string expected_error(const char* what, std::size_t file_bytes) {
  return "the snapshot's " + std::string(what) + " expand to more than 32 MiB in memory from a file of " +
         std::to_string(file_bytes) +
         " bytes (one object referenced again and again through the pickle memo), which PyTorch never writes; " +
         kRecaptureRemedy;
}

// One blocks list of 10,000 blocks shared by 3,000 segments: 30 M blocks (1.2 GB) from ~410 KB.
TEST(SharedObjects, OneBlocksListSharedBySegmentsIsAnError) {
  PickleWriter w;
  w.dict().str("segments").mark();
  w.dict().mark().str("device").integer(0).str("address").integer(1 << 30).str("blocks");
  w.list().binput(0).mark();
  for (int k = 0; k < 10000; ++k) w.dict().mark().str("size").integer(512).str("state").str("inactive").setitems();
  w.appends().setitems();
  for (int s = 1; s < 3000; ++s) {
    w.dict().mark().str("device").integer(0).str("address").integer((1ll << 30) * (s + 1)).str("blocks").binget(0).setitems();
  }
  w.op('l').setitem().stop();
  ASSERT_LT(w.bytes().size(), 500000u);
  EXPECT_EQ(test::load_error(w.bytes()), expected_error("segment blocks", w.bytes().size()));
}

// One annotation with a 4,000-character name, referenced 100,000 times (800 MB of copies).
TEST(SharedObjects, OneAnnotationReferencedManyTimesIsAnError) {
  PickleWriter w;
  w.dict().mark().str("segments").list().str("external_annotations").list().mark();
  w.dict().binput(0).mark().str("name").str(std::string(4000, 'x')).str("stage").str("START");
  w.str("device").integer(-1).str("time_us").integer(5).setitems();
  for (int k = 1; k < 100000; ++k) w.binget(0);
  w.appends().setitems().stop();
  ASSERT_LT(w.bytes().size(), 210000u);
  EXPECT_EQ(test::load_error(w.bytes()), expected_error("external_annotations", w.bytes().size()));
}

// Within the bound the shared annotation is read at each reference, as Python would load it.
TEST(SharedObjects, ASharedAnnotationWithinTheBoundIsReadAtEachReference) {
  PickleWriter w;
  w.dict().mark().str("segments").list().str("external_annotations").list().mark();
  w.dict().binput(0).mark().str("name").str("ProfilerStep#1").str("stage").str("START");
  w.str("device").integer(-1).str("time_us").integer(5).setitems();
  for (int k = 1; k < 1000; ++k) w.binget(0);
  w.appends().setitems().stop();
  const auto loaded = test::load_bytes(w.bytes());
  ASSERT_EQ(loaded.snapshot.annotations.size(), 1000u);
  EXPECT_EQ(loaded.snapshot.annotations[999].name, "ProfilerStep#1");
  EXPECT_EQ(loaded.snapshot.annotations[999].time_us, 5);
}

// A settings dict whose values share one list at every level (2^40 values if expanded) becomes
// a bounded JSON text.
TEST(SharedObjects, NestedSharingInSettingsIsBounded) {
  PickleWriter w;
  w.dict().mark().str("segments").list().str("allocator_settings").dict().str("x");
  w.list().binput(0).integer(1).append().op('0');
  for (int level = 1; level <= 40; ++level) {
    const auto below = static_cast<std::uint8_t>(level - 1);
    w.mark().binget(below).binget(below).op('l').binput(static_cast<std::uint8_t>(level));
    if (level < 40) w.op('0');
  }
  w.setitem().setitems().stop();
  const auto loaded = test::load_bytes(w.bytes());
  const std::string& json = loaded.snapshot.settings.json;
  EXPECT_NE(json.find("<truncated>"), std::string::npos);
  EXPECT_LT(json.size(), 64u << 20);
}

// The reader caches the frame id of each memo slot a frames list references; a BINPUT that
// puts another frame dict in that slot must be seen by the next batch's frames lists.
TEST(SharedObjects, FramesListsSeeAFrameSlotThatWasOverwritten) {
  PickleWriter w;
  auto frame = [&](const char* file, int line) {
    w.dict().mark().str("filename").str(file).str("name").str("f").str("line").integer(line).setitems();
  };
  auto entry = [&](int i) {
    w.dict().memoize().mark().str("action").str("alloc").str("addr").integer(4096 + 512 * i).str("size").integer(512);
    w.str("stream").integer(0).str("time_us").integer(i).str("frames").list().mark().binget(1).appends().setitems();
  };
  w.dict().memoize().mark();                 // memo 0: the root
  w.str("segments").list();
  frame("/w/a.py", 1);
  w.binput(1).op('0');                        // memo 1: frame A, then off the stack
  w.str("device_traces").list().list().mark();
  for (int i = 0; i < 50; ++i) entry(i);
  w.appends();
  frame("/w/b.py", 2);
  w.binput(1).op('0');                        // memo 1 now holds frame B
  w.mark();
  for (int i = 50; i < 100; ++i) entry(i);
  w.appends().append().setitems().stop();
  const auto loaded = test::load_bytes(w.bytes());
  const Snapshot& snap = loaded.snapshot;
  const auto& events = snap.device_traces.at(0).events;
  ASSERT_EQ(events.size(), 100u);
  for (int i = 0; i < 100; ++i) {
    const Frame& f = snap.frames[snap.stack_begin(events[i].stack)[0]];
    ASSERT_EQ(f.line, i < 50 ? 1 : 2) << i;
    ASSERT_EQ(snap.strings[f.filename], i < 50 ? "/w/a.py" : "/w/b.py") << i;
  }
}

}  // namespace shared_objects_tests
}  // namespace memsnap
