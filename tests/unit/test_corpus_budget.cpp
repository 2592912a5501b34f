// The memory budget's invariant on every real snapshot in ../shared/corpus/real: at the end, at
// the peak and before each OOM its rows add up exactly to the live bytes, which at the end are the
// device's allocated bytes. Skipped when the corpus is not there, as in a user's clone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "analysis/analyze.h"
#include "analysis/memory_budget.h"
#include "model/load.h"

namespace memsnap {
namespace {

std::filesystem::path corpus_dir() {
  if (const char* env = std::getenv("MEMSNAP_CORPUS")) return env;
  return MEMSNAP_DEFAULT_CORPUS;
}

TEST(CorpusBudget, EveryRealSnapshotsBudgetAddsUpToLiveMemory) {
  const auto facts_path = corpus_dir() / "facts.json";
  if (!std::filesystem::exists(facts_path)) GTEST_SKIP() << "real corpus not found at " << corpus_dir() << "; set MEMSNAP_CORPUS to run";
  std::ifstream in(facts_path);
  const auto facts = nlohmann::json::parse(in);
  int checked = 0;
  for (const auto& f : facts) {
    const std::string name = f.at("file");
    SCOPED_TRACE(name);
    const Analysis a = analyze(load_snapshot((corpus_dir() / name).string()));
    EXPECT_TRUE(budget_violations(a.budgets).empty()) << testing::PrintToString(budget_violations(a.budgets));
    std::uint64_t end_bytes = 0;
    for (const MemoryBudget& b : a.budgets) {
      std::uint64_t sum = 0;
      for (const BudgetRow& row : b.rows) sum += row.bytes;
      EXPECT_EQ(sum, b.live_bytes) << "device " << b.device << " " << moment_text(b);
      if (b.moment == BudgetMoment::End) end_bytes += b.live_bytes;
    }
    EXPECT_EQ(end_bytes, f.at("total_allocated_bytes").get<std::uint64_t>());
    ++checked;
  }
  EXPECT_EQ(checked, 54);
}

}  // namespace
}  // namespace memsnap
