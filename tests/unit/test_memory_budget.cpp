// The memory budget (analysis/memory_budget.h) on the generator's budget scenarios: every
// inference rule with exact bytes, its negatives, and provenance instead of free stacks.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "analysis/analyze.h"
#include "analysis/memory_budget.h"
#include "test_support.h"

namespace memsnap {
namespace memory_budget_tests {

constexpr std::uint64_t MiB = 1024 * 1024;

Analysis analyze_fixture(const std::string& name) {
  const auto loaded = load_snapshot(std::string(MEMSNAP_FIXTURE_DIR) + "/" + name + ".pickle");
  return analyze(loaded);
}

const MemoryBudget& budget_at(const Analysis& a, BudgetMoment moment) {
  const auto it = std::find_if(a.budgets.begin(), a.budgets.end(), [&](const MemoryBudget& b) { return b.moment == moment; });
  if (it == a.budgets.end()) throw std::runtime_error("no budget at " + std::string(name_of(moment)));
  return *it;
}

// The row of (kind, provenance, source), or a zero row.
BudgetRow row_of(const MemoryBudget& b, Category kind, Provenance provenance, KindSource source) {
  for (const BudgetRow& row : b.rows) {
    if (row.kind == kind && row.provenance == provenance && row.source == source) return row;
  }
  return {};
}

std::uint64_t rows_sum(const MemoryBudget& b) {
  return std::accumulate(b.rows.begin(), b.rows.end(), std::uint64_t{0}, [](std::uint64_t s, const BudgetRow& r) { return s + r.bytes; });
}

bool has_evidence(const MemoryBudget& b, const std::string& text) {
  return std::any_of(b.evidence.begin(), b.evidence.end(), [&](const std::string& e) { return e.find(text) != std::string::npos; });
}

// The Trainer's 2-block MLP (d 512, hidden 2048, 100 classes): 16 fp32 parameters, block bytes
// rounded up to 512.
std::uint64_t mlp_parameter_bytes() {
  const std::uint64_t d = 512, hidden = 2048, classes = 100;
  std::vector<std::uint64_t> numels = {d * d, d};
  for (int i = 0; i < 2; ++i) numels.insert(numels.end(), {d, d, hidden * d, hidden, d * hidden, d});
  numels.insert(numels.end(), {classes * d, classes});
  std::uint64_t total = 0;
  for (std::uint64_t n : numels) total += (n * 4 + 511) / 512 * 512;
  return total;
}

TEST(MemoryBudget, ParametersAllocatedBeforeRecordingMatchTheGradientsOneToOne) {
  const Analysis a = analyze_fixture("budget_params_before_recording");
  const MemoryBudget& end = budget_at(a, BudgetMoment::End);
  const std::uint64_t params = mlp_parameter_bytes();
  EXPECT_EQ(params, 18061824u);
  const BudgetRow p = row_of(end, Category::Parameter, Provenance::BeforeWindow, KindSource::SizeMatch);
  EXPECT_EQ(p.bytes, params);
  EXPECT_EQ(p.blocks, 16u);
  EXPECT_EQ(row_of(end, Category::Gradient, Provenance::InWindow, KindSource::StackRule).bytes, params);
  EXPECT_EQ(row_of(end, Category::OptimizerState, Provenance::InWindow, KindSource::StackRule).bytes, 2 * params);
  EXPECT_EQ(rows_sum(end), end.live_bytes);
  EXPECT_EQ(end.live_bytes, a.totals.overall.allocated);
  EXPECT_TRUE(has_evidence(end, "16 stack-less blocks (17.22 MiB) match the gradients' sizes one to one: the parameters"))
      << testing::PrintToString(end.evidence);
  EXPECT_TRUE(has_evidence(end, "allocated before the recording began"));
  // The site table says where the stack-less bytes came from.
  const auto no_stack = std::find_if(a.sites.begin(), a.sites.end(), [](const Site& s) { return s.no_stack; });
  ASSERT_NE(no_stack, a.sites.end());
  EXPECT_EQ(no_stack->bytes_by_provenance[static_cast<std::size_t>(Provenance::BeforeWindow)], params);
  EXPECT_TRUE(a.invariant_violations.empty()) << testing::PrintToString(a.invariant_violations);
}

TEST(MemoryBudget, FourCopiesOfOneSetWithoutATraceAreWeightsGradientsAndTwoMoments) {
  const Analysis a = analyze_fixture("budget_no_trace_adamw");
  ASSERT_EQ(a.budgets.size(), 1u);  // no trace: the end only
  const MemoryBudget& end = a.budgets[0];
  // The allocator rounds one of the 7 MiB requests up to the whole 8 MiB left of its segment, so
  // 277 MiB requested are 278 MiB of blocks.
  EXPECT_EQ(end.live_bytes, a.totals.overall.allocated);
  EXPECT_EQ(end.live_bytes, 278 * MiB);
  EXPECT_EQ(row_of(end, Category::Parameter, Provenance::NoTrace, KindSource::SizeMatch).bytes, 64 * MiB);
  EXPECT_EQ(row_of(end, Category::Parameter, Provenance::NoTrace, KindSource::SizeMatch).blocks, 28u);
  EXPECT_EQ(row_of(end, Category::Gradient, Provenance::NoTrace, KindSource::SizeMatch).bytes, 64 * MiB);
  EXPECT_EQ(row_of(end, Category::OptimizerState, Provenance::NoTrace, KindSource::SizeMatch).bytes, 128 * MiB);
  EXPECT_EQ(row_of(end, Category::OptimizerState, Provenance::NoTrace, KindSource::SizeMatch).blocks, 56u);
  const BudgetRow rest = row_of(end, Category::Unknown, Provenance::NoTrace, KindSource::NoEvidence);
  EXPECT_EQ(rest.bytes, 22 * MiB);
  EXPECT_EQ(rest.blocks, 3u);
  EXPECT_TRUE(has_evidence(end, "115 stack-less blocks: 48 x 4.00 MiB, 64 x 1.00 MiB, 3 x 7.00 MiB"))
      << testing::PrintToString(end.evidence);
  EXPECT_TRUE(has_evidence(end, "256.00 MiB of the stack-less memory is 4 copies of one set of 28 blocks (64.00 MiB each)"));
  EXPECT_EQ(a.headline,
            "At the end 278.00 MiB is live on device 0: optimizer state 128.00 MiB, parameters 64.00 MiB, gradients 64.00 MiB, "
            "unknown kind 22.00 MiB (16 bytes a parameter: fp32 weights, gradients and two AdamW moments).");
}

TEST(MemoryBudget, StacklessSizesThatMatchNothingAreUnknownAndSaidSo) {
  const Analysis a = analyze_fixture("budget_unknown_stackless");
  ASSERT_EQ(a.budgets.size(), 1u);
  const MemoryBudget& end = a.budgets[0];
  ASSERT_EQ(end.rows.size(), 1u);
  EXPECT_EQ(end.rows[0].kind, Category::Unknown);
  EXPECT_EQ(end.rows[0].source, KindSource::NoEvidence);
  EXPECT_EQ(end.rows[0].bytes, 30 * MiB);
  EXPECT_EQ(end.rows[0].blocks, 6u);
  EXPECT_TRUE(has_evidence(end, "the stack-less sizes match no gradient set and no multiple of one set: their kind is unknown"));
  EXPECT_EQ(a.headline, "At the end 30.00 MiB is live on device 0, all of unknown kind; all of it has no stack and matches no known set "
                        "(3 x 5.00 MiB, 1 x 9.00 MiB, 2 x 3.00 MiB).");
}

TEST(MemoryBudget, WeightsBeforeRecordingWithNoGradientsAreOfUnknownKind) {
  const Analysis a = analyze_fixture("budget_inference_before_recording");
  const MemoryBudget& end = budget_at(a, BudgetMoment::End);
  const BudgetRow before = row_of(end, Category::Unknown, Provenance::BeforeWindow, KindSource::NoEvidence);
  EXPECT_EQ(before.bytes, mlp_parameter_bytes());
  EXPECT_EQ(before.blocks, 16u);
  EXPECT_EQ(row_of(end, Category::Parameter, Provenance::BeforeWindow, KindSource::SizeMatch).bytes, 0u);
  EXPECT_TRUE(has_evidence(end, "their kind is unknown"));
  EXPECT_EQ(rows_sum(budget_at(a, BudgetMoment::Peak)), budget_at(a, BudgetMoment::Peak).live_bytes);
}

// A block allocated before the window and freed in it is never attributed by its free stack
// (zero_grad's line read as optimizer state): it has no stack and says it came from before.
TEST(MemoryBudget, BlocksFreedInTheWindowKeepNoFreeStack) {
  const auto loaded = load_snapshot(std::string(MEMSNAP_FIXTURE_DIR) + "/truncated_trace.pickle");
  const Analysis a = analyze(loaded);
  std::size_t freed_before = 0;
  for (const DeviceTimeline& t : a.timelines) {
    std::vector<std::size_t> all(t.lifetimes.size());
    std::iota(all.begin(), all.end(), std::size_t{0});
    const std::vector<LiveItem> items = live_items(t, all);
    for (std::size_t k = 0; k < items.size(); ++k) {
      const Lifetime& l = t.lifetimes[k];
      if (l.alloc != kBeforeWindow || l.free == kStillLive) continue;
      ++freed_before;
      EXPECT_EQ(items[k].stack, kNoStack);
      EXPECT_EQ(items[k].provenance, Provenance::BeforeWindow);
    }
  }
  EXPECT_GT(freed_before, 0u);
  for (const MemoryBudget& b : a.budgets) EXPECT_EQ(rows_sum(b), b.live_bytes) << name_of(b.moment);
}


// A hand-written optimizer (no torch.optim frame) keeps two moments, one tensor per parameter
// each, on two lines of user code: their kind stays unknown, but the budget marks both sites as
// parameter-shaped, the headline says the unknown kind is mostly those two lines, and their
// look-at steps say one tensor per parameter.
TEST(MemoryBudget, UnknownKindLedByParameterShapedSitesIsNamedInTheHeadline) {
  const Analysis a = analyze_fixture("budget_handwritten_optimizer_state");
  const std::uint64_t params = 18061712;  // the 16 parameters' requested bytes (the truth file's moment_bytes)
  const MemoryBudget& peak = budget_at(a, BudgetMoment::Peak);
  EXPECT_EQ(row_of(peak, Category::Unknown, Provenance::InWindow, KindSource::StackRule).bytes, 2 * params);
  EXPECT_EQ(row_of(peak, Category::Unknown, Provenance::InWindow, KindSource::StackRule).blocks, 32u);
  EXPECT_EQ(peak.parameter_shaped_sites,
            (std::vector<std::string>{"/home/user/project/zo_adam.py:31", "/home/user/project/zo_adam.py:32"}));
  EXPECT_NE(a.headline.find(" Most of the unknown kind comes from two lines: 17.22 MiB live at /home/user/project/zo_adam.py:31 "
                            "(<listcomp>), one tensor per parameter, and 17.22 MiB live at /home/user/project/zo_adam.py:32 "
                            "(<listcomp>), one tensor per parameter."),
            std::string::npos)
      << a.headline;
  int per_parameter = 0;
  for (const NextStep& step : a.next_steps) per_parameter += step.text().find("(unknown; one tensor per parameter)") != std::string::npos;
  EXPECT_EQ(per_parameter, 2);
}

// Activations lead that peak (64.02 of 167.50 MiB) and one line holds nearly all of them: the
// headline names it, with what lives there.
TEST(MemoryBudget, LeadingActivationsAreNamedByTheirLine) {
  const Analysis a = analyze_fixture("one_off_allocations");
  EXPECT_NE(a.headline.find(" Most of the activations come from one line: 64.00 MiB live at /home/user/project/model.py:40 (workspace)."),
            std::string::npos)
      << a.headline;
}

// An EMA copy of the weights is parameter-shaped too, but at a tenth of the peak the unknown kind
// does not lead: the headline names no site for it; its look-at step still says what it is.
TEST(MemoryBudget, ParameterShapedSiteBehindOtherKindsIsOnlyInItsStep) {
  const Analysis a = analyze_fixture("one_off_allocations");
  EXPECT_EQ(a.headline.find("Most of the unknown kind"), std::string::npos) << a.headline;
  const auto ema = std::find_if(a.next_steps.begin(), a.next_steps.end(),
                                [](const NextStep& s) { return s.text().find("/home/user/project/ema.py:14") != std::string::npos; });
  ASSERT_NE(ema, a.next_steps.end());
  EXPECT_NE(ema->text().find("in 16 blocks (unknown; one tensor per parameter)"), std::string::npos) << ema->text();
}


// A backward that allocates a 512 MiB gradient of the softmax scores and frees it again on the
// autograd engine's thread: at the peak that block is a temporary of the backward pass, and only
// the parameters' gradients, which outlive the backward, count as gradients.
TEST(MemoryBudget, BlocksAllocatedAndFreedInBackwardAreTemporariesNotGradients) {
  const Analysis a = analyze_fixture("budget_backward_temporaries");
  const MemoryBudget& peak = budget_at(a, BudgetMoment::Peak);
  const BudgetRow temporary = row_of(peak, Category::Temporary, Provenance::InWindow, KindSource::StackRule);
  EXPECT_EQ(temporary.bytes, 512 * MiB);
  EXPECT_EQ(temporary.blocks, 1u);
  const BudgetRow gradient = row_of(peak, Category::Gradient, Provenance::InWindow, KindSource::StackRule);
  EXPECT_EQ(gradient.bytes, 18061712u);  // the 16 parameters' gradients (the truth file's gradient_bytes)
  EXPECT_EQ(gradient.blocks, 16u);
  EXPECT_EQ(rows_sum(peak), peak.live_bytes);
  EXPECT_TRUE(has_evidence(peak, "512.00 MiB in 1 block allocated in backward is freed in backward too"))
      << testing::PrintToString(peak.evidence);
  EXPECT_EQ(a.headline.rfind("At the peak 802.45 MiB is live on device 0: temporaries 512.00 MiB, activations 256.00 MiB, parameters", 0),
            0u)
      << a.headline;
  // At the end the gradients are all that backward left: no temporary.
  const MemoryBudget& end = budget_at(a, BudgetMoment::End);
  EXPECT_EQ(row_of(end, Category::Temporary, Provenance::InWindow, KindSource::StackRule).bytes, 0u);
  EXPECT_EQ(row_of(end, Category::Gradient, Provenance::InWindow, KindSource::StackRule).blocks, 16u);
}

// With stacks="python" no frame names cuBLAS's workspace: a block of its default size (8,519,680
// bytes) is that workspace, in the budget and as a site with the entry's note, and so is a
// stack-less one; one byte more, or that size with C++ frames that name a linear kernel, stays an
// activation.
TEST(MemoryBudget, CublasWorkspaceOfDefaultSizeIsToldWithoutItsFrame) {
  const Analysis a = analyze_fixture("budget_cublas_workspace_by_size");
  const MemoryBudget& peak = budget_at(a, BudgetMoment::Peak);
  const BudgetRow workspace = row_of(peak, Category::Workspace, Provenance::InWindow, KindSource::StackRule);
  EXPECT_EQ(workspace.bytes, 8519680u);  // the truth file's workspace_bytes
  EXPECT_EQ(workspace.blocks, 1u);
  EXPECT_EQ(row_of(peak, Category::Activation, Provenance::InWindow, KindSource::StackRule).bytes, 2 * 8519680u + 1);
  // The one allocated before the recording has no stack at all: its size alone says it.
  const BudgetRow stackless = row_of(peak, Category::Workspace, Provenance::BeforeWindow, KindSource::SizeMatch);
  EXPECT_EQ(stackless.bytes, 8519680u);  // the truth file's stackless_workspace_bytes
  EXPECT_EQ(stackless.blocks, 1u);
  EXPECT_NE(std::find(peak.evidence.begin(), peak.evidence.end(),
                      "1 stack-less block of 8,519,680 bytes: cuBLAS's default workspace before Hopper (CUBLAS_WORKSPACE_CONFIG "
                      ":4096:2:16:8), allocated by the first GEMM and kept"),
            peak.evidence.end());
  const auto site = [&](std::string_view where) -> const Site& {
    const auto it = std::find_if(a.sites.begin(), a.sites.end(), [&](const Site& s) { return s.site == where; });
    EXPECT_NE(it, a.sites.end()) << where;
    return *it;
  };
  const Site& told = site("/home/user/project/model.py:30");
  EXPECT_EQ(told.category, Category::Workspace);
  ASSERT_NE(told.known, nullptr);
  EXPECT_EQ(told.known->id, "cublas_workspace");
  EXPECT_EQ(told.what, "8,519,680 bytes, its default size before Hopper, at torch/nn/modules/linear.py:forward");
  EXPECT_EQ(site("/home/user/project/model.py:31").category, Category::Activation);  // C++ frames, none of them the workspace's
  EXPECT_EQ(site("/home/user/project/model.py:32").category, Category::Activation);  // one byte more
}

}  // namespace memory_budget_tests
}  // namespace memsnap
