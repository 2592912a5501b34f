// Two-snapshot diffs: a generated pair of one growing_container run (known leaking site and
// count), site matching by file:line and function, and the warnings for pairs that cannot be from
// one run; plus the CLI's --diff JSON.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include "analysis/conclude.h"
#include "analysis/analyze.h"
#include "analysis/diff.h"
#include "model/load.h"
#include "test_support.h"

namespace memsnap {
namespace diff_tests {

std::filesystem::path fixture(const std::string& name) { return std::filesystem::path(MEMSNAP_FIXTURE_DIR) / name; }

nlohmann::json group_truth() {
  std::ifstream in(fixture("diff_growing_container.group.json"));
  return nlohmann::json::parse(in);
}

struct Side {
  LoadedSnapshot loaded;
  Analysis analysis;
};

Side side(const std::filesystem::path& path) {
  Side s{load_snapshot(path.string()), {}};
  s.analysis = analyze(s.loaded);
  return s;
}

Side early() { return side(fixture("diff_growing_container") / "early.pickle"); }
Side late() { return side(fixture("diff_growing_container") / "late.pickle"); }

bool any_contains(const std::vector<std::string>& lines, const std::string& part) {
  return std::any_of(lines.begin(), lines.end(), [&](const std::string& l) { return l.find(part) != std::string::npos; });
}

TEST(Diff, GrowingContainerPairNamesTheLeakingSite) {
  const auto expect = group_truth()["expect"];
  const Side a = early(), b = late();
  const DiffReport d = diff_snapshots(a.loaded, a.analysis, b.loaded, b.analysis);
  ASSERT_FALSE(d.sites.empty());
  const DiffSite& top = d.sites.front();
  EXPECT_EQ(top.site, expect["leaking_site"].get<std::string>());
  EXPECT_EQ(top.function, expect["leaking_function"].get<std::string>());
  EXPECT_EQ(top.delta_blocks, expect["delta_blocks"].get<std::int64_t>());
  EXPECT_EQ(top.delta_bytes, expect["delta_bytes"].get<std::int64_t>());
  EXPECT_EQ(name_of(top.status), expect["status"].get<std::string>());
  EXPECT_EQ(name_of(top.verdict), expect["verdict"].get<std::string>());
  ASSERT_TRUE(top.pattern);
  EXPECT_EQ(name_of(*top.pattern), expect["pattern"].get<std::string>());
  ASSERT_TRUE(d.steps_between);
  EXPECT_EQ(*d.steps_between, expect["steps_between"].get<std::int64_t>());
  EXPECT_EQ(d.warnings.size(), expect["warnings"].get<std::size_t>()) << (d.warnings.empty() ? "" : d.warnings.front());
  // Only the leaking site is called leaking: training itself is steady between the snapshots.
  for (std::size_t i = 1; i < d.sites.size(); ++i) EXPECT_EQ(d.sites[i].verdict, DiffVerdict::None) << d.sites[i].site;
  const auto before = a.analysis.totals.overall.allocated, after = b.analysis.totals.overall.allocated;
  EXPECT_EQ(static_cast<std::int64_t>(after - before), top.delta_bytes);
  const std::string headline = diff_headline(d);
  EXPECT_NE(headline.find("(10 steps apart)"), std::string::npos) << headline;
  EXPECT_NE(headline.find("the site that grew most is " + top.site), std::string::npos) << headline;
  EXPECT_NE(headline.find("leaking (growing_container)"), std::string::npos) << headline;
}

TEST(Diff, ConcludeDiffLeadsWithTheDiffsConclusion) {
  const Side a = early();
  Side b = late();
  const DiffReport d = diff_snapshots(a.loaded, a.analysis, b.loaded, b.analysis);
  conclude_diff(d, b.analysis);
  EXPECT_EQ(b.analysis.headline, diff_headline(d));
  const auto it = std::find_if(b.analysis.patterns.begin(), b.analysis.patterns.end(),
                               [](const Pattern& p) { return p.id == PatternId::GrowingContainer; });
  ASSERT_NE(it, b.analysis.patterns.end());
  EXPECT_EQ(it->confidence, Confidence::High);
  EXPECT_NE(it->evidence.front().text().find("between the snapshots (10 steps apart)"), std::string::npos) << it->evidence.front();
  ASSERT_FALSE(b.analysis.next_steps.empty());
  EXPECT_NE(b.analysis.next_steps.front().text().find("metrics.py:27"), std::string::npos) << b.analysis.next_steps.front();
  EXPECT_FALSE(any_contains(test::texts(b.analysis.next_steps), "--diff")) << "the diff was done";
}

TEST(Diff, SameSnapshotTwiceShowsNoGrowth) {
  const Side a = early(), b = early();
  const DiffReport d = diff_snapshots(a.loaded, a.analysis, b.loaded, b.analysis);
  for (const auto& s : d.sites) {
    EXPECT_EQ(s.status, DiffStatus::Same) << s.site;
    EXPECT_EQ(s.verdict, DiffVerdict::None);
  }
  EXPECT_TRUE(d.warnings.empty());
  EXPECT_NE(diff_headline(d).find("nothing leaks"), std::string::npos) << diff_headline(d);
}

TEST(Diff, SwappedPairWarnsAndShrinks) {
  const Side a = late(), b = early();
  const DiffReport d = diff_snapshots(a.loaded, a.analysis, b.loaded, b.analysis);
  EXPECT_TRUE(any_contains(d.warnings, "swapped")) << (d.warnings.empty() ? "" : d.warnings.front());
  const auto it = std::find_if(d.sites.begin(), d.sites.end(), [](const DiffSite& s) { return s.site.find("metrics.py:27") != std::string::npos; });
  ASSERT_NE(it, d.sites.end());
  EXPECT_EQ(it->status, DiffStatus::Shrunk);
  EXPECT_EQ(it->delta_blocks, -10);
  for (const auto& s : d.sites) EXPECT_NE(s.verdict, DiffVerdict::Leaking) << s.site;
}

TEST(Diff, DifferentDevicesWarn) {
  const Side a = early(), b = side(fixture("multi_device.pickle"));
  const DiffReport d = diff_snapshots(a.loaded, a.analysis, b.loaded, b.analysis);
  EXPECT_TRUE(any_contains(d.warnings, "different devices")) << (d.warnings.empty() ? "" : d.warnings.front());
}

TEST(Diff, TotalsInconsistentWithTheTraceWarn) {
  // Another program whose trace window covers the earlier snapshot's moment with other live bytes.
  const Side a = early(), b = side(fixture("healthy_training.pickle"));
  const DiffReport d = diff_snapshots(a.loaded, a.analysis, b.loaded, b.analysis);
  EXPECT_TRUE(any_contains(d.warnings, "totals inconsistent with the trace")) << (d.warnings.empty() ? "" : d.warnings.front());
}

Site site(const std::string& where, const std::string& function, std::uint64_t bytes, std::uint64_t blocks,
          Category category = Category::Unknown) {
  Site s;
  s.site = where;
  s.file = where.substr(0, where.rfind(':'));
  s.line = std::stoll(where.substr(where.rfind(':') + 1));
  s.function = function;
  s.bytes = bytes;
  s.blocks = blocks;
  s.category = category;
  return s;
}

TEST(Diff, SitesMatchByFileLineAndFunctionNeverAddress) {
  const std::vector<Site> before = {site("a.py:1", "f", 100, 1), site("a.py:2", "g", 500, 5), site("a.py:3", "h", 300, 3),
                                    site("a.py:4", "k", 50, 1)};
  const std::vector<Site> after = {site("a.py:1", "f", 400, 4), site("a.py:2", "g", 200, 2), site("a.py:3", "h", 300, 3),
                                   site("a.py:4", "other", 70, 1), site("b.py:9", "n", 1000, 2)};
  const auto d = diff_sites(before, after);
  ASSERT_EQ(d.size(), 6u);
  EXPECT_EQ(d[0].site, "b.py:9");
  EXPECT_EQ(d[0].status, DiffStatus::New);
  EXPECT_EQ(d[1].site, "a.py:1");
  EXPECT_EQ(d[1].status, DiffStatus::Grown);
  EXPECT_EQ(d[1].delta_bytes, 300);
  EXPECT_EQ(d[1].delta_blocks, 3);
  // Same file:line, another function: a different site.
  EXPECT_EQ(d[2].site, "a.py:4");
  EXPECT_EQ(d[2].function, "other");
  EXPECT_EQ(d[2].status, DiffStatus::New);
  EXPECT_EQ(d[3].status, DiffStatus::Same);
  EXPECT_EQ(d[4].function, "k");
  EXPECT_EQ(d[4].status, DiffStatus::Removed);
  EXPECT_EQ(d[5].site, "a.py:2");
  EXPECT_EQ(d[5].status, DiffStatus::Shrunk);
  EXPECT_EQ(d[5].delta_bytes, -300);
}

TEST(Diff, CliJsonHasTheContractsDiffSection) {
  const auto expect = group_truth()["expect"];
  const auto dir = fixture("diff_growing_container");
  const test::CliRun r = test::run_memsnap((dir / "early.pickle").string() + " --diff " + (dir / "late.pickle").string() + " --format json");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["schema"], "memsnap.report/1");
  EXPECT_EQ(j["input"]["path"], (dir / "late.pickle").string()) << "top-level sections describe LATER";
  const auto& diff = j["diff"];
  for (const char* key : {"reserved", "allocated", "pending_free", "inactive", "requested", "segments", "blocks",
                          "largest_inactive_block", "peak_allocated", "peak_reserved"}) {
    EXPECT_TRUE(diff["totals_delta"].contains(key)) << key;
  }
  ASSERT_FALSE(diff["sites"].empty());
  const auto& top = diff["sites"][0];
  for (const char* key : {"site", "bytes_before", "bytes_after", "delta_bytes", "blocks_before", "blocks_after", "delta_blocks", "status"}) {
    EXPECT_TRUE(top.contains(key)) << key;
  }
  EXPECT_EQ(top["site"], expect["leaking_site"]);
  EXPECT_EQ(top["delta_blocks"], expect["delta_blocks"]);
  EXPECT_EQ(top["delta_bytes"], expect["delta_bytes"]);
  EXPECT_EQ(top["verdict"], "leaking");
  EXPECT_EQ(diff["steps_between"], 10);
  EXPECT_EQ(diff["totals_delta"]["allocated"], expect["delta_bytes"]);
  std::int64_t last = INT64_MAX;
  for (const auto& s : diff["sites"]) {
    EXPECT_LE(s["delta_bytes"].get<std::int64_t>(), last);
    last = s["delta_bytes"].get<std::int64_t>();
  }
  EXPECT_EQ(j["headline"], diff["headline"]);
  EXPECT_EQ(j["patterns"][0]["id"], "growing_container");
}

TEST(Diff, CliTextAndErrors) {
  const auto dir = fixture("diff_growing_container");
  const test::CliRun text = test::run_memsnap((dir / "early.pickle").string() + " --diff " + (dir / "late.pickle").string());
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("Diff against the earlier snapshot"), std::string::npos);
  EXPECT_NE(text.out.find("leaking: growing_container"), std::string::npos);
  const test::CliRun missing = test::run_memsnap((dir / "early.pickle").string() + " --diff " + (dir / "nope.pickle").string());
  EXPECT_EQ(missing.status, 1);
  EXPECT_NE(missing.err.find("memsnap: error: " + (dir / "nope.pickle").string() + ":"), std::string::npos) << missing.err;
  const test::CliRun directory = test::run_memsnap(fixture("ddp_ranks").string() + " --diff " + (dir / "late.pickle").string());
  EXPECT_EQ(directory.status, 2) << directory.err;
}

}  // namespace diff_tests
}  // namespace memsnap
