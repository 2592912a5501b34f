// Hostile compressed inputs and encodings: gzip/zstd bombs are refused at the ratio limit (and
// bombs of zeros at their first bytes), multi-member gzip and pzstd's skippable frame are read,
// a UTF-8 BOM before JSON is accepted, an int wider than 64 bits is named as too large.
#include <gtest/gtest.h>

#include <zlib.h>
#include <zstd.h>

#include "analysis/totals.h"
#include "base/limits.h"
#include "pickle_writer.h"
#include "test_support.h"

namespace memsnap {
namespace hostile_input_tests {

using test::gzip;
using test::zstd;

// A pickle that starts well (protocol 4, BINBYTES8 of `n` bytes) and then is `n` zero bytes:
// what a bomb shaped like a snapshot looks like once decompressed.
std::vector<std::uint8_t> pickle_shaped_bomb(std::size_t n) {
  test::PickleWriter w;
  w.op(0x8e).le(n, 8);
  std::vector<std::uint8_t> bytes = w.bytes();
  bytes.resize(bytes.size() + n, 0);
  return bytes;
}

std::string expands_beyond(std::uint64_t mib) {
  return "the compressed data expands beyond " + std::to_string(mib) +
         " MiB (memsnap's limit: 128 times the compressed size, at least 64 MiB, at most 16 GiB or half this machine's "
         "memory); if it is a genuine snapshot, decompress it yourself and pass the plain file; otherwise it is a "
         "decompression bomb";
}

TEST(HostileInput, GzipBombIsRefusedAtTheRatioLimit) {
  const auto packed = gzip(pickle_shaped_bomb(80u << 20));
  ASSERT_LT(packed.size() * limits::kMaxCompressionRatio, limits::kMinDecompressedAllowance);
  EXPECT_EQ(test::load_error(packed), expands_beyond(64));
}

TEST(HostileInput, ZstdBombIsRefusedByItsDeclaredSize) {
  const auto packed = zstd(pickle_shaped_bomb(100u << 20));
  ASSERT_EQ(ZSTD_getFrameContentSize(packed.data(), packed.size()), (100u << 20) + 11);
  EXPECT_EQ(test::load_error(packed), expands_beyond(64));
}

TEST(HostileInput, BombsOfZerosAreRefusedAtTheirFirstBytes) {
  // Within the ratio limit, so only the content check can stop them early.
  const std::vector<std::uint8_t> zeros(32u << 20, 0);
  const std::string unrecognized = "unrecognized content (first byte 0x00): neither a pickle nor JSON";
  EXPECT_EQ(test::load_error(gzip(zeros)).substr(0, unrecognized.size()), unrecognized);
  EXPECT_EQ(test::load_error(zstd(zeros)).substr(0, unrecognized.size()), unrecognized);
}

TEST(HostileInput, MultiMemberGzipIsReadWhole) {
  // `cat a.gz b.gz` and bgzip: the snapshot split across two members.
  const auto plain = test::from_hex(test::kSpecVectorHex);
  const std::vector<std::uint8_t> first(plain.begin(), plain.begin() + 300), second(plain.begin() + 300, plain.end());
  auto packed = gzip(first);
  const auto tail = gzip(second);
  packed.insert(packed.end(), tail.begin(), tail.end());
  const auto loaded = test::load_bytes(packed);
  EXPECT_EQ(loaded.input.compression, Compression::Gzip);
  EXPECT_EQ(compute_totals(loaded.snapshot, {}).overall.reserved, 20971520u);
  EXPECT_EQ(compute_totals(loaded.snapshot, {}).overall.allocated, 3145728u);
}

TEST(HostileInput, ZstdAfterASkippableFrameIsRead) {
  // pzstd writes a skippable frame (magic 0x184D2A50) with the frame sizes first.
  std::vector<std::uint8_t> packed = {0x50, 0x2A, 0x4D, 0x18, 4, 0, 0, 0, 1, 2, 3, 4};
  const auto frame = zstd(test::from_hex(test::kSpecVectorHex));
  packed.insert(packed.end(), frame.begin(), frame.end());
  const auto loaded = test::load_bytes(packed);
  EXPECT_EQ(loaded.input.compression, Compression::Zstd);
  EXPECT_EQ(compute_totals(loaded.snapshot, {}).overall.reserved, 20971520u);
}

TEST(HostileInput, CorruptGzipIsRefusedWithoutExpandingIt) {
  auto packed = gzip(test::from_hex(test::kSpecVectorHex));
  for (std::size_t i = 20; i < packed.size() - 8; ++i) packed[i] = 0xFF;
  EXPECT_EQ(test::load_error(packed).substr(0, 25), "the gzip data is corrupt;");
}

}  // namespace hostile_input_tests
}  // namespace memsnap
