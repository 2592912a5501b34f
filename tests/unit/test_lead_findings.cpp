// The lead's issue-12 pieces: two runs compared step against step, saved activations of an
// earlier forward allocated before the window, attention scores told from queries and keys by
// size, and a capacity OOM on the heaviest of unbalanced devices, against the generator's
// scenarios_lead.py with exact bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "analysis/analyze.h"
#include "analysis/diff.h"
#include "analysis/frame_filter.h"
#include "analysis/site_what.h"
#include "base/format_bytes.h"
#include "base/units.h"
#include "model/load.h"
#include "test_support.h"

namespace memsnap {
namespace lead_findings_tests {

namespace fs = std::filesystem;

using test::fixture_path;
using test::pattern;

DeviceSteps steps(std::vector<std::int64_t> live, std::vector<std::int64_t> peaks) {
  DeviceSteps d;
  d.boundaries = live.size();
  d.live = std::move(live);
  d.step_peak = std::move(peaks);
  return d;
}

TEST(StepAligned, ComparesStepIAgainstStepI) {
  const auto d = step_aligned({steps({10, 12, 14, 16}, {50, 52, 54})}, 0, {steps({20, 20, 20}, {80, 90})}, 0);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->steps, 2u);  // the fewer of the two
  EXPECT_EQ(d->peak_before, (std::vector<std::int64_t>{50, 52}));
  EXPECT_EQ(d->peak_after, (std::vector<std::int64_t>{80, 90}));
  EXPECT_EQ(d->median_delta, 38);  // deltas 30 and 38: the upper median
  EXPECT_EQ(d->growth_before, 6);
  EXPECT_EQ(d->growth_after, 0);
  // A side without steps on its peak device: no comparison.
  EXPECT_FALSE(step_aligned({steps({10, 12, 14}, {50, 52})}, 1, {steps({20, 20, 20}, {80, 90})}, 0).has_value());
}

TEST(StepAligned, TwoConfigurationsOfOneScript) {
  const auto before = load_snapshot(fixture_path("diff_two_configs/batch64.pickle").string());
  const auto after = load_snapshot(fixture_path("diff_two_configs/batch256.pickle").string());
  const Analysis ba = analyze(before), aa = analyze(after);
  const DiffReport d = diff_snapshots(before, ba, after, aa);
  EXPECT_EQ(d.relation, DiffRelation::TwoRuns);  // the allocator settings differ
  ASSERT_TRUE(d.steps.has_value());
  EXPECT_GE(d.steps->steps, 3u);
  for (std::size_t i = 0; i < d.steps->steps; ++i) EXPECT_GT(d.steps->peak_after[i], d.steps->peak_before[i]) << i;
  EXPECT_GT(d.steps->median_delta, 0);
  // The highest step peak is the run's peak when the peak falls inside a step.
  EXPECT_EQ(*std::max_element(d.steps->peak_before.begin(), d.steps->peak_before.end()), *ba.timelines.front().peak_allocated);
  EXPECT_EQ(*std::max_element(d.steps->peak_after.begin(), d.steps->peak_after.end()), *aa.timelines.front().peak_allocated);
}

TEST(ActivationsWithoutBackward, CountsAnEarlierForwardAllocatedBeforeTheWindow) {
  const std::string name = "forward_kept_from_before_the_window";
  const Analysis a = analyze(load_snapshot(fixture_path(name + ".pickle").string()));
  const auto expect = test::fixture_expect(name);
  const Pattern* p = pattern(a, PatternId::ActivationsWithoutBackward);
  ASSERT_NE(p, nullptr);
  const auto before = expect.at("saved_before_window_bytes").get<std::uint64_t>();
  const auto during = expect.at("saved_in_window_bytes").get<std::uint64_t>();
  EXPECT_LT(during, 256u << 20);  // the recorded pass alone is below the finding's threshold
  ASSERT_TRUE(p->saving_bytes.has_value());
  EXPECT_EQ(*p->saving_bytes, before + during);
  // AdamW state from the training step before: a backward may follow, so the finding is hedged.
  EXPECT_EQ(p->confidence, Confidence::Low);
  const bool hedged = std::any_of(p->evidence.begin(), p->evidence.end(),
                                  [](const Sentence& s) { return s.text().find("trained before the recording") != std::string::npos; });
  EXPECT_TRUE(hedged);
  // At 36% of the peak the finding leads the headline, hedged as the finding is.
  EXPECT_EQ(a.headline.rfind(p->summary.text() + "; if a backward does follow after the dump (the run trained before the recording), "
                                                  "it needs these activations. At the peak ",
                             0),
            0u)
      << a.headline;
  const bool earlier = std::any_of(p->evidence.begin(), p->evidence.end(), [](const Sentence& s) {
    return s.text().find("allocated before the recording began, by the same forward code") != std::string::npos;
  });
  EXPECT_TRUE(earlier);
}

TEST(AttentionScores, CountsTheScoreSizedBlocksOnly) {
  const std::string name = "attention_scores_materialized";
  const Analysis a = analyze(load_snapshot(fixture_path(name + ".pickle").string()));
  const Pattern* p = pattern(a, PatternId::AttentionScores);
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(p->saving_bytes.has_value());
  EXPECT_EQ(*p->saving_bytes, test::fixture_expect(name).at("score_bytes").get<std::uint64_t>());
  EXPECT_EQ(p->fix.front().id, FixId::FusedAttention);
}

// The peak in a hand-written attention's backward: the gradients of the scores that its
// DivBackward0 and BmmBackward0 allocate count with the scores, by their exact size; a score-sized
// GeluBackward0 temporary, a q-sized DivBackward0 one and the loss's log_softmax do not.
TEST(AttentionScores, CountsTheScoresGradientsInBackward) {
  const std::string name = "attention_backward_peak";
  const Analysis a = analyze(load_snapshot(fixture_path(name + ".pickle").string()));
  const Pattern* p = pattern(a, PatternId::AttentionScores);
  ASSERT_NE(p, nullptr);
  const auto& expect = test::fixture_expect(name);
  const std::uint64_t scores = expect.at("score_bytes").get<std::uint64_t>();
  const std::uint64_t gradients = expect.at("score_gradient_bytes").get<std::uint64_t>();
  ASSERT_TRUE(p->saving_bytes.has_value());
  EXPECT_EQ(*p->saving_bytes, scores + gradients);
  EXPECT_EQ(p->summary.text(), fmt::format("Attention scores dominate the peak: {} (73% of the 2.06 GiB peak) is B*H*T^2 score matrices: "
                                           "{} allocated in attention / softmax code and {} of their gradients in the backward pass",
                                           format_bytes(scores + gradients), format_bytes(scores), format_bytes(gradients)));
  const bool nodes = std::any_of(p->evidence.begin(), p->evidence.end(), [](const Sentence& s) {
    return s.text().find("4 blocks of exactly those sizes (1.00 GiB: 4 x 256.00 MiB) allocated by the backward of attention's "
                         "operations: DivBackward0 (768.00 MiB), BmmBackward0 (256.00 MiB).") != std::string::npos;
  });
  EXPECT_TRUE(nodes) << testing::PrintToString(p->evidence.size());
  // A third of the peak or more: the finding leads the headline, before the budget's kinds.
  EXPECT_EQ(a.headline.rfind(p->summary.text() + "; torch.nn.functional.scaled_dot_product_attention would not materialize them. At the peak", 0), 0u)
      << a.headline;
}

// Activations dominate the peak and most of what checkpointing would save is attention's scores:
// fused attention, which costs no recompute, comes first in the headline and the next steps,
// though checkpointing saves more bytes.
TEST(AttentionScores, ComesBeforeCheckpointingWhenTheScoresAreMostOfTheActivations) {
  const Analysis a = analyze(load_snapshot(fixture_path("attention_under_activation_pressure.pickle").string()));
  const Pattern* scores = pattern(a, PatternId::AttentionScores);
  const Pattern* pressure = pattern(a, PatternId::ActivationPressure);
  ASSERT_NE(scores, nullptr);
  ASSERT_NE(pressure, nullptr);
  EXPECT_EQ(scores->saving_bytes, std::optional<std::uint64_t>(5 * 64 * kMiB));  // at the peak: 4 score blocks and one gradient
  ASSERT_TRUE(pressure->saving_bytes.has_value());
  EXPECT_GT(*pressure->saving_bytes, *scores->saving_bytes);
  EXPECT_EQ(a.headline.rfind("Forward activations dominate the peak: ", 0), 0u) << a.headline;
  EXPECT_NE(a.headline.find(". Try torch.nn.functional.scaled_dot_product_attention first: it removes 320.00 MiB of attention's "
                            "score-sized tensors (scores, softmax outputs, their gradients) without recompute."),
            std::string::npos)
      << a.headline;
  ASSERT_GE(a.next_steps.size(), 2u);
  EXPECT_EQ(a.next_steps[0].pattern, PatternId::AttentionScores);
  EXPECT_EQ(a.next_steps[1].pattern, PatternId::ActivationPressure);
}

// The scores come from scaled_dot_product_attention's math path: the fix is to make a fused
// backend take the inputs, not to call the function already called.
TEST(AttentionScores, FromSdpasMathPathAskForAFusedBackend) {
  const std::string name = "attention_sdpa_math_path";
  const Analysis a = analyze(load_snapshot(fixture_path(name + ".pickle").string()));
  const Pattern* p = pattern(a, PatternId::AttentionScores);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->saving_bytes, std::optional<std::uint64_t>(test::fixture_expect(name).at("score_bytes").get<std::uint64_t>() +
                                                          test::fixture_expect(name).at("score_gradient_bytes").get<std::uint64_t>()));
  ASSERT_FALSE(p->fix.empty());
  EXPECT_EQ(p->fix.front().id, FixId::FusedSdpaBackend);
  const bool said = std::any_of(p->evidence.begin(), p->evidence.end(), [](const Sentence& s) {
    return s.text().find("allocated in at::native::_scaled_dot_product_attention_math: scaled_dot_product_attention is called, but "
                         "none of its fused backends took these inputs") != std::string::npos;
  });
  EXPECT_TRUE(said);
  // The scores are most of the activations that lead the headline: it says to try the backend, not the call, first.
  EXPECT_NE(a.headline.find(". Try a fused scaled_dot_product_attention backend (its math path runs now) first: it removes 2.25 GiB "),
            std::string::npos)
      << a.headline;
}

TEST(AttentionScores, ALossLogSoftmaxIsNoAttention) {
  // healthy_training computes cross_entropy (log_softmax over the logits): no attention finding.
  const Analysis a = analyze(load_snapshot(fixture_path("healthy_training.pickle").string()));
  EXPECT_EQ(pattern(a, PatternId::AttentionScores), nullptr);
}

// A device the process never used (no segments, only the dump's 'snapshot' entry in its trace)
// is not a light device to move work to.
TEST(DeviceImbalance, NotWithADeviceTheProcessNeverUsed) {
  const Analysis a = analyze(load_snapshot(fixture_path("one_device_of_two.pickle").string()));
  EXPECT_EQ(pattern(a, PatternId::DeviceImbalance), nullptr) << a.headline;
  EXPECT_EQ(a.headline.rfind("At the peak 8.00 GiB is live on device 1", 0), 0u) << a.headline;
}

// Muduard's LCM diffusion step runs on device 1; device 0 shows only the dump's 'snapshot' entry.
TEST(DeviceImbalance, RealDiffusionStepOnOneOfTwoDevicesIsNone) {
  const auto file = fs::path(test::corpus_dir()) / "Muduard_LayoutEditing_dump_snapshot_7bced59.pickle";
  if (!fs::exists(file)) GTEST_SKIP() << "real corpus not found: " << file;
  const Analysis a = analyze(load_snapshot(file.string()));
  EXPECT_EQ(pattern(a, PatternId::DeviceImbalance), nullptr);
  ASSERT_FALSE(a.next_steps.empty());
  EXPECT_EQ(a.next_steps.front().kind, NextStepKind::LookAtSite) << a.next_steps.front().text();
}

TEST(DeviceImbalance, LeadsACapacityOomOnTheHeaviestDevice) {
  const Analysis a = analyze(load_snapshot(fixture_path("data_parallel_oom.pickle").string()));
  ASSERT_NE(pattern(a, PatternId::Capacity), nullptr);
  const Pattern* p = pattern(a, PatternId::DeviceImbalance);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->fix.front().id, FixId::UseDdpNotDataParallel);
  EXPECT_EQ(a.peak_device, 1);
  EXPECT_EQ(a.headline.rfind("Out of memory at capacity on the heaviest device: ", 0), 0u) << a.headline;
  EXPECT_NE(a.headline.find("device 1 peak"), std::string::npos) << a.headline;
  // Balancing the devices comes before a smaller batch.
  ASSERT_FALSE(a.next_steps.empty());
  EXPECT_EQ(a.next_steps.front().pattern, PatternId::DeviceImbalance) << a.next_steps.front().text();
}

}  // namespace lead_findings_tests
}  // namespace memsnap

namespace memsnap {
namespace lead_findings_tests {

TEST(SiteWhat, InductorOutputCodeIsSaidToBeTorchCompiles) {
  const Snapshot s = test::one_stack({{"/tmp/torchinductor_me/p6/cp6jhjzn335lo2yptjts5dpdcdk4hshtke2lv7btq23fgwnwn4mq.py", "call", 3063},
                                      {"/home/me/transformer.py", "forward", 22}});
  const SiteChoice choice = choose_site(s, 1);
  ASSERT_TRUE(choice.found);
  const Site site = describe_site(s, 1, choice);
  EXPECT_EQ(site.site, "/home/me/transformer.py:22");
  EXPECT_EQ(site.what, "torch.compile (Inductor) output code cp6jhjzn...:call");
}

}  // namespace lead_findings_tests
}  // namespace memsnap
