// Sites are per device, and the default views show the OOM device, else the highest peak:
// the generated views_two_device_sites fixture (one line on two devices, device 1 out of memory
// below device 0's peak), the text, JSON and HTML site tables, the HTML segment map's order, and
// on the real corpus the DataParallel snapshot of three devices.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "analysis/analyze.h"
#include "model/load.h"
#include "report/html_report.h"
#include "report/json_report.h"
#include "report/text_report.h"
#include "test_support.h"

namespace memsnap {
namespace device_views_tests {

constexpr std::uint64_t MiB = 1ull << 20;

struct Loaded {
  LoadedSnapshot snapshot;
  Analysis analysis;
};

Loaded load_fixture(const std::string& name) {
  Loaded out{load_snapshot((std::filesystem::path(MEMSNAP_FIXTURE_DIR) / (name + ".pickle")).string()), {}};
  out.analysis = analyze(out.snapshot);
  return out;
}

std::vector<const Site*> sites_at(const std::vector<Site>& sites, const std::string& where) {
  std::vector<const Site*> out;
  for (const Site& s : sites) {
    if (s.site == where) out.push_back(&s);
  }
  return out;
}

TEST(DeviceViews, ALineOnTwoDevicesIsOneSitePerDevice) {
  const Loaded f = load_fixture("views_two_device_sites");
  const auto line = sites_at(f.analysis.sites, "/home/user/project/model.py:88");
  ASSERT_EQ(line.size(), 2u);
  EXPECT_EQ(line[0]->device, 0);
  EXPECT_EQ(line[0]->bytes, 3 * 300 * MiB);
  EXPECT_EQ(line[0]->blocks, 3u);
  EXPECT_EQ(line[1]->device, 1);
  EXPECT_EQ(line[1]->bytes, 2 * 300 * MiB);
  EXPECT_EQ(line[1]->blocks, 2u);
  // The live sets of one moment are on one device.
  for (const Site& s : f.analysis.sites_at_peak) EXPECT_EQ(s.device, f.analysis.peak_device) << s.site;
}

TEST(DeviceViews, TheDefaultViewIsTheOomDeviceNotTheHighestPeak) {
  const Loaded f = load_fixture("views_two_device_sites");
  EXPECT_EQ(f.analysis.peak_device, 0);
  EXPECT_EQ(f.analysis.view.device, 1);
  EXPECT_EQ(f.analysis.view.reason, ViewReason::Oom);
  ASSERT_EQ(f.analysis.sites_at_view_peak.size(), 1u);
  EXPECT_EQ(f.analysis.sites_at_view_peak[0].site, "/home/user/project/model.py:88");
  EXPECT_EQ(f.analysis.sites_at_view_peak[0].bytes, 2 * 300 * MiB);
  const std::string text = text_report({f.snapshot, f.analysis});
  EXPECT_NE(text.find("  Live at the peak (device 1, the OOM device):\n"
                      "    600.00 MiB  100.0%  /home/user/project/model.py:88 (forward)\n"),
            std::string::npos)
      << text;
  const auto json = json_report(f.snapshot, f.analysis);
  EXPECT_EQ(json.at("default_view"), (nlohmann::ordered_json{{"device", 1}, {"reason", "oom"}}));
  EXPECT_EQ(json.at("peak").at("device"), 0);
}

TEST(DeviceViews, SiteTablesCarryTheDevice) {
  const Loaded f = load_fixture("views_two_device_sites");
  const std::string text = text_report({f.snapshot, f.analysis});
  EXPECT_NE(text.find("   1. 900.00 MiB   60.0%      3 blocks  dev 0  activation\n"
                      "      at /home/user/project/model.py:88 in forward\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("   2. 600.00 MiB   40.0%      2 blocks  dev 1  activation\n"), std::string::npos) << text;
  const auto json = json_report(f.snapshot, f.analysis);
  std::set<std::int64_t> devices;
  for (const auto& s : json.at("top_sites")) devices.insert(s.at("device").get<std::int64_t>());
  EXPECT_EQ(devices, (std::set<std::int64_t>{0, 1}));
  for (const auto& s : json.at("trace").at("oom").at(0).at("top_sites")) EXPECT_EQ(s.at("device"), 1);
}

TEST(DeviceViews, OneDeviceHasNoDeviceColumn) {
  const Loaded f = load_fixture("healthy_training");
  const std::string text = text_report({f.snapshot, f.analysis});
  EXPECT_EQ(text.find(" dev 0  "), std::string::npos);
  EXPECT_EQ(json_report(f.snapshot, f.analysis).at("top_sites").at(0).at("device"), 0);
}

// The free bytes of a plotted segment (its blocks are [offset, size, state, site] quadruples).
std::uint64_t free_bytes(const nlohmann::ordered_json& segment) {
  const auto& b = segment.at("blocks");
  std::uint64_t free = 0;
  for (std::size_t i = 0; i + 3 < b.size(); i += 4) free += b[i + 2].get<int>() == 2 ? b[i + 1].get<std::uint64_t>() : 0;
  return free;
}

TEST(DeviceViews, TheSegmentMapShowsTheLargeFreeSegmentsFirst) {
  const Loaded f = load_fixture("views_two_device_sites");
  const auto plots = html_plot_data(f.snapshot, f.analysis);
  const auto& end = plots.at("segment_maps").at(0);
  ASSERT_EQ(end.at("kind"), "final");
  bool other_device = false;
  std::uint64_t last_free = UINT64_MAX, last_size = UINT64_MAX;
  for (const auto& seg : end.at("segments")) {
    const bool other = seg.at("device").get<std::int64_t>() != 1;  // the OOM device's segments come first
    EXPECT_TRUE(other || !other_device) << "a segment of device 1 after another device's";
    if (other != other_device) last_free = last_size = UINT64_MAX;
    other_device = other;
    const std::uint64_t free = free_bytes(seg), size = seg.at("size").get<std::uint64_t>();
    EXPECT_TRUE(free < last_free || (free == last_free && size <= last_size)) << seg.at("address");
    last_free = free;
    last_size = size;
  }
  EXPECT_TRUE(other_device);
}

// Constructor-Sun's DataParallel run (3 devices, OOM on device 1): the forward lines are sites on
// every device that ran them, each site's bytes are its device's, and the views show device 1.
TEST(DeviceViews, RealDataParallelSnapshotSplitsSitesByDevice) {
  const auto path = test::corpus_dir() / "Constructor-Sun_code_location_memory_snapshot.pickle";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "the real corpus is not here";
  const LoadedSnapshot loaded = load_snapshot(path.string());
  const Analysis a = analyze(loaded);
  EXPECT_EQ(a.view.device, 1);
  EXPECT_EQ(a.view.reason, ViewReason::Oom);
  std::map<std::int64_t, std::uint64_t> by_device;
  for (const Site& s : a.sites) by_device[s.device] += s.bytes;
  for (const DeviceTotals& d : a.totals.devices) EXPECT_EQ(by_device[d.device], d.totals.allocated) << "device " << d.device;
  const auto line = sites_at(a.sites, "/mnt/data3/haoyangsun/CurProject/src/train/models.py:174");
  std::set<std::int64_t> devices;
  for (const Site* s : line) devices.insert(s->device);
  EXPECT_GE(devices.size(), 2u);
}

}  // namespace device_views_tests
}  // namespace memsnap
