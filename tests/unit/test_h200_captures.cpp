// What memsnap reads in the real snapshots captured on an H200 (tests/data/h200, README there):
// exact totals, the pattern each situation was built to show, the OOM verdicts under
// set_per_process_memory_fraction, and the kinds of the stack-less parameters and gradients.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "analysis/analyze.h"
#include "analysis/memory_budget.h"
#include "model/load.h"
#include "test_support.h"

namespace memsnap {
namespace h200_tests {

constexpr std::uint64_t MiB = 1ull << 20;

std::string capture(const std::string& name) { return std::string(MEMSNAP_DATA_DIR) + "/h200/" + name; }

struct Read {
  LoadedSnapshot loaded;
  Analysis analysis;
};

Read read(const std::string& name) {
  Read r{load_snapshot(capture(name)), {}};
  r.analysis = analyze(r.loaded);
  return r;
}

using test::pattern;

std::vector<PatternId> ids(const Analysis& a) {
  std::vector<PatternId> out;
  for (const Pattern& p : a.patterns) out.push_back(p.id);
  return out;
}

// Bytes of `kind` decided by `source` in the budget at the end of device 0.
std::uint64_t at_end(const Analysis& a, Category kind, KindSource source) {
  std::uint64_t bytes = 0;
  for (const MemoryBudget& b : a.budgets) {
    if (b.device != 0 || b.moment != BudgetMoment::End) continue;
    for (const BudgetRow& row : b.rows) bytes += row.kind == kind && row.source == source ? row.bytes : 0;
  }
  return bytes;
}

// Reserved and allocated bytes as Python sums them over the pickle's segments and blocks.
TEST(H200Captures, TotalsAreThoseOfTheSegments) {
  const struct {
    const char* file;
    std::uint64_t reserved, allocated;
  } cases[] = {{"healthy.pickle", 2011168768, 1142718464},           {"retained_graph.pickle", 4471128064, 4163051520},
               {"capacity_oom.pickle", 5607784448, 5572362240},      {"fragmentation_oom.pickle", 7618953216, 2270167040},
               {"optimizer_oom.pickle", 4534042624, 4498685952},     {"pending_frees.pickle", 908066816, 336592896},
               {"reference_cycles.pickle", 165675008, 131096576},    {"recipe_oom.pickle", 35651584, 33574912},
               {"fragmentation_oom_expandable.pickle", 7528775680, 0}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.file);
    const Read r = read(c.file);
    EXPECT_EQ(r.analysis.totals.overall.reserved, c.reserved);
    EXPECT_EQ(r.analysis.totals.overall.allocated, c.allocated);
    EXPECT_TRUE(r.analysis.invariant_violations.empty());
  }
}

TEST(H200Captures, EachSituationShowsItsPattern) {
  const struct {
    const char* file;
    PatternId expected;
  } cases[] = {{"healthy.pickle", PatternId::OptimizerStateSpike},     {"retained_graph.pickle", PatternId::RetainedAutogradGraph},
               {"container_step16.pickle", PatternId::GrowingContainer}, {"fragmentation_oom.pickle", PatternId::Fragmentation},
               {"capacity_oom.pickle", PatternId::Capacity},            {"optimizer_oom.pickle", PatternId::Capacity},
               {"optimizer_oom.pickle", PatternId::OptimizerStateSpike}, {"pending_frees.pickle", PatternId::PendingFrees},
               {"reference_cycles.pickle", PatternId::ReferenceCycles},  {"cpp_stacks.pickle", PatternId::OptimizerStateSpike},
               {"recipe_oom.pickle", PatternId::Capacity},              {"capacity_oom.pickle", PatternId::ActivationPressure}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.file);
    const Read r = read(c.file);
    EXPECT_NE(pattern(r.analysis, c.expected), nullptr) << "patterns found: " << ids(r.analysis).size();
  }
}

// Each OOM was raised under torch.cuda.set_per_process_memory_fraction with the device nearly
// empty: the limit the capture script set lies in the bounds memsnap gives.
TEST(H200Captures, OomsUnderAProcessLimitBracketTheLimit) {
  const struct {
    const char* file;
    OomVerdict verdict;
    std::uint64_t limit;  // what the capture set (MANIFEST.json)
  } cases[] = {{"capacity_oom.pickle", OomVerdict::Capacity, 6144 * MiB},
               {"fragmentation_oom.pickle", OomVerdict::Fragmentation, 7680 * MiB},
               {"optimizer_oom.pickle", OomVerdict::Capacity, static_cast<std::uint64_t>(3.4 * 1280 * MiB)},
               {"recipe_oom.pickle", OomVerdict::Capacity, 2048 * MiB}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.file);
    const Read r = read(c.file);
    ASSERT_EQ(r.analysis.ooms.size(), 1u);
    const OomAnalysis& o = r.analysis.ooms[0];
    EXPECT_EQ(o.verdict, c.verdict);
    ASSERT_TRUE(o.process_limit);
    EXPECT_LE(o.process_limit->at_least, c.limit);
    EXPECT_GT(o.process_limit->below, c.limit);
  }
  const Read r = read("capacity_oom.pickle");
  EXPECT_EQ(r.analysis.ooms[0].process_limit->at_least, 5607784448u);  // reserved at the OOM
  EXPECT_EQ(r.analysis.ooms[0].process_limit->below, 5607784448u + 1024 * MiB);
  EXPECT_NE(r.analysis.headline.find("torch.cuda.set_per_process_memory_fraction"), std::string::npos) << r.analysis.headline;
}

// The batch too large for the cap: the forward ran out of memory before any backward, holding
// the activations it keeps for backward; the phase stays a forward, not an evaluation. The bytes:
// the requested sizes of the 13 live blocks with a `forward` frame, summed in Python.
TEST(H200Captures, ForwardCutShortByTheOomHoldsItsActivations) {
  const Read r = read("capacity_oom.pickle");
  const Pattern* p = pattern(r.analysis, PatternId::ActivationPressure);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->summary.text().rfind("The forward pass ran out of memory holding 4.03 GiB of activations", 0), 0u) << p->summary;
  ASSERT_TRUE(p->saving_bytes);
  EXPECT_EQ(*p->saving_bytes, 4330094592u);
  ASSERT_EQ(r.analysis.phases.size(), 1u);
  ASSERT_TRUE(r.analysis.phases[0].peak);
  EXPECT_EQ(r.analysis.phases[0].peak->phase, Phase::Forward);
  // The headline says what filled the device before why the request failed.
  EXPECT_EQ(r.analysis.headline.rfind("Out of memory at capacity in the forward pass, whose peak held 4.03 GiB of activations for "
                                      "its backward (78% of the 5.19 GiB): Live allocations of 5.19 GiB at the OOM",
                                      0),
            0u)
      << r.analysis.headline;
}

// With stacks="python", parameters allocated before the recording and gradients allocated by
// autograd's thread carry no stack: the optimizer's two moments per parameter give their sizes.
TEST(H200Captures, StacklessParametersAndGradientsFromTheOptimizerState) {
  const Read healthy = read("healthy.pickle");
  EXPECT_EQ(at_end(healthy.analysis, Category::OptimizerState, KindSource::StackRule), 537280512u);  // 512.39 MiB, 78 blocks
  EXPECT_EQ(at_end(healthy.analysis, Category::Parameter, KindSource::SizeMatch), 268640256u);       // half of it
  EXPECT_EQ(at_end(healthy.analysis, Category::Gradient, KindSource::SizeMatch), 268640256u);
  // C++ stacks record the gradients: only the parameters come from sizes, and no gradient more.
  const Read cpp = read("cpp_stacks.pickle");
  EXPECT_EQ(at_end(cpp.analysis, Category::Parameter, KindSource::SizeMatch),
            at_end(cpp.analysis, Category::OptimizerState, KindSource::StackRule) / 2);
  EXPECT_EQ(at_end(cpp.analysis, Category::Gradient, KindSource::SizeMatch), 0u);
}

// gc.collect() every 8 iterations: no optimizer, no annotations, frees only in bursts; the steps
// come from the allocation period, and the saving is what the cycles held at the peak beyond
// the current iteration (7 iterations of 8 MiB + 2 MiB 4 KiB).
TEST(H200Captures, ReferenceCyclesFreedInBurstsByTheCollector) {
  const Read r = read("reference_cycles.pickle");
  const Pattern* p = pattern(r.analysis, PatternId::ReferenceCycles);
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(p->saving_bytes);
  EXPECT_EQ(*p->saving_bytes, 7 * (8 * MiB + 2 * MiB + 4096));
  ASSERT_FALSE(p->sites.empty());
  EXPECT_NE(p->sites.front().find("capture_snapshots.py:236"), std::string::npos) << p->sites.front();
}

// The headline paragraph of a text report, its wrapped lines joined.
std::string headline_of(const std::string& out) {
  std::string h = out.substr(0, out.find("\n\n"));
  std::replace(h.begin(), h.end(), '\n', ' ');
  return h;
}

TEST(H200Captures, GrowingContainerPairAndRecipes) {
  const auto diff = test::run_memsnap(capture("container_step5.pickle") + " --diff " + capture("container_step16.pickle"));
  EXPECT_EQ(diff.status, 0) << diff.err;
  EXPECT_NE(headline_of(diff.out).find("capture_snapshots.py:98 (forward): +704.00 MiB in +11 blocks: leaking (growing_container)"),
            std::string::npos)
      << diff.out;
  const auto steady = test::run_memsnap(capture("recipe_diff_step1.pickle") + " --diff " + capture("recipe_diff_step101.pickle"));
  EXPECT_NE(headline_of(steady.out).find("no allocation site grew, so nothing leaks between them"), std::string::npos) << steady.out;
  const auto ranks = test::run_memsnap(capture("recipe_ranks"));
  EXPECT_EQ(ranks.status, 0) << ranks.err;
  EXPECT_EQ(headline_of(ranks.out).rfind("One rank only (rank 0), nothing to compare it with: ", 0), 0u) << ranks.out;
}

}  // namespace h200_tests
}  // namespace memsnap
