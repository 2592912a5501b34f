// Phases (analysis/phases.h) and the workload findings built on them (patterns_workload.cpp),
// against the generator's scenarios_phases.py: the phase at the peak, the exact bytes each
// finding reports as its saving, and negatives that must produce none of them.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "analysis/analyze.h"
#include "analysis/live_curve.h"
#include "model/load.h"
#include "test_support.h"

namespace memsnap {
namespace phases_tests {

std::filesystem::path fixture(const std::string& name) { return std::filesystem::path(MEMSNAP_FIXTURE_DIR) / name; }

struct Analyzed {
  LoadedSnapshot loaded;
  Analysis analysis;
  nlohmann::json expect;
};

Analyzed analyzed(const std::string& name) {
  Analyzed a{load_snapshot(fixture(name + ".pickle").string()), {}, {}};
  a.analysis = analyze(a.loaded);
  std::ifstream in(fixture(name + ".truth.json"));
  a.expect = nlohmann::json::parse(in).value("expect", nlohmann::json::object());
  return a;
}

const Pattern* pattern(const Analysis& a, PatternId id) {
  const auto it = std::find_if(a.patterns.begin(), a.patterns.end(), [&](const Pattern& p) { return p.id == id; });
  return it == a.patterns.end() ? nullptr : &*it;
}

constexpr PatternId kWorkload[] = {PatternId::StaleGradients, PatternId::ActivationsWithoutBackward,
                                   PatternId::ForwardTensorsAfterBackward, PatternId::OptimizerStepTemporaries,
                                   PatternId::AttentionScores};

// Only `id` of the workload patterns fires, with exactly `bytes` as its saving.
void expect_only(const Analysis& a, PatternId id, std::uint64_t bytes) {
  for (PatternId other : kWorkload) {
    if (other != id) EXPECT_EQ(pattern(a, other), nullptr) << other;
  }
  const Pattern* p = pattern(a, id);
  ASSERT_NE(p, nullptr) << id;
  ASSERT_TRUE(p->saving_bytes.has_value());
  EXPECT_EQ(*p->saving_bytes, bytes);
  EXPECT_EQ(p->verdict, Verdict::Problem);
  ASSERT_FALSE(p->fix.empty());
  // The first next step is this finding's fix and says what it saves of the peak.
  ASSERT_FALSE(a.next_steps.empty());
  const auto step = std::find_if(a.next_steps.begin(), a.next_steps.end(), [&](const NextStep& s) { return s.pattern == id; });
  ASSERT_NE(step, a.next_steps.end());
  ASSERT_TRUE(step->saving_bytes.has_value());
  EXPECT_EQ(*step->saving_bytes, bytes);
  EXPECT_NE(step->text().find("saves about"), std::string::npos) << step->text();
}

Phase peak_phase(const Analysis& a) {
  for (const DevicePhases& d : a.phases) {
    if (d.device == a.peak_device && d.peak) return d.peak->phase;
  }
  return Phase::Other;
}

TEST(Phases, TrainingStepsHaveEveryPhaseInOrder) {
  const Analyzed x = analyzed("healthy_training");
  ASSERT_EQ(x.analysis.phases.size(), 1u);
  const DevicePhases& d = x.analysis.phases.front();
  EXPECT_EQ(d.iterations, 4u);
  EXPECT_TRUE(d.backward_from_frames);
  std::vector<Phase> order;
  for (const PhaseSpan& s : d.spans) {
    if (s.iteration == 2) order.push_back(s.phase);
  }
  const std::vector<Phase> want = {Phase::Forward, Phase::Backward, Phase::OptimizerStep, Phase::ZeroGrad};
  EXPECT_EQ(order, want);
  for (PatternId id : kWorkload) EXPECT_EQ(pattern(x.analysis, id), nullptr) << id;
}

TEST(Phases, StaleGradientsThroughTheForward) {
  const Analyzed x = analyzed("zero_grad_after_forward");
  EXPECT_EQ(peak_phase(x.analysis), Phase::Forward);
  expect_only(x.analysis, PatternId::StaleGradients, x.expect.at("stale_gradient_bytes").get<std::uint64_t>());
  EXPECT_EQ(pattern(x.analysis, PatternId::StaleGradients)->fix.front().id, FixId::ZeroGradBeforeForward);
}

TEST(Phases, ForwardTensorsKeptAfterBackward) {
  const Analyzed x = analyzed("outputs_kept_after_backward");
  expect_only(x.analysis, PatternId::ForwardTensorsAfterBackward, x.expect.at("kept_forward_bytes").get<std::uint64_t>());
  const Pattern* p = pattern(x.analysis, PatternId::ForwardTensorsAfterBackward);
  ASSERT_FALSE(p->sites.empty());
  EXPECT_EQ(p->sites.front(), x.expect.at("kept_forward_site").get<std::string>());
}

TEST(Phases, PeakInsideTheOptimizerStep) {
  const Analyzed x = analyzed("optimizer_out_of_place");
  EXPECT_EQ(peak_phase(x.analysis), Phase::OptimizerStep);
  expect_only(x.analysis, PatternId::OptimizerStepTemporaries, x.expect.at("optimizer_temporary_bytes").get<std::uint64_t>());
}

TEST(Phases, SavedActivationsWithNoBackward) {
  const Analyzed x = analyzed("forward_only_with_autograd");
  EXPECT_EQ(peak_phase(x.analysis), Phase::Evaluation);
  EXPECT_FALSE(x.analysis.phases.front().has(Phase::Backward));  // the reversed frees of a dropped graph are no backward
  expect_only(x.analysis, PatternId::ActivationsWithoutBackward, x.expect.at("saved_activation_bytes").get<std::uint64_t>());
  // No optimizer or capture-pair advice for a run without an optimizer step.
  for (const NextStep& s : x.analysis.next_steps) {
    EXPECT_EQ(s.text().find("optimizer.step()"), std::string::npos) << s.text();
    EXPECT_NE(s.kind, NextStepKind::DiffIfGrowing);
  }
}

TEST(Phases, NegativesHaveNoWorkloadFinding) {
  for (const std::string name : {"inference_no_grad", "healthy_eval", "expandable_segments", "example", "activation_pressure"}) {
    const Analyzed x = analyzed(name);
    for (PatternId id : kWorkload) EXPECT_EQ(pattern(x.analysis, id), nullptr) << name << ": " << id;
  }
  EXPECT_EQ(peak_phase(analyzed("inference_no_grad").analysis), Phase::Evaluation);
}

TEST(Phases, NoLookAtNativeFrames) {
  const Analyzed x = analyzed("cpp_frames");
  for (const NextStep& s : x.analysis.next_steps) {
    if (s.kind != NextStepKind::LookAtSite) continue;
    EXPECT_EQ(s.text().find("look at ??"), std::string::npos) << s.text();
  }
}

}  // namespace phases_tests
}  // namespace memsnap

namespace memsnap {
namespace phases_tests {

TEST(Phases, BackwardWithoutFramesFromTheOrderOfFrees) {
  const Analyzed x = analyzed("sawtooth_no_backward_frames");
  ASSERT_EQ(x.analysis.phases.size(), 1u);
  const DevicePhases& d = x.analysis.phases.front();
  EXPECT_FALSE(d.backward_from_frames);
  EXPECT_TRUE(d.backward_from_free_order);
  EXPECT_EQ(d.iterations, 3u);
  // The same program with backward frames: activation_pressure finds exactly the same activations.
  const Analyzed framed = analyzed(x.expect.at("same_activations_as").get<std::string>());
  const Pattern* here = pattern(x.analysis, PatternId::ActivationPressure);
  const Pattern* there = pattern(framed.analysis, PatternId::ActivationPressure);
  ASSERT_NE(here, nullptr);
  ASSERT_NE(there, nullptr);
  EXPECT_EQ(here->saving_bytes, there->saving_bytes);
  for (PatternId id : kWorkload) EXPECT_EQ(pattern(x.analysis, id), nullptr) << id;
}

// On every fixture the spans cover the events one after another from the first, and each span's
// live bytes at its start and its highest are what a walk of the curve over it finds (the spans
// are measured from the curve's block maxima, which this checks).
TEST(Phases, SpansCoverTheEventsAndCarryTheCurvesBytes) {
  std::size_t measured = 0;
  for (const std::string& name : test::fixture_names()) {
    SCOPED_TRACE(name);
    const LoadedSnapshot loaded = load_snapshot(fixture(name + ".pickle").string());
    const Analysis a = analyze(loaded);
    for (const DevicePhases& d : a.phases) {
      const auto t = std::find_if(a.timelines.begin(), a.timelines.end(), [&](const DeviceTimeline& x) { return x.device == d.device; });
      ASSERT_NE(t, a.timelines.end());
      std::size_t next = 0;
      LiveCurve::Reader curve(t->curve);
      for (const PhaseSpan& sp : d.spans) {
        ASSERT_EQ(sp.first, next);
        ASSERT_LT(sp.first, sp.end);
        next = sp.end;
        std::int64_t high = curve.at(sp.first);
        EXPECT_EQ(sp.live_start, high);
        for (std::size_t k = sp.first + 1; k <= sp.end; ++k) high = std::max(high, curve.at(k));
        EXPECT_EQ(sp.live_max, high) << sp.first << ".." << sp.end;
        ++measured;
      }
      if (!d.spans.empty()) EXPECT_EQ(next, loaded.snapshot.events_of(d.device).size());
    }
  }
  EXPECT_GT(measured, 100u);
}

}  // namespace phases_tests
}  // namespace memsnap
