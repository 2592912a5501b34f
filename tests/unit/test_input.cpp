// Format detection by content, compressed inputs, and the messages for things that are not snapshots.
#include <gtest/gtest.h>

#include <zlib.h>
#include <zstd.h>

#include "analysis/totals.h"
#include "test_support.h"

namespace memsnap {
namespace input_tests {

std::vector<std::uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

using test::gzip;
using test::zstd;

constexpr const char* kNeedSnapshot =
    "memsnap needs the snapshot file itself: call torch.cuda.memory._dump_snapshot(\"snap.pickle\") in your run "
    "(`memsnap capture` prints the recipe)";

TEST(Input, ImagesHtmlAndArchivesAreNamed) {
  EXPECT_EQ(test::load_error(bytes_of("\x89PNG\r\n\x1a\n....")),
            std::string("this is an image (a memory_viz screenshot?), not a memory snapshot; ") + kNeedSnapshot);
  EXPECT_EQ(test::load_error(bytes_of("\xFF\xD8\xFF\xE0....")),
            std::string("this is an image (a memory_viz screenshot?), not a memory snapshot; ") + kNeedSnapshot);
  EXPECT_EQ(test::load_error(bytes_of("  <!DOCTYPE html><html>...")),
            std::string("this is an HTML/SVG page (a saved memory_viz view?), not a memory snapshot; ") + kNeedSnapshot);
  EXPECT_EQ(test::load_error(bytes_of("PK\x03\x04rest")),
            std::string("this is a zip archive (a torch.save() checkpoint?), not a memory snapshot; ") + kNeedSnapshot);
  EXPECT_EQ(test::load_error(bytes_of("hello world")),
            std::string("unrecognized content (first byte 0x68): neither a pickle nor JSON; ") + kNeedSnapshot);
  EXPECT_NE(test::load_error(bytes_of("(dp0\n")).find("protocol 0/1 pickle"), std::string::npos);
}

TEST(Input, CompressedPicklesLoadTheSame) {
  const auto plain = test::from_hex(test::kSpecVectorHex);
  for (const auto& packed : {gzip(plain), zstd(plain)}) {
    const auto loaded = test::load_bytes(packed);
    EXPECT_EQ(compute_totals(loaded.snapshot, build_timelines(loaded.snapshot)).overall.reserved, 20971520u);
    EXPECT_EQ(loaded.input.bytes, packed.size());
  }
  EXPECT_EQ(test::load_bytes(gzip(plain)).input.compression, Compression::Gzip);
  EXPECT_EQ(test::load_bytes(zstd(plain)).input.compression, Compression::Zstd);
}

TEST(Input, CorruptCompressionIsReported) {
  auto packed = gzip(test::from_hex(test::kSpecVectorHex));
  packed.resize(packed.size() / 2);
  EXPECT_EQ(test::load_error(packed), "the gzip data is truncated; re-capture it with torch.cuda.memory._dump_snapshot() (run `memsnap capture`) and check the copy is complete");
  auto z = zstd(test::from_hex(test::kSpecVectorHex));
  z.resize(z.size() - 3);
  EXPECT_NE(test::load_error(z).find("the zstd data is"), std::string::npos);
  auto garbage = gzip(test::from_hex(test::kSpecVectorHex));
  for (std::size_t i = 10; i < garbage.size(); ++i) garbage[i] ^= 0x5a;
  EXPECT_NE(test::load_error(garbage).find("the gzip data is"), std::string::npos);
}

TEST(Input, JsonSnapshotsLoad) {
  const std::string json = R"({"segments": [{"device": 0, "address": 4096, "total_size": 2097152, "stream": 0,
    "segment_type": "small", "segment_pool_id": [0, 0], "frames": [],
    "blocks": [{"address": 4096, "size": 512, "requested_size": 100, "state": "active_allocated",
                "frames": [{"name": "f", "filename": "/w/a.py", "line": 3}]},
               {"address": 4608, "size": 2096640, "requested_size": 0, "state": "inactive", "frames": []}]}],
    "device_traces": [[{"action": "alloc", "addr": 4096, "size": 100, "stream": 0, "time_us": 1,
                        "frames": [{"name": "f", "filename": "/w/a.py", "line": 3}]}]],
    "allocator_settings": {"max_split_size": -1}, "external_annotations": []})";
  const auto loaded = test::load_bytes(bytes_of(json));
  EXPECT_EQ(loaded.input.format, Format::Json);
  const auto t = compute_totals(loaded.snapshot, build_timelines(loaded.snapshot)).overall;
  EXPECT_EQ(t.reserved, 2097152u);
  EXPECT_EQ(t.allocated, 512u);
  EXPECT_EQ(t.requested, 100u);
  EXPECT_EQ(t.peak_allocated, 100);
  const auto& s = loaded.snapshot;
  EXPECT_EQ(s.device_traces[0].events[0].stack, s.blocks[0].stack);
  EXPECT_NE(test::load_error(bytes_of("{\"segments\": [")).find("the JSON is malformed"), std::string::npos);
}

}  // namespace input_tests
}  // namespace memsnap
