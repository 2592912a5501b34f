// The named leak and retention patterns against the generator's truth: one fixture per pattern
// with known sites and numbers, and negatives (healthy runs, one-off allocations, evaluation
// done right) where no leak pattern may fire.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "analysis/analyze.h"
#include "analysis/patterns.h"
#include "analysis/steps.h"
#include "model/load.h"
#include "test_support.h"

namespace memsnap {
namespace patterns_tests {

constexpr std::uint64_t MiB = 1ull << 20;

std::filesystem::path fixture(const std::string& name) { return std::filesystem::path(MEMSNAP_FIXTURE_DIR) / name; }

struct Analyzed {
  LoadedSnapshot loaded;
  Analysis analysis;
};

Analyzed analyzed(const std::string& name) {
  Analyzed a{load_snapshot(fixture(name + ".pickle").string()), {}};
  a.analysis = analyze(a.loaded);
  return a;
}

const Pattern* find(const Analysis& a, const std::string& id) {
  for (const auto& p : a.patterns) {
    if (name_of(p.id) == id) return &p;
  }
  return nullptr;
}

bool any_contains(const std::vector<std::string>& lines, const std::string& part) {
  return std::any_of(lines.begin(), lines.end(), [&](const std::string& l) { return l.find(part) != std::string::npos; });
}
template <class T>
bool any_contains(const std::vector<T>& items, const std::string& part) {
  return any_contains(test::texts(items), part);
}

TEST(Patterns, EveryFixtureShowsExactlyItsExpectedPatterns) {
  int checked = 0;
  for (const std::string& name : test::fixture_names()) {
    SCOPED_TRACE(name);
    const auto truth = test::fixture_truth(name);
    const auto a = analyzed(name);
    const auto expect = truth.value("expect", nlohmann::json::object());
    for (const auto& id : expect.value("patterns", std::vector<std::string>{})) EXPECT_NE(find(a.analysis, id), nullptr) << id;
    for (const auto& id : expect.value("patterns_absent", std::vector<std::string>{})) EXPECT_EQ(find(a.analysis, id), nullptr) << id;
    const auto verdicts = expect.value("verdicts", nlohmann::json::object());
    for (const auto& [id, verdict] : verdicts.items()) {
      const Pattern* p = find(a.analysis, id);
      ASSERT_NE(p, nullptr) << id;
      EXPECT_EQ(name_of(p->verdict), verdict.get<std::string>()) << id;
    }
    for (const auto& p : a.analysis.patterns) {
      EXPECT_FALSE(p.summary.text().empty()) << name_of(p.id);
      EXPECT_FALSE(p.evidence.empty()) << name_of(p.id);
      EXPECT_FALSE(p.fix.empty() && p.id != PatternId::CachedMemory) << name_of(p.id);
    }
    ++checked;
  }
  EXPECT_GE(checked, 20);
}

// The negatives: healthy training, one-off allocations, evaluation done right, other scenarios
// whose memory is steady. No leak pattern and no reference cycles may fire.
TEST(Patterns, NoLeakPatternOnHealthyRuns) {
  for (const char* name : {"example", "healthy_training", "one_off_allocations", "healthy_eval", "deep_forward", "activation_pressure",
                           "optimizer_state_spike", "multi_device", "pending_frees", "truncated_trace", "cpp_frames",
                           "expandable_segments", "torch_2_0", "no_history", "legacy_history", "oom_capacity",
                           "oom_fragmentation"}) {
    SCOPED_TRACE(name);
    const auto a = analyzed(name);
    for (const auto& p : a.analysis.patterns) {
      EXPECT_FALSE(is_leak_pattern(p.id)) << p.id << ": " << p.summary;
      EXPECT_NE(p.id, PatternId::ReferenceCycles) << p.summary;
    }
    EXPECT_EQ(a.analysis.headline.rfind("Leak:", 0), std::string::npos) << a.analysis.headline;
    const Diagnosis d = diagnose(a.loaded.snapshot, a.analysis);
    EXPECT_TRUE(d.growing.empty()) << d.growing.front().site;
  }
}

TEST(Patterns, StepsFromAnnotationsPeriodAndOptimizerRuns) {
  {
    const auto a = analyzed("healthy_training");
    const Diagnosis d = diagnose(a.loaded.snapshot, a.analysis);
    ASSERT_EQ(d.steps.size(), 1u);
    EXPECT_EQ(d.steps[0].source, StepSource::ProfilerStep);
    EXPECT_EQ(d.steps[0].boundaries, 4u);
  }
  {
    const auto a = analyzed("healthy_eval");
    const Diagnosis d = diagnose(a.loaded.snapshot, a.analysis);
    EXPECT_EQ(d.steps[0].source, StepSource::Period);
    EXPECT_EQ(d.steps[0].boundaries, test::fixture_truth("healthy_eval")["expect"]["steps"].get<std::size_t>());
  }
  {
    // Without annotations, the recurring torch/optim allocations (AdamW's foreach temporaries) mark the steps.
    auto a = analyzed("healthy_training");
    a.loaded.snapshot.annotations.clear();
    a.analysis = analyze(a.loaded);
    const Diagnosis d = diagnose(a.loaded.snapshot, a.analysis);
    EXPECT_EQ(d.steps[0].source, StepSource::OptimizerTrace);
    EXPECT_EQ(d.steps[0].boundaries, 4u);
  }
  {
    const auto a = analyzed("no_history");
    const Diagnosis d = diagnose(a.loaded.snapshot, a.analysis);
    EXPECT_TRUE(d.steps.empty());
    EXPECT_TRUE(a.analysis.patterns.empty());
  }
}

// measure() finds the steps beside the phases; the diagnosis reads them from there.
TEST(Patterns, MeasureFindsEachTimelinesSteps) {
  for (const char* name : {"healthy_training", "healthy_eval", "no_history"}) {
    const auto a = analyzed(name);
    ASSERT_EQ(a.analysis.steps.size(), a.analysis.timelines.size()) << name;
    for (std::size_t i = 0; i < a.analysis.timelines.size(); ++i) {
      const Steps expected = find_steps(a.loaded.snapshot, a.analysis.timelines[i]);
      EXPECT_EQ(a.analysis.steps[i].source, expected.source) << name;
      EXPECT_EQ(a.analysis.steps[i].boundaries, expected.boundaries) << name;
      EXPECT_EQ(a.analysis.steps[i].device, a.analysis.timelines[i].device) << name;
    }
  }
  const auto eval = analyzed("healthy_eval");
  ASSERT_EQ(eval.analysis.steps.size(), 1u);
  EXPECT_EQ(eval.analysis.steps[0].source, StepSource::Period);
  EXPECT_EQ(eval.analysis.steps[0].boundaries.size(), test::fixture_truth("healthy_eval")["expect"]["steps"].get<std::size_t>());
}

TEST(Patterns, LayersOfOneForwardAreNotSteps) {
  // 24 blocks repeat the same stacks inside Net.forward: a regular period, but inside one module call.
  const auto a = analyzed("deep_forward");
  const Diagnosis d = diagnose(a.loaded.snapshot, a.analysis);
  ASSERT_EQ(d.steps.size(), 1u);
  EXPECT_EQ(d.steps[0].source, StepSource::None);
  EXPECT_TRUE(a.analysis.patterns.empty());
}

// The real corpus (when present): memsnap must not call any of these runs leaking. Each file was
// reviewed: forward-only profiles, training steps and notebooks, none with evidence of a leak.
TEST(Patterns, RealCorpusHasNoLeakWithoutEvidence) {
  const std::filesystem::path dir = test::corpus_dir();
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "no real corpus at " << dir << " (set MEMSNAP_CORPUS)";
  int checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const auto name = entry.path().filename().string();
    if (name == "facts.json" || entry.path().extension() == ".md") continue;
    SCOPED_TRACE(name);
    const auto loaded = load_snapshot(entry.path().string());
    const Analysis a = analyze(loaded);
    for (const auto& p : a.patterns) {
      EXPECT_FALSE(is_leak_pattern(p.id)) << p.summary;
      EXPECT_NE(p.id, PatternId::ReferenceCycles) << p.summary;
    }
    ++checked;
  }
  EXPECT_GE(checked, 50);
}

TEST(Patterns, GrowingContainerNamesTheSiteAndItsRate) {
  const auto truth = test::fixture_truth("growing_container");
  const auto& expect = truth["expect"];
  const auto a = analyzed("growing_container");
  const Diagnosis d = diagnose(a.loaded.snapshot, a.analysis);
  ASSERT_EQ(d.containers.size(), 1u);
  EXPECT_FALSE(d.retained_graph);
  const SiteGrowth& g = d.containers.front();
  EXPECT_EQ(g.site, expect["growing_site"].get<std::string>());
  EXPECT_EQ(g.function, "update");
  // Boundaries are ProfilerStep#N START: the site holds N blocks at step N's start.
  EXPECT_EQ(g.blocks_first, 0);
  EXPECT_EQ(g.blocks_last, expect["growing_blocks"].get<std::int64_t>() - 1);
  EXPECT_EQ(g.rises, g.intervals);
  EXPECT_DOUBLE_EQ(g.blocks_per_step(), 1.0);
  EXPECT_EQ(g.bytes_per_step(), expect["growing_bytes_per_step"].get<std::int64_t>());
  const Pattern* p = find(a.analysis, "growing_container");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->verdict, Verdict::Leak);
  EXPECT_EQ(p->confidence, Confidence::High);
  ASSERT_FALSE(p->sites.empty());
  EXPECT_EQ(p->sites.front(), expect["growing_site"].get<std::string>());
  EXPECT_TRUE(any_contains(p->evidence, "holds 24 blocks")) << p->evidence.back().text();
  EXPECT_TRUE(any_contains(p->fix, "detach().cpu()"));
  EXPECT_EQ(a.analysis.headline.rfind("Leak: " + expect["growing_site"].get<std::string>(), 0), 0u) << a.analysis.headline;
  EXPECT_TRUE(any_contains(a.analysis.next_steps, "--diff"));
}

TEST(Patterns, RetainedGraphNamesTheAccumulatorAndLoss) {
  const auto truth = test::fixture_truth("retained_graph");
  const std::size_t steps = truth["expect"]["steps"].get<std::size_t>();
  const auto a = analyzed("retained_graph");
  const Diagnosis d = diagnose(a.loaded.snapshot, a.analysis);
  ASSERT_TRUE(d.retained_graph);
  EXPECT_TRUE(d.containers.empty());
  const RetainedGraph& r = *d.retained_graph;
  EXPECT_EQ(d.steps[0].source, StepSource::Period);
  EXPECT_EQ(r.intervals, steps - 1);
  EXPECT_EQ(r.accumulator_site, "/home/user/project/train.py:82");
  EXPECT_EQ(r.loss_site, "/home/user/project/train.py:81");
  EXPECT_FALSE(r.backward_in_window);
  std::vector<std::string> sites;
  for (const auto& g : r.sites) sites.push_back(g.site);
  for (const char* s : {"/home/user/project/model.py:16", "/home/user/project/model.py:17", "/home/user/project/model.py:18",
                        "/home/user/project/model.py:20", "/home/user/project/train.py:79", "/home/user/project/train.py:81"}) {
    EXPECT_NE(std::find(sites.begin(), sites.end(), s), sites.end()) << s;
  }
  for (const auto& g : r.sites) EXPECT_EQ(g.rises, g.intervals) << g.site;
  const Pattern* p = find(a.analysis, "retained_autograd_graph");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->verdict, Verdict::Leak);
  EXPECT_EQ(p->sites.front(), "/home/user/project/train.py:82");
  EXPECT_TRUE(any_contains(p->fix, "loss.item()"));
  EXPECT_TRUE(any_contains(p->fix, "retain_graph=True"));
  EXPECT_TRUE(any_contains(p->fix, "torch.no_grad()"));
  EXPECT_EQ(a.analysis.headline.rfind("Leak: The autograd graph", 0), 0u) << a.analysis.headline;
}

TEST(Patterns, OptimizerStateSpikeIsExpectedRetention) {
  const auto truth1 = test::fixture_truth("optimizer_state_spike");
  const auto& expect = truth1["expect"];
  const auto a = analyzed("optimizer_state_spike");
  const Diagnosis d = diagnose(a.loaded.snapshot, a.analysis);
  ASSERT_TRUE(d.optimizer_spike);
  const OptimizerSpike& o = *d.optimizer_spike;
  EXPECT_EQ(o.site, expect["optimizer_state_site"].get<std::string>());
  EXPECT_EQ(o.bytes, expect["optimizer_state_bytes"].get<std::uint64_t>());
  EXPECT_EQ(o.blocks, expect["optimizer_state_blocks"].get<std::uint64_t>());
  EXPECT_EQ(o.first_step_bytes, o.bytes);
  EXPECT_EQ(o.later_bytes, 0u);
  EXPECT_EQ(o.optimizer_steps, expect["optimizer_steps"].get<std::size_t>());
  EXPECT_TRUE(o.first_step_in_window);
  EXPECT_FALSE(o.oom);
  EXPECT_EQ(o.live_after - o.live_before, static_cast<std::int64_t>(o.bytes) + 0) << "only the state stays after the step";
  const Pattern* p = find(a.analysis, "optimizer_state_spike");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->verdict, Verdict::Expected);
  EXPECT_NE(p->summary.text().find("expected retention, not a leak"), std::string::npos);
  EXPECT_NE(a.analysis.headline.find("not a leak"), std::string::npos) << a.analysis.headline;
}

TEST(Patterns, OptimizerStateOomIsNotALeakHunt) {
  const auto truth2 = test::fixture_truth("optimizer_state_oom");
  const auto& expect = truth2["expect"];
  const auto a = analyzed("optimizer_state_oom");
  const Diagnosis d = diagnose(a.loaded.snapshot, a.analysis);
  ASSERT_TRUE(d.optimizer_spike);
  EXPECT_TRUE(d.optimizer_spike->oom);
  EXPECT_TRUE(d.optimizer_spike->first_step_in_window);
  EXPECT_EQ(d.optimizer_spike->site, expect["optimizer_state_site"].get<std::string>());
  const Pattern* p = find(a.analysis, "optimizer_state_spike");
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(any_contains(p->fix, "not a leak to hunt"));
  EXPECT_TRUE(any_contains(p->fix, "shard the optimizer state"));
  EXPECT_NE(a.analysis.headline.find("inside optimizer.step()"), std::string::npos) << a.analysis.headline;
}

TEST(Patterns, ActivationPressureQuantifiesFreeableBytesAndRecompute) {
  const auto truth3 = test::fixture_truth("activation_pressure");
  const auto& expect = truth3["expect"];
  const auto a = analyzed("activation_pressure");
  const Diagnosis d = diagnose(a.loaded.snapshot, a.analysis);
  ASSERT_TRUE(d.activation);
  const ActivationPressure& x = *d.activation;
  EXPECT_EQ(x.freeable, expect["activation_freeable_bytes"].get<std::uint64_t>());
  EXPECT_EQ(x.tensors, expect["activation_tensors"].get<std::size_t>());
  EXPECT_GE(x.freeable * 2, static_cast<std::uint64_t>(x.peak));
  ASSERT_FALSE(x.modules.empty());
  EXPECT_EQ(x.modules.front().first.rfind(expect["activation_module"].get<std::string>() + " ", 0), 0u) << x.modules.front().first;
  EXPECT_GT(x.forward_us, 0);
  EXPECT_GT(x.step_us, x.forward_us);
  EXPECT_EQ(x.steps, 2u);
  const Pattern* p = find(a.analysis, "activation_pressure");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->sites.front(), expect["activation_module"].get<std::string>());
  EXPECT_TRUE(any_contains(p->fix, "torch.utils.checkpoint.checkpoint"));
  EXPECT_TRUE(any_contains(p->fix, "recompute cost"));
}

TEST(Patterns, ReferenceCyclesCountsTheBursts) {
  const auto truth4 = test::fixture_truth("reference_cycles");
  const auto& expect = truth4["expect"];
  const auto a = analyzed("reference_cycles");
  const Diagnosis d = diagnose(a.loaded.snapshot, a.analysis);
  ASSERT_TRUE(d.cycles);
  EXPECT_EQ(d.cycles->bursts, expect["cycle_bursts"].get<std::size_t>());
  EXPECT_EQ(d.cycles->blocks, expect["cycle_blocks"].get<std::uint64_t>());
  EXPECT_EQ(d.cycles->max_steps_spanned, expect["cycle_steps_per_burst"].get<std::size_t>());
  std::vector<std::string> sites;
  for (const auto& [site, bytes] : d.cycles->sites) sites.push_back(site);
  EXPECT_EQ(sites, expect["cycle_sites"].get<std::vector<std::string>>());
  EXPECT_TRUE(d.growing.empty());
  const Pattern* p = find(a.analysis, "reference_cycles");
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(any_contains(p->fix, "warn_tensor_cycles()"));
}

TEST(Patterns, ReplicatedGradientsNeedDdpFrames) {
  const auto rank0 = load_snapshot((fixture("ddp_ranks") / "rank0.pickle").string());
  const Analysis a = analyze(rank0);
  const Pattern* p = find(a, "replicated_gradients");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->confidence, Confidence::Medium);
  EXPECT_TRUE(any_contains(p->fix, "FSDP"));
  const ModelState m = model_state(rank0.snapshot);
  EXPECT_TRUE(m.ddp_frames);
  EXPECT_FALSE(m.sharded_frames);
  EXPECT_GE(m.ddp_buckets, 136 * MiB);
  EXPECT_EQ(m.total(), m.live);
  // The same training without DDP: parameters, gradients and state dominate, but nothing is replicated.
  const auto healthy = analyzed("healthy_training");
  EXPECT_EQ(find(healthy.analysis, "replicated_gradients"), nullptr);
  EXPECT_FALSE(model_state(healthy.loaded.snapshot).ddp_frames);
}

}  // namespace patterns_tests
}  // namespace memsnap
