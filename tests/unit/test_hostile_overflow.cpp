// Sizes and times near 2^63 past the reader: the step table, the HTML reserved curve and time
// axis, the diff's deltas and the ranks' median keep their arithmetic defined (the ASan/UBSan
// build aborts on signed overflow, so each case here overflowed there before) and exact where the
// true value fits; annotations for every device are shared, not copied, and the JSON lists at most
// limits::kMaxListedAnnotations of them.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "analysis/analyze.h"
#include "base/checked.h"
#include "base/limits.h"
#include "report/json_report.h"
#include "test_support.h"

namespace memsnap {
namespace hostile_overflow_tests {

constexpr std::uint64_t kHuge = (1ull << 62) + (1ull << 61);  // 6 EiB: two of them pass 2^63

std::string hostile(const std::string& name) { return std::string(MEMSNAP_DATA_DIR) + "/hostile/" + name; }

nlohmann::json report_of(const std::string& args) {
  const test::CliRun r = test::run_memsnap(args + " --format json");
  EXPECT_EQ(r.status, 0) << r.err;
  return r.status == 0 ? nlohmann::json::parse(r.out) : nlohmann::json{};
}

TEST(CheckedArithmetic, SaturatesAtTheLimitsAndWrapsOnRequest) {
  EXPECT_EQ(saturating_add(kInt64Max - 1, 5), kInt64Max);
  EXPECT_EQ(saturating_add(kInt64Min + 1, -5), kInt64Min);
  EXPECT_EQ(saturating_sub(kInt64Max - 10, -20), kInt64Max);
  EXPECT_EQ(saturating_sub(-10, kInt64Max), kInt64Min);
  EXPECT_EQ(saturating_sub(7, 9), -2);
  EXPECT_EQ(saturating_difference(kHuge, 2 * kHuge), static_cast<std::int64_t>(kHuge));
  EXPECT_EQ(saturating_difference(2 * kHuge, kHuge), -static_cast<std::int64_t>(kHuge));
  EXPECT_EQ(saturating_difference(0, ~0ull), kInt64Max);
  EXPECT_EQ(saturating_difference(~0ull, 0), -kInt64Max);  // never INT64_MIN: it can be negated
  EXPECT_EQ(absolute_difference(kInt64Min, kInt64Max), ~0ull);
  EXPECT_EQ(wrapping_sub(wrapping_add(kInt64Max, 10), 10), kInt64Max);
}

TEST(HostileOverflow, StepTableOfHugeAllocationsIsDefined) {
  // An allocation of 6 EiB in each of four steps, never freed.
  const auto j = report_of(hostile("huge_steps.pickle"));
  ASSERT_EQ(j["steps"].size(), 1u);
  EXPECT_EQ(j["steps"][0]["source"], "ProfilerStep annotations");
  EXPECT_EQ(j["steps"][0]["boundaries"], 3);
  EXPECT_EQ(j["invariants"]["ok"], false);
  EXPECT_EQ(j["invariants"]["violations"][0],
            "device 0 trace event 0 has size 6917529027641081856 B, beyond any device (more than 1 PiB); the timeline and peak are meaningless");
}

TEST(HostileOverflow, HtmlReservedCurveAndTimeAxisAreDefined) {
  // Segment allocations of 6 EiB walked backwards from no segment; times from -2^63 + 10 to 2^63 - 10;
  // per-site stacked curves of 6 EiB allocations (three at one site, one a step).
  for (const char* name : {"huge_segment_events.pickle", "huge_times.pickle", "huge_steps.pickle", "huge_sizes.pickle"}) {
    const test::CliRun r = test::run_memsnap(hostile(name) + " --format html");
    EXPECT_EQ(r.status, 0) << name << ": " << r.err;
    EXPECT_NE(r.out.find("</html>"), std::string::npos) << name;
  }
}

TEST(HostileOverflow, DiffDeltasAreExactOrHeld) {
  // One segment of 6 EiB against one of 12 EiB: as int64 the larger is negative.
  const auto up = report_of(hostile("huge_segment_low.pickle") + " --diff " + hostile("huge_segment_high.pickle"));
  EXPECT_EQ(up["diff"]["totals_delta"]["reserved"], static_cast<std::int64_t>(kHuge));
  EXPECT_EQ(up["diff"]["sites"][0]["delta_bytes"], static_cast<std::int64_t>(kHuge));
  const auto down = report_of(hostile("huge_segment_high.pickle") + " --diff " + hostile("huge_segment_low.pickle"));
  EXPECT_EQ(down["diff"]["totals_delta"]["reserved"], -static_cast<std::int64_t>(kHuge));
  EXPECT_EQ(down["diff"]["totals_delta"]["allocated"], -static_cast<std::int64_t>(kHuge));
  EXPECT_EQ(down["diff"]["sites"][0]["delta_bytes"], -static_cast<std::int64_t>(kHuge));
  EXPECT_EQ(down["diff"]["sites"][0]["status"], "shrunk");
}

TEST(HostileOverflow, RanksMedianOfHugeRanksIsTheirValue) {
  // Two ranks of 6 EiB allocated each: their sum passes 2^63.
  const auto j = report_of(hostile("huge_ranks"));
  EXPECT_EQ(j["rank_comparison"]["median"], static_cast<std::int64_t>(kHuge));
  EXPECT_EQ(j["outlier_ranks"], nlohmann::json::array());
}

// A snapshot with `devices` devices (one alloc each) and the given annotations (JSON objects).
std::vector<std::uint8_t> annotated(std::size_t devices, const std::vector<std::string>& annotations) {
  std::string traces, anns;
  for (std::size_t d = 0; d < devices; ++d) {
    traces += fmt::format("{}[{{\"action\":\"alloc\",\"addr\":{},\"size\":512,\"stream\":0,\"time_us\":50,\"frames\":[]}}]",
                          d ? "," : "", 1 << 20);
  }
  for (std::size_t i = 0; i < annotations.size(); ++i) anns += (i ? "," : "") + annotations[i];
  const std::string text = "{\"segments\":[],\"device_traces\":[" + traces + "],\"external_annotations\":[" + anns + "]}";
  return {text.begin(), text.end()};
}

std::string annotation(std::int64_t device, const std::string& name, std::int64_t time) {
  return fmt::format("{{\"name\":\"{}\",\"stage\":\"START\",\"device\":{},\"time_us\":{}}}", name, device, time);
}

TEST(HostileAmplification, AnnotationsForEveryDeviceJoinEachTimelineInFileOrder) {
  const auto loaded = test::load_bytes(annotated(3, {annotation(-1, "a", 10), annotation(1, "b", 20), annotation(2, "c", 30),
                                                     annotation(-1, "d", 100), annotation(1, "e", 40)}));
  const Analysis a = analyze(loaded);
  ASSERT_EQ(a.timelines.size(), 3u);
  auto names = [&](std::size_t device) {
    std::string out;
    for (const StepMark& m : a.timelines[device].steps) out += fmt::format("{}@{} ", m.name, m.event_index);
    return out;
  };
  EXPECT_EQ(names(0), "a@0 d@1 ");
  EXPECT_EQ(names(1), "a@0 b@0 d@1 e@0 ");
  EXPECT_EQ(names(2), "a@0 c@0 d@1 ");
  // One copy of the text for all the timelines.
  EXPECT_EQ(a.timelines[0].steps[0].name.data(), a.timelines[2].steps[0].name.data());
}

TEST(HostileAmplification, JsonListsAtMostTheAnnotationBudget) {
  const std::size_t per_device = limits::kMaxListedAnnotations / 2;
  std::vector<std::string> anns;
  for (std::size_t i = 0; i < per_device + 3; ++i) anns.push_back(annotation(-1, "s", static_cast<std::int64_t>(i)));
  const auto loaded = test::load_bytes(annotated(2, anns));
  const auto j = json_report(loaded, analyze(loaded));
  for (const auto& t : j["timeline"]) {
    EXPECT_EQ(t["annotations"].size(), per_device);
    EXPECT_EQ(t["annotations_not_listed"], 3);
  }
}

}  // namespace hostile_overflow_tests
}  // namespace memsnap
