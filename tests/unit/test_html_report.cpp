// The HTML report: min/max downsampling keeps the peak and bounds the points; the page holds the
// JSON report, the plot data and the inlined chart library; a long trace stays small.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "analysis/analyze.h"
#include "model/load.h"
#include "report/downsample.h"
#include "report/html_report.h"
#include "report/json_report.h"

namespace memsnap {
namespace html_report_tests {

using ojson = nlohmann::ordered_json;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The JSON inlined in the page's memsnap-data element.
ojson page_data(const std::string& html) {
  const std::string open = R"(<script id="memsnap-data" type="application/json">)";
  const std::size_t start = html.find(open);
  EXPECT_NE(start, std::string::npos);
  const std::size_t from = start + open.size();
  const std::size_t end = html.find("</script>", from);
  return ojson::parse(html.substr(from, end - from));
}

std::vector<std::size_t> downsample_one(const std::vector<std::int64_t>& curve, std::size_t max_points,
                                        std::vector<std::size_t> keep = {}) {
  return downsample_indices(curve.size(), 1, [&](std::size_t, std::size_t i) { return curve[i]; }, max_points, keep);
}

TEST(Downsample, ShortCurvesAreKeptWhole) {
  const std::vector<std::int64_t> curve{5, 1, 9, 3};
  EXPECT_EQ(downsample_one(curve, 4), (std::vector<std::size_t>{0, 1, 2, 3}));
  EXPECT_TRUE(downsample_one({}, 10).empty());
}

TEST(Downsample, KeepsExtremesExactlyAndBoundsPoints) {
  std::mt19937_64 rng(7);
  std::vector<std::int64_t> curve(1'000'001);
  std::int64_t v = 1 << 30;
  for (auto& x : curve) {
    v += static_cast<std::int64_t>(rng() % 2'000'001) - 1'000'000;
    x = v;
  }
  curve[612'345] += 50'000'000'000;  // a one-event spike: the peak
  curve[77] -= 50'000'000'000;       // and a one-event dip
  for (std::size_t max_points : {8, 100, 1000, 4000}) {
    const std::vector<std::size_t> keep{3, 999'999};
    const auto idx = downsample_one(curve, max_points, keep);
    EXPECT_LE(idx.size(), max_points) << max_points;
    EXPECT_TRUE(std::is_sorted(idx.begin(), idx.end()));
    EXPECT_EQ(std::adjacent_find(idx.begin(), idx.end()), idx.end());
    EXPECT_EQ(idx.front(), 0u);
    EXPECT_EQ(idx.back(), curve.size() - 1);
    for (std::size_t k : keep) EXPECT_TRUE(std::binary_search(idx.begin(), idx.end(), k));
    const auto values = values_at(idx, [&](std::size_t i) { return curve[i]; });
    EXPECT_EQ(*std::max_element(values.begin(), values.end()), *std::max_element(curve.begin(), curve.end()));
    EXPECT_EQ(*std::min_element(values.begin(), values.end()), *std::min_element(curve.begin(), curve.end()));
    EXPECT_TRUE(std::binary_search(idx.begin(), idx.end(), 612'345u));
  }
}

TEST(Downsample, KeepsEveryCurvesPeak) {
  std::vector<std::int64_t> a(100'000, 10), b(100'000, 10);
  a[40'001] = 1000;
  b[40'002] = 2000;  // same bucket as a's peak
  const auto idx = downsample_indices(a.size(), 2, [&](std::size_t c, std::size_t i) { return c == 0 ? a[i] : b[i]; }, 50);
  EXPECT_LE(idx.size(), 50u);
  EXPECT_TRUE(std::binary_search(idx.begin(), idx.end(), 40'001u));
  EXPECT_TRUE(std::binary_search(idx.begin(), idx.end(), 40'002u));
}

TEST(HtmlReport, PageHoldsTheReportPlotsAndInlinedLibrary) {
  const LoadedSnapshot loaded = load_snapshot(std::string(MEMSNAP_DATA_DIR) + "/example.pickle");
  const Analysis analysis = analyze(loaded);
  const std::string html = html_report(loaded, analysis);
  EXPECT_EQ(html.rfind("<!doctype html>", 0), 0u);
  EXPECT_EQ(html.find("<!--MEMSNAP:"), std::string::npos) << "a template marker was left in the page";

  // The charting library from node_modules, verbatim, and nothing loaded from elsewhere.
  const std::string library = read_text(MEMSNAP_CHART_LIBRARY);
  ASSERT_GT(library.size(), 100'000u);
  EXPECT_NE(html.find(library), std::string::npos);
  EXPECT_EQ(html.find("<script src"), std::string::npos);
  EXPECT_EQ(html.find("<link"), std::string::npos);
  EXPECT_EQ(html_chart_library().rfind("echarts ", 0), 0u);

  const ojson data = page_data(html);
  EXPECT_EQ(data["report"], json_report(loaded, analysis));
  const ojson& plots = data["plots"];
  EXPECT_EQ(plots["schema"], kHtmlPlotsSchema);
  EXPECT_EQ(plots["x_axis"], "time");
  ASSERT_EQ(plots["devices"].size(), analysis.timelines.size());
  const ojson& device = plots["devices"][0];
  const auto& allocated = device["timeline"]["allocated"];
  EXPECT_EQ(*std::max_element(allocated.begin(), allocated.end()), *analysis.timelines[0].peak_allocated);
  EXPECT_EQ(device["peak"]["allocated"], *analysis.timelines[0].peak_allocated);
  EXPECT_EQ(device["timeline"]["reserved"].back(), analysis.totals.devices[0].totals.reserved);
  const auto& reserved = device["timeline"]["reserved"];
  EXPECT_EQ(*std::max_element(reserved.begin(), reserved.end()), *analysis.totals.overall.peak_reserved);
  EXPECT_EQ(device["steps_total"], loaded.snapshot.annotations.size());

  // The stacked sites add up to the allocated curve, so the stack's top is the peak.
  const ojson& stack = device["stack"];
  std::int64_t top = 0;
  for (std::size_t k = 0; k < stack["other"].size(); ++k) {
    std::int64_t sum = stack["other"][k];
    for (const auto& site : stack["sites"]) sum += site["values"][k].get<std::int64_t>();
    top = std::max(top, sum);
  }
  EXPECT_EQ(top, *analysis.timelines[0].peak_allocated);
  EXPECT_EQ(plots["sites"][stack["sites"][0]["site"].get<std::size_t>()]["site"].get<std::string>().find("/home/user/project/"), 0u);

  // The final segment map holds every segment and block byte.
  const ojson& map = plots["segment_maps"][0];
  EXPECT_EQ(map["kind"], "final");
  EXPECT_EQ(map["reserved"], analysis.totals.overall.reserved);
  EXPECT_EQ(map["inactive"], analysis.totals.overall.inactive);
  EXPECT_EQ(map["segments_total"], analysis.totals.overall.segments);
  std::uint64_t blocks = 0;
  for (const auto& seg : map["segments"]) blocks += seg["blocks"].size() / 4;
  EXPECT_EQ(blocks, analysis.totals.overall.blocks);
}

TEST(HtmlReport, DataCannotCloseItsScriptElement) {
  ojson report = {{"headline", "</script><script>alert(1)</script><!-- x"}, {"bad_utf8", std::string("caf\xc3", 4)}};
  const std::string html = html_page(report, nullptr);
  const std::size_t data_at = html.find(R"(id="memsnap-data")");
  const std::size_t close = html.find("</script>", data_at);
  const std::string inlined = html.substr(data_at, close - data_at);
  EXPECT_EQ(inlined.find("<", 1), std::string::npos);
  const ojson data = page_data(html);
  EXPECT_EQ(data["report"]["headline"], "</script><script>alert(1)</script><!-- x");
  EXPECT_TRUE(data["plots"].is_null());
  // The plots' half is escaped as well.
  const std::string both = html_page(report, ojson{{"label", "<!-- <b>"}});
  const std::size_t both_at = both.find(R"(id="memsnap-data")");
  EXPECT_EQ(both.substr(both_at, both.find("</script>", both_at) - both_at).find("<", 1), std::string::npos);
  EXPECT_EQ(page_data(both)["plots"]["label"], "<!-- <b>");
}

// A synthetic snapshot: per device `n` trace events (allocations of varying size each freed 500
// events later, a one-event spike of 10 GiB on device 0, step annotations, an OOM at the end) and
// `segments` 1 GiB segments of `blocks` blocks, allocated and inactive in turn.
LoadedSnapshot synthetic_snapshot(std::size_t devices, std::size_t n, std::size_t segments, std::size_t blocks) {
  LoadedSnapshot loaded;
  Snapshot& s = loaded.snapshot;
  s.strings = {"", "/home/user/project/train.py", "forward", "/home/user/project/model.py", "step"};
  for (std::int64_t line = 1; line <= 40; ++line) {
    s.frames.push_back({line % 2 ? StrId{1} : StrId{3}, line % 2 ? StrId{2} : StrId{4}, line});
    s.stack_frames.push_back(static_cast<FrameId>(line - 1));
    s.stack_offsets.push_back(static_cast<std::uint32_t>(s.stack_frames.size()));
  }
  auto size_of = [](std::size_t i) { return (1ull << 20) + (i % 1000) * 4096 + (i / 1000) * 512; };
  for (std::size_t d = 0; d < devices; ++d) {
    DeviceTrace& trace = s.device_traces.emplace_back();
    std::int64_t time = 1'713'558'427'000'000;
    auto push = [&](Action action, std::uint64_t addr, std::uint64_t size, StackId stack) {
      TraceEvent e;
      e.addr = addr;
      e.size = size;
      e.time_us = time++;
      e.stack = stack;
      e.action = action;
      e.has_time = true;
      trace.events.push_back(e);
    };
    const std::uint64_t base = (d + 1) << 44;
    const std::size_t allocs = (n - 4) / 2;
    for (std::size_t i = 0; i < allocs; ++i) {
      push(Action::Alloc, base + (i << 24), size_of(i), static_cast<StackId>(1 + i % 40));
      if (i >= 500) push(Action::FreeCompleted, base + ((i - 500) << 24), size_of(i - 500), 1);
      if (d == 0 && i == allocs / 3) {
        push(Action::Alloc, 1ull << 62, 10ull << 30, 7);
        push(Action::FreeCompleted, 1ull << 62, 10ull << 30, 7);
      }
      if (d == 0 && i % 500 == 0) {
        s.annotations.push_back({-1, time, "ProfilerStep#" + std::to_string(i / 1000), i % 1000 ? "END" : "START", "{}"});
      }
    }
    for (std::size_t i = allocs >= 500 ? allocs - 500 : 0; i < allocs; ++i) {
      push(Action::FreeCompleted, base + (i << 24), size_of(i), 1);
    }
    push(Action::Oom, 1ull << 20, 4ull << 30, 3);
    trace.total = trace.events.size();
    const std::uint64_t block = (1ull << 30) / blocks;
    for (std::size_t g = 0; g < segments; ++g) {
      const std::uint64_t address = ((d + 1) << 40) + (std::uint64_t(g) << 31);
      Segment seg{static_cast<std::int64_t>(d), address, block * blocks};
      seg.first_block = static_cast<std::uint32_t>(s.blocks.size());
      seg.block_count = static_cast<std::uint32_t>(blocks);
      for (std::size_t b = 0; b < blocks; ++b) {
        const bool live = b % 2 == 0;
        s.blocks.push_back({address + b * block, block, live ? block : 0, live ? BlockState::ActiveAllocated : BlockState::Inactive,
                            live ? static_cast<StackId>(1 + (g + b) % 40) : kNoStack, false});
      }
      s.segments.push_back(seg);
    }
  }
  s.has_device_traces_key = true;
  loaded.input.path = "synthetic.pickle";
  return loaded;
}

// Every input the replay tests read: the example and the generated fixtures.
std::vector<std::string> replayed_inputs() {
  std::vector<std::string> paths;
  for (const auto& e : std::filesystem::directory_iterator(MEMSNAP_FIXTURE_DIR)) {
    if (e.path().extension() == ".pickle") paths.push_back(e.path().string());
  }
  std::sort(paths.begin(), paths.end());
  paths.insert(paths.begin(), std::string(MEMSNAP_DATA_DIR) + "/example.pickle");
  return paths;
}

// The stacked view and the analysis read one replay: with every site drawn, the sites' areas at
// the peak are the analysis' sites at the peak, byte for byte, and nothing is left for "other".
// Calls fn(path, analysis, plots, timeline, its stacked view) for each device of each replayed
// input, with every site drawn.
template <typename Fn>
void for_each_stacked_view_with_every_site(Fn&& fn) {
  HtmlOptions options;
  options.stack_sites = 100'000;
  for (const std::string& path : replayed_inputs()) {
    const LoadedSnapshot loaded = load_snapshot(path);
    const Analysis analysis = analyze(loaded);
    const ojson plots = html_plot_data(loaded, analysis, options);
    for (std::size_t d = 0; d < analysis.timelines.size(); ++d) fn(path, analysis, plots, analysis.timelines[d], plots["devices"][d]["stack"]);
  }
}

TEST(HtmlReport, StackedSitesAtThePeakAreTheAnalysisSitesAtThePeak) {
  std::size_t checked = 0;
  for_each_stacked_view_with_every_site([&](const std::string& path, const Analysis& analysis, const ojson& plots,
                                            const DeviceTimeline& t, const ojson& stack) {
    if (t.device != analysis.peak_device) return;
    const auto& index = stack["index"];
    const auto at = std::find(index.begin(), index.end(), t.peak_index);
    ASSERT_NE(at, index.end()) << path << ": the peak is a point of the stacked view";
    const auto k = static_cast<std::size_t>(at - index.begin());
    std::map<std::string, std::int64_t> drawn, measured;
    for (const auto& site : stack["sites"]) {
      const std::int64_t bytes = site["values"][k];
      if (bytes != 0) drawn[plots["sites"][site["site"].get<std::size_t>()]["site"].get<std::string>()] += bytes;
    }
    for (const Site& site : analysis.sites_at_peak) measured[site.site] += static_cast<std::int64_t>(site.requested);
    EXPECT_EQ(drawn, measured) << path;
    EXPECT_EQ(stack["other"][k], 0) << path;
    ++checked;
  });
  EXPECT_GT(checked, 10u);
}

// With every site drawn, the sites' areas add up to the allocated curve at every point of the
// stacked view (nothing is left for "other"), on every device.
TEST(HtmlReport, StackedSitesAddUpToTheAllocatedCurveAtEveryPoint) {
  std::size_t checked = 0;
  for_each_stacked_view_with_every_site([&](const std::string& path, const Analysis&, const ojson&, const DeviceTimeline& t,
                                            const ojson& stack) {
    const auto& index = stack["index"];
    ASSERT_EQ(stack["other"].size(), index.size()) << path;
    for (std::size_t k = 0; k < index.size(); ++k) {
      std::int64_t sum = 0;
      for (const auto& site : stack["sites"]) sum += site["values"][k].get<std::int64_t>();
      ASSERT_EQ(sum, t.curve[index[k].get<std::size_t>()]) << path << " point " << k;
      ASSERT_EQ(stack["other"][k], 0) << path << " point " << k;
    }
    checked += index.size();
  });
  EXPECT_GT(checked, 1000u);
}

// The reserved curve is the replay's: its drawn maximum and its peak marker are peak_reserved.
TEST(HtmlReport, ReservedCurvePeaksAtTheReplaysPeakReserved) {
  std::size_t checked = 0;
  for (const std::string& path : replayed_inputs()) {
    const LoadedSnapshot loaded = load_snapshot(path);
    const Analysis analysis = analyze(loaded);
    const ojson plots = html_plot_data(loaded, analysis);
    for (std::size_t d = 0; d < analysis.timelines.size(); ++d) {
      const DeviceTimeline& t = analysis.timelines[d];
      ASSERT_TRUE(t.peak_reserved) << path;
      const ojson& device = plots["devices"][d];
      const auto& reserved = device["timeline"]["reserved"];
      EXPECT_EQ(*std::max_element(reserved.begin(), reserved.end()), *t.peak_reserved) << path;
      EXPECT_EQ(device["reserved_peak"]["reserved"], *t.peak_reserved) << path;
      EXPECT_EQ(device["reserved_peak"]["index"], t.reserved_peak_index) << path;
      EXPECT_EQ(reserved_at(t, t.reserved_peak_index), *t.peak_reserved) << path;
      EXPECT_EQ(reserved.front(), t.reserved_start) << path;
      ++checked;
    }
  }
  EXPECT_GT(checked, 10u);
}

TEST(HtmlReport, LongTimelinesStaySmallAndKeepThePeak) {
  const LoadedSnapshot loaded = synthetic_snapshot(4, 400'000, 800, 40);
  const Analysis analysis = analyze(loaded);
  ASSERT_EQ(analysis.timelines.size(), 4u);
  const HtmlOptions options;
  const std::string html = html_report(loaded, analysis, options);
  EXPECT_LT(html.size(), 5u << 20) << "the report must stay under 5 MB";
  const ojson plots = page_data(html)["plots"];
  std::size_t points = 0;
  for (std::size_t d = 0; d < 4; ++d) {
    const ojson& device = plots["devices"][d];
    const ojson& line = device["timeline"];
    points += line["index"].size();
    EXPECT_EQ(line["index"].size(), line["allocated"].size());
    EXPECT_EQ(line["index"].size(), line["t_us"].size());
    const auto& allocated = line["allocated"];
    EXPECT_EQ(*std::max_element(allocated.begin(), allocated.end()), *analysis.timelines[d].peak_allocated);
    EXPECT_LE(device["stack"]["index"].size(), options.stack_points);
    EXPECT_LE(device["steps"].size(), options.max_steps);
    EXPECT_EQ(device["ooms"].size(), 1u);
  }
  EXPECT_GT(*analysis.timelines[0].peak_allocated, 10ll << 30);
  EXPECT_LE(points, options.all_devices_points);
  EXPECT_EQ(plots["devices"][0]["steps_total"], loaded.snapshot.annotations.size());
  EXPECT_LT(plots["devices"][0]["steps"].size(), loaded.snapshot.annotations.size());
  // Step marks are thinned by name, so every START drawn has its END.
  std::map<std::string, int> stages;
  for (const auto& m : plots["devices"][0]["steps"]) stages[m["name"].get<std::string>()] += m["stage"] == "START" ? 1 : -1;
  for (const auto& [name, balance] : stages) EXPECT_EQ(balance, 0) << name;

  // The end and three OOM layouts: the largest segments, within the block budget, same bytes.
  const ojson& maps = plots["segment_maps"];
  ASSERT_EQ(maps.size(), 1u + options.max_oom_maps);
  EXPECT_EQ(maps[0]["segments_total"], 4u * 800);
  for (const auto& map : maps) {
    EXPECT_EQ(map["segments"].size(), options.max_segments);
    std::size_t blocks = 0;
    for (const auto& seg : map["segments"]) {
      blocks += seg["blocks"].size() / 4;
      std::uint64_t covered = 0;
      for (std::size_t i = 0; i < seg["blocks"].size(); i += 4) covered += seg["blocks"][i + 1].get<std::uint64_t>();
      EXPECT_EQ(covered, seg["size"].get<std::uint64_t>());
    }
    EXPECT_LE(blocks, options.max_blocks);
    EXPECT_GT(blocks, options.max_blocks / 4) << "merging keeps as much detail as the budget allows";
  }
}

}  // namespace html_report_tests
}  // namespace memsnap
