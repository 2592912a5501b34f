// A trace that retries after OOMs can hold hundreds of them, each with a larger live set than the
// one before: a device studies its first and last kStudiedOomsPerDevice / 2 OOMs one by one
// (layout, verdict, sites, budget) and counts the others, so the OOM stage stays linear in the
// trace. Hand-built snapshot of 40 OOMs on one device, each after one more live 1 MiB block.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "analysis/analyze.h"
#include "analysis/timeline.h"
#include "report/json_report.h"
#include "report/text_report.h"

namespace memsnap {
namespace many_ooms_tests {

constexpr std::uint64_t MiB = 1ull << 20;
constexpr std::uint64_t kBase = 0x7f0000000000ull;
constexpr std::size_t kOoms = 40;

// One 64 MiB segment (allocated before the window); before OOM k, k + 1 blocks of 1 MiB are live.
Snapshot retrying_after_ooms() {
  Snapshot s;
  s.strings = {""};
  s.has_device_traces_key = true;
  Segment seg;
  seg.address = kBase;
  seg.total_size = 64 * MiB;
  seg.first_block = 0;
  s.device_traces.resize(1);
  auto add = [&](Action action, std::uint64_t addr, std::uint64_t size) {
    TraceEvent e;
    e.action = action;
    e.addr = addr;
    e.size = size;
    e.stream_id = s.stream_id(0);
    s.device_traces[0].events.push_back(e);
  };
  for (std::size_t k = 0; k < kOoms; ++k) {
    add(Action::Alloc, kBase + k * MiB, MiB);
    add(Action::Oom, 0, (100 + k) * MiB);  // addr holds device_free
    Block b;
    b.address = kBase + k * MiB;
    b.size = b.requested_size = MiB;
    b.state = BlockState::ActiveAllocated;
    s.blocks.push_back(b);
  }
  Block rest;
  rest.address = kBase + kOoms * MiB;
  rest.size = (64 - kOoms) * MiB;
  rest.state = BlockState::Inactive;
  s.blocks.push_back(rest);
  seg.block_count = static_cast<std::uint32_t>(s.blocks.size());
  s.segments.push_back(seg);
  s.device_traces[0].total = s.device_traces[0].events.size();
  return s;
}

bool studied_position(std::size_t k) { return k < 16 || k >= kOoms - 16; }

TEST(ManyOoms, TheFirstAndLastSixteenAreStudied) {
  EXPECT_EQ(studied_oom_positions(3), (std::vector<std::size_t>{0, 1, 2}));
  EXPECT_EQ(studied_oom_positions(kStudiedOomsPerDevice).size(), kStudiedOomsPerDevice);
  const std::vector<std::size_t> many = studied_oom_positions(kOoms);
  ASSERT_EQ(many.size(), 32u);
  EXPECT_EQ(many[15], 15u);
  EXPECT_EQ(many[16], 24u);
  EXPECT_EQ(many.back(), 39u);
}

TEST(ManyOoms, StudiedOomsHaveTheirLayoutTheOthersOnlyTheirEvent) {
  LoadedSnapshot loaded;
  loaded.snapshot = retrying_after_ooms();
  const Analysis a = analyze(loaded);
  ASSERT_EQ(a.ooms.size(), kOoms);
  for (std::size_t k = 0; k < kOoms; ++k) {
    const OomAnalysis& o = a.ooms[k];
    EXPECT_EQ(o.event.size, (100 + k) * MiB) << k;
    EXPECT_EQ(o.studied, studied_position(k)) << k;
    if (o.studied) {
      EXPECT_EQ(o.at_oom.allocated, (k + 1) * MiB) << k;  // the live set grows by one block per OOM
      EXPECT_EQ(o.verdict, OomVerdict::Capacity) << k;
      ASSERT_FALSE(o.sites_before.empty()) << k;
      EXPECT_EQ(o.sites_before[0].bytes, (k + 1) * MiB) << k;
    } else {
      EXPECT_EQ(o.at_oom.allocated, 0u) << k;
      EXPECT_TRUE(o.sites_before.empty()) << k;
    }
  }
  // One budget per studied OOM, numbered as the report's OOMs.
  std::vector<std::size_t> budgeted;
  for (const MemoryBudget& b : a.budgets) {
    if (b.moment != BudgetMoment::Oom) continue;
    budgeted.push_back(b.oom);
    EXPECT_EQ(b.live_bytes, (b.oom + 1) * MiB) << b.oom;
  }
  EXPECT_EQ(budgeted, studied_oom_positions(kOoms));
}

TEST(ManyOoms, ReportsCountTheOomsNotStudied) {
  LoadedSnapshot loaded;
  loaded.snapshot = retrying_after_ooms();
  const Analysis a = analyze(loaded);
  std::string text = text_report({loaded, a});
  for (std::size_t at; (at = text.find("\n    ")) != std::string::npos;) text.replace(at, 5, " ");  // unwrapped
  EXPECT_NE(text.find("8 more OOMs on device 0 (#17 to #24, requests of 116.00 MiB to 123.00 MiB) are counted, not studied "
                      "one by one: memsnap studies the first 16 and the last 16 of a device; `memsnap at --oom 16` shows the "
                      "first of them"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("OOM on device 0: 139.00 MiB requested"), std::string::npos);
  // One capacity finding for the device, not one per OOM.
  std::size_t capacity = 0;
  for (const Pattern& p : a.patterns) capacity += p.id == PatternId::Capacity;
  EXPECT_EQ(capacity, 1u);
  EXPECT_NE(text.find("31 later studied OOM(s) on device 0 have the same verdict (capacity)"), std::string::npos);
  const auto json = json_report(loaded, a);
  const auto& ooms = json.at("trace").at("oom");
  ASSERT_EQ(ooms.size(), kOoms);
  EXPECT_EQ(ooms[16].at("studied"), false);
  EXPECT_FALSE(ooms[16].contains("verdict"));
  EXPECT_EQ(ooms[39].at("studied"), true);
  EXPECT_EQ(ooms[39].at("verdict"), "capacity");
  EXPECT_EQ(ooms[39].at("allocated_at_oom"), 40 * MiB);
}

}  // namespace many_ooms_tests
}  // namespace memsnap
