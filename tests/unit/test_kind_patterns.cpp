// Findings from what the memory is: a serving engine's pre-allocated KV cache (expected, with the
// gpu_memory_utilization knob), a generation KV cache, and autocast's weight-copy cache (a small
// one is no finding; the real ctx512 mixed-precision forward's is, skipped without the corpus).
#include <gtest/gtest.h>

#include <filesystem>

#include "analysis/analyze.h"
#include "model/load.h"
#include "test_support.h"

namespace memsnap {
namespace kind_patterns_tests {

namespace fs = std::filesystem;

Analysis analysis_of(const fs::path& path) { return analyze(load_snapshot(path.string())); }
fs::path fixture(const std::string& name) { return fs::path(MEMSNAP_FIXTURE_DIR) / (name + ".pickle"); }

const Pattern* find(const Analysis& a, PatternId id) {
  for (const Pattern& p : a.patterns) {
    if (p.id == id) return &p;
  }
  return nullptr;
}

TEST(KindPatterns, VllmKvCacheIsExpectedAndNamesTheKnob) {
  const Analysis a = analysis_of(fixture("known_vllm_kv_cache"));
  const Pattern* p = find(a, PatternId::KvCache);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->verdict, Verdict::Expected);
  EXPECT_EQ(p->evidence.front().text(), "3.38 GiB of kv_cache memory at the peak on device 0");
  EXPECT_EQ(p->summary.text().rfind("the vLLM KV cache holds 3.38 GiB (", 0), 0u) << p->summary.text();
  ASSERT_EQ(p->fix.size(), 1u);
  EXPECT_NE(p->fix.front().text().find("gpu_memory_utilization"), std::string::npos);
  EXPECT_FALSE(p->saving_bytes.has_value());
}

TEST(KindPatterns, SmallAutocastCacheIsNoFinding) {
  // 4 x 32 MiB of copies: below the 256 MiB floor.
  const Analysis a = analysis_of(fixture("known_autocast_cast_cache"));
  EXPECT_EQ(find(a, PatternId::AutocastWeightCopies), nullptr);
  EXPECT_EQ(find(a, PatternId::KvCache), nullptr);
}

TEST(KindPatterns, HealthyTrainingHasNeither) {
  const Analysis a = analysis_of(fixture("healthy_training"));
  EXPECT_EQ(find(a, PatternId::AutocastWeightCopies), nullptr);
  EXPECT_EQ(find(a, PatternId::KvCache), nullptr);
}

TEST(KindPatterns, RealMixedPrecisionForwardNamesTheAutocastCache) {
  const fs::path dir = test::corpus_dir();
  const fs::path file = dir / "kkaitlyn111_cs336-a2-systems_memory_files_memory_ctx512_forward_mixed.pickle";
  if (!fs::exists(file)) GTEST_SKIP() << "real corpus not found at " << dir;
  const Analysis a = analysis_of(file);
  const Pattern* p = find(a, PatternId::AutocastWeightCopies);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->summary.text().rfind("autocast's cast cache holds 10.51 GiB (", 0), 0u) << p->summary.text();
  ASSERT_EQ(p->fix.size(), 2u);
  EXPECT_NE(p->fix[1].text().find("cache_enabled=False"), std::string::npos);
}

}  // namespace kind_patterns_tests
}  // namespace memsnap
