// The memory budget's invariant on every real snapshot in ../shared/corpus/real: at the end, at
// the peak and before each OOM its rows add up exactly to the live bytes, which at the end are the
// device's allocated bytes; and what the budget and the findings at the peak say of given real
// files. Skipped when the corpus is not there, as in a user's clone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "analysis/analyze.h"
#include "analysis/memory_budget.h"
#include "base/units.h"
#include "model/load.h"
#include "test_support.h"

namespace memsnap {
namespace corpus_budget_tests {

using test::corpus_dir;

TEST(CorpusBudget, EveryRealSnapshotsBudgetAddsUpToLiveMemory) {
  if (!std::filesystem::exists(corpus_dir())) GTEST_SKIP() << "real corpus not found at " << corpus_dir() << "; set MEMSNAP_CORPUS to run";
  int checked = 0, parameter_shaped = 0;
  for (const auto& entry : std::filesystem::directory_iterator(corpus_dir())) {
    const std::string name = entry.path().filename().string();
    if (name == "facts.json" || name.ends_with(".md")) continue;
    SCOPED_TRACE(name);
    const Analysis a = analyze(load_snapshot(entry.path().string()));
    EXPECT_TRUE(budget_violations(a.budgets).empty()) << testing::PrintToString(budget_violations(a.budgets));
    std::uint64_t end_bytes = 0;
    for (const MemoryBudget& b : a.budgets) {
      std::uint64_t sum = 0;
      for (const BudgetRow& row : b.rows) sum += row.bytes;
      EXPECT_EQ(sum, b.live_bytes) << "device " << b.device << " " << moment_text(b);
      if (b.moment == BudgetMoment::End) end_bytes += b.live_bytes;
      for (const std::string& e : b.evidence) parameter_shaped += e.find("match the parameters' one to one") != std::string::npos;
    }
    EXPECT_EQ(end_bytes, a.totals.overall.allocated);  // facts.json's total_allocated_bytes (test_corpus.cpp)
    ++checked;
  }
  EXPECT_EQ(checked, 54);
  EXPECT_EQ(parameter_shaped, 2);  // DeComFL's hand-written Adam state at its end and its peak (below), and nothing else
}

// A hand-written Adam (DeComFL's zeroth-order estimator) keeps one tensor per parameter in user
// code with no torch.optim frame: its kind stays unknown, but the budget says the site's blocks
// match the parameters one to one. No other real file has such a site.
TEST(CorpusBudget, ParameterShapedStateInUserCodeIsSaid) {
  const auto file = std::filesystem::path(corpus_dir()) / "ZidongLiu_DeComFL_memory.pickle";
  if (!std::filesystem::exists(file)) GTEST_SKIP() << "real corpus not found at " << corpus_dir();
  const Analysis a = analyze(load_snapshot(file.string()));
  const MemoryBudget* peak = main_budget(a.budgets);
  ASSERT_NE(peak, nullptr);
  ASSERT_EQ(peak->moment, BudgetMoment::Peak);
  const std::string want = "adam_forward.py:168 holds 196 blocks (477.75 MiB) whose sizes match the parameters' one to one";
  EXPECT_TRUE(std::any_of(peak->evidence.begin(), peak->evidence.end(), [&](const std::string& e) { return e.find(want) != std::string::npos; }))
      << testing::PrintToString(peak->evidence);
  // The unknown kind leads the peak (1.19 of 1.66 GiB): the headline names the two lines holding most of it.
  EXPECT_NE(a.headline.find("Most of the unknown kind comes from two lines: 477.75 MiB live at "
                            "C:\\research\\DeComFL\\cezo_fl\\gradient_estimators\\adam_forward.py:168 (<listcomp>), one tensor per "
                            "parameter, and 294.56 MiB live at "),
            std::string::npos)
      << a.headline;
}


// The bytes of `kind` in a budget, every provenance and source together.
std::uint64_t kind_bytes(const MemoryBudget& b, Category kind) { return bytes_by_kind(b)[static_cast<std::size_t>(kind)]; }

// Blocks allocated in backward and freed in backward are temporaries of the backward pass; what is
// left as gradients then matches the model, where before the temporaries inflated it.
TEST(CorpusBudget, BackwardTemporariesAtThePeakAreNotGradients) {
  struct Case {
    const char* file;
    std::uint64_t temporary;
  };
  for (const Case& c : {Case{"silmont2000_assignment2-systems_mem_snapshot.pickle", 2684354560u},  // DivBackward0 and BmmBackward0 of a custom softmax
                        Case{"a0kuma_ckptTry_abc.pickle", 524288u}, Case{"JasperSolt_EoR_NN_snapshot.pickle", 23592964u}}) {
    const auto file = std::filesystem::path(corpus_dir()) / c.file;
    if (!std::filesystem::exists(file)) GTEST_SKIP() << "real corpus not found at " << corpus_dir();
    SCOPED_TRACE(c.file);
    const Analysis a = analyze(load_snapshot(file.string()));
    const MemoryBudget* peak = peak_budget(a.budgets, 0);
    ASSERT_NE(peak, nullptr);
    EXPECT_EQ(kind_bytes(*peak, Category::Temporary), c.temporary);
  }
  // What remains as gradients is one per parameter (and the 4-byte loss gradient): a0kuma's
  // parameters, and half of JasperSolt's Adam state.
  const Analysis a0 = analyze(load_snapshot((std::filesystem::path(corpus_dir()) / "a0kuma_ckptTry_abc.pickle").string()));
  const MemoryBudget& p0 = *peak_budget(a0.budgets, 0);
  EXPECT_EQ(kind_bytes(p0, Category::Gradient), kind_bytes(p0, Category::Parameter) + 4);
  const Analysis js = analyze(load_snapshot((std::filesystem::path(corpus_dir()) / "JasperSolt_EoR_NN_snapshot.pickle").string()));
  const MemoryBudget& pj = *peak_budget(js.budgets, 0);
  EXPECT_EQ(2 * (kind_bytes(pj, Category::Gradient) - 4), kind_bytes(pj, Category::OptimizerState));
}

// An inference of a 3-D cellular automaton (HugePandaCoder): 18.20 of its 18.22 GiB peak are
// activations, and two lines of its update() hold 14.56 GiB of them: the headline names both.
TEST(CorpusBudget, LeadingActivationsAreNamedByTheirLines) {
  const auto file = std::filesystem::path(corpus_dir()) / "HugePandaCoder_octree-nca-groupeq_my_snapshot.pickle";
  if (!std::filesystem::exists(file)) GTEST_SKIP() << "real corpus not found at " << corpus_dir();
  const Analysis a = analyze(load_snapshot(file.string()));
  EXPECT_NE(a.headline.find(" Most of the activations come from two lines: 9.70 GiB live at torch/nn/functional.py:batch_norm at "
                            "/gris/gris-f/homestud/nlemke/NCA/src/models/Model_BasicNCA3D.py:77 (update) and 4.86 GiB live at "
                            "torch/nn/modules/linear.py:forward at /gris/gris-f/homestud/nlemke/NCA/src/models/Model_BasicNCA3D.py:75 (update)."),
            std::string::npos)
      << a.headline;
}

// Eight real files recorded without C++ frames keep cuBLAS's 8,519,680-byte default workspace from
// their first linear layer (four of them here): a workspace, not an activation (jogregoire's 8.12 MiB is most of its
// end state, and its headline named it as activations before).
TEST(CorpusBudget, CublasWorkspaceWithoutItsFrameIsToldBySize) {
  for (const char* name : {"jogregoire_How-Diffusion-Models-Work_my_snapshot.pickle", "Yiyi-philosophy_LLM-inference_1.3b_snapshot.pickle",
                           "Yiyi-philosophy_LLM-inference_1.3b_snapshot_4bf3cd4.pickle", "LfieLike_SketchKV2_my_snapshot.pickle"}) {
    const auto file = std::filesystem::path(corpus_dir()) / name;
    if (!std::filesystem::exists(file)) GTEST_SKIP() << "real corpus not found at " << corpus_dir();
    SCOPED_TRACE(name);
    const Analysis a = analyze(load_snapshot(file.string()));
    const MemoryBudget* end = main_budget(a.budgets);
    ASSERT_NE(end, nullptr);
    EXPECT_EQ(kind_bytes(*end, Category::Workspace), 8519680u);
  }
  // Without any stack (allocated before the recording, or never recorded): by size alone.
  for (const auto& [name, blocks] : {std::pair{"MercuryB1_SQAttn_cuda_memory_snapshot.pickle", 1u},
                                     std::pair{"Muduard_LayoutEditing_dump_snapshot.pickle", 2u}}) {
    SCOPED_TRACE(name);
    const Analysis a = analyze(load_snapshot((std::filesystem::path(corpus_dir()) / name).string()));
    const MemoryBudget* main = main_budget(a.budgets);
    ASSERT_NE(main, nullptr);
    EXPECT_EQ(kind_bytes(*main, Category::Workspace), blocks * 8519680u);
  }
  const Analysis j = analyze(load_snapshot((std::filesystem::path(corpus_dir()) / "jogregoire_How-Diffusion-Models-Work_my_snapshot.pickle").string()));
  EXPECT_EQ(j.headline.rfind("At the end 13.83 MiB is live on device 0: workspaces 8.12 MiB, parameters 5.69 MiB", 0), 0u) << j.headline;
}

// verl's worker holds two copies of the policy's weights: Megatron's actor (Module._apply, and the
// tied embedding Megatron moves to the GPU itself: 130 MiB) and vLLM's rollout engine, whose layers
// create theirs in create_weights while the model is built (475 MiB). All are parameters; only the
// 303.51 MiB without a stack stays unknown.
TEST(CorpusBudget, BothCopiesOfAnRlWorkersWeightsAreParameters) {
  const auto file = std::filesystem::path(corpus_dir()) / "volcengine_verl_mem.pickle";
  if (!std::filesystem::exists(file)) GTEST_SKIP() << "real corpus not found at " << corpus_dir();
  const Analysis a = analyze(load_snapshot(file.string()));
  const MemoryBudget* end = main_budget(a.budgets);
  ASSERT_NE(end, nullptr);
  EXPECT_EQ(kind_bytes(*end, Category::Parameter), 814860288u);  // 777.11 MiB in 401 blocks
  EXPECT_EQ(kind_bytes(*end, Category::KvCache), 21793603584u);
  EXPECT_EQ(kind_bytes(*end, Category::Unknown), 318254592u + 1024u);  // the stack-less 303.51 MiB, and 1 KiB
  EXPECT_EQ(a.headline.rfind("At the end 23.20 GiB is live on device 0: KV cache 20.30 GiB, gradients 1.38 GiB, parameters 777.11 MiB, ", 0), 0u)
      << a.headline;
}

// MAGMA27 computes its loss at the script's top level with a hand-written cross_entropy: the
// log-softmax of the logits (625 MiB) and the loss's other tensors are the forward computation's
// end, saved for backward like a module's activations, where they were an unknown kind (937.66 MiB).
TEST(CorpusBudget, TheLossIsPartOfTheForwardsActivations) {
  const auto file = std::filesystem::path(corpus_dir()) / "MAGMA27_assignment2-systems_memory_snapshot.pickle";
  if (!std::filesystem::exists(file)) GTEST_SKIP() << "real corpus not found at " << corpus_dir();
  const Analysis a = analyze(load_snapshot(file.string()));
  const MemoryBudget* peak = main_budget(a.budgets);
  ASSERT_NE(peak, nullptr);
  ASSERT_EQ(peak->moment, BudgetMoment::Peak);
  EXPECT_EQ(kind_bytes(*peak, Category::Unknown), 350212u);  // 342.00 KiB in 54 stack-less blocks from before the recording
  EXPECT_EQ(a.headline.rfind("Forward activations dominate the peak: 11.08 GiB (85% of the 12.97 GiB peak) ", 0), 0u) << a.headline;
}

// kkaitlyn111's forward benchmark with autograd on: 13.85 GiB (37% of the peak) of activations kept
// for a backward the trace never runs leads the headline, hedged: the run trained before. The
// 10.51 GiB of autocast's weight copies beside them are not counted: inference_mode would not free
// them (the autocast_weight_copies finding says what would).
TEST(CorpusBudget, ActivationsWithoutBackwardLeadTheHeadline) {
  const auto file = std::filesystem::path(corpus_dir()) / "kkaitlyn111_cs336-a2-systems_memory_files_memory_ctx512_forward_mixed.pickle";
  if (!std::filesystem::exists(file)) GTEST_SKIP() << "real corpus not found at " << corpus_dir();
  const Analysis a = analyze(load_snapshot(file.string()));
  EXPECT_EQ(a.headline.rfind("Activations are kept for a backward pass that never runs: 13.85 GiB (37% of the 37.12 GiB peak) ", 0), 0u)
      << a.headline;
  EXPECT_NE(a.headline.find("; if a backward does follow after the dump (the run trained before the recording), it needs these activations. "
                            "At the peak 37.12 GiB is live on device 0: "),
            std::string::npos)
      << a.headline;
  // notHanmin's forward benchmark under autocast: 5.90 GiB of activations (14% of the 40.75 GiB peak)
  // beside 5.01 GiB of weight copies; the finding counts the activations alone and, under a third
  // of the peak, leaves the headline to the training state (22.33 GiB) it shares the peak with.
  const auto forward = std::filesystem::path(corpus_dir()) / "notHanmin_assignment2-systems_memory_snapshot_forward.pickle";
  const Analysis n = analyze(load_snapshot(forward.string()));
  const auto p = std::find_if(n.patterns.begin(), n.patterns.end(), [](const Pattern& x) { return x.id == PatternId::ActivationsWithoutBackward; });
  ASSERT_NE(p, n.patterns.end());
  EXPECT_EQ(p->saving_bytes, std::optional<std::uint64_t>(6335434752u));
  EXPECT_EQ(p->confidence, Confidence::Low);
  EXPECT_EQ(n.headline.find("Activations are kept"), std::string::npos) << n.headline;
}

// silmont2000's hand-written attention peaks in its backward: the exp output it saved (512 MiB) and
// five gradients of that size from DivBackward0 and BmmBackward0 are 3 GiB of the 3.03 GiB peak,
// which F.scaled_dot_product_attention would not materialize; the headline says so first. A loss's
// hand-written log_softmax is no attention: MAGMA27's nn_utils.py:13 (logits-sized) is not a score.
// Scores from SDPA's math path ask for a fused backend (Nesta-gitU).
TEST(CorpusBudget, AttentionScoresCountTheirGradientsInBackward) {
  const auto dir = std::filesystem::path(corpus_dir());
  if (!std::filesystem::exists(dir / "silmont2000_assignment2-systems_mem_snapshot.pickle")) GTEST_SKIP() << "real corpus not found at " << corpus_dir();
  const Analysis s = analyze(load_snapshot((dir / "silmont2000_assignment2-systems_mem_snapshot.pickle").string()));
  const auto scores = std::find_if(s.patterns.begin(), s.patterns.end(), [](const Pattern& p) { return p.id == PatternId::AttentionScores; });
  ASSERT_NE(scores, s.patterns.end());
  EXPECT_EQ(scores->saving_bytes, std::optional<std::uint64_t>(6 * 512 * kMiB));
  EXPECT_EQ(s.headline.rfind("Attention scores dominate the peak: 3.00 GiB (99% of the 3.03 GiB peak) is B*H*T^2 score matrices: 512.00 MiB "
                             "allocated in attention / softmax code and 2.50 GiB of their gradients in the backward pass; ",
                             0),
            0u)
      << s.headline;
  const Analysis m = analyze(load_snapshot((dir / "MAGMA27_assignment2-systems_memory_snapshot.pickle").string()));
  const auto magma = std::find_if(m.patterns.begin(), m.patterns.end(), [](const Pattern& p) { return p.id == PatternId::AttentionScores; });
  ASSERT_NE(magma, m.patterns.end());
  for (const std::string& site : magma->sites) EXPECT_EQ(site.find("nn_utils.py:13"), std::string::npos) << site;
  // Wedsonlin's 1024-token training step: 9.88 of its 11.46 GiB of peak activations are score-sized, so
  // fused attention is said before checkpointing, in the headline and the steps.
  const Analysis w = analyze(load_snapshot((dir / "Wedsonlin_assignment2-systems_results_medium_1024_training_memory_snapshot.pickle").string()));
  EXPECT_NE(w.headline.find("Try torch.nn.functional.scaled_dot_product_attention first: it removes 9.88 GiB"), std::string::npos) << w.headline;
  ASSERT_FALSE(w.next_steps.empty());
  EXPECT_EQ(w.next_steps.front().pattern, PatternId::AttentionScores);
  // Nesta-gitU's DiT calls scaled_dot_product_attention (timm), whose math path makes its 6.66 GiB of
  // scores: the fix asks for a fused backend, not for the call.
  const Analysis n = analyze(load_snapshot((dir / "Nesta-gitU_discrete_diffusion_memory_snapshot.json").string()));
  const auto nesta = std::find_if(n.patterns.begin(), n.patterns.end(), [](const Pattern& p) { return p.id == PatternId::AttentionScores; });
  ASSERT_NE(nesta, n.patterns.end());
  ASSERT_FALSE(nesta->fix.empty());
  EXPECT_EQ(nesta->fix.front().id, FixId::FusedSdpaBackend);
  // Its OOM at capacity leads the diagnosis, but its generic fixes come after the ones that name
  // what to shrink: checkpoint the modules at dit.py:249 (21.63 GiB), then the fused backend, then a
  // smaller batch and lower precision; capacity's own "use activation checkpointing" is not repeated.
  std::vector<std::pair<PatternId, FixId>> fixes;
  for (const NextStep& step : n.next_steps) {
    if (step.pattern && step.fix) fixes.emplace_back(*step.pattern, step.fix->id);
  }
  const std::vector<std::pair<PatternId, FixId>> want = {
      {PatternId::ActivationPressure, FixId::CheckpointModules}, {PatternId::ActivationPressure, FixId::RecomputeCostMs},
      {PatternId::ActivationPressure, FixId::SmallerMicroBatch}, {PatternId::AttentionScores, FixId::FusedSdpaBackend},
      {PatternId::Capacity, FixId::SmallerBatch},                {PatternId::Capacity, FixId::LowerPrecision}};
  EXPECT_EQ(fixes, want);
  EXPECT_EQ(n.patterns.front().id, PatternId::Capacity);
  // 24 score-sized blocks, and 12 of a quarter of that size at model.py:434 (one byte an element: a mask's)
  EXPECT_EQ(magma->saving_bytes, std::optional<std::uint64_t>(24 * 96 * kMiB + 12 * 24 * kMiB));
}

}  // namespace corpus_budget_tests
}  // namespace memsnap
