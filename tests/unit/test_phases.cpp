// Phases (analysis/phases.h) and the workload findings built on them (patterns_workload.cpp),
// against the generator's scenarios_phases.py: the phase at the peak, the exact bytes each
// finding reports as its saving, and negatives that must produce none of them.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <random>
#include <nlohmann/json.hpp>

#include "analysis/analyze.h"
#include "analysis/live_curve.h"
#include "analysis/phases.h"
#include "model/load.h"
#include "report/phases_report.h"
#include "test_support.h"

namespace memsnap {
namespace phases_tests {

std::filesystem::path fixture(const std::string& name) { return std::filesystem::path(MEMSNAP_FIXTURE_DIR) / name; }

// A file of the real corpus (test_support.h); the tests skip without it.
std::filesystem::path corpus_file(const std::string& name) { return std::filesystem::path(test::corpus_dir()) / name; }

struct Analyzed {
  LoadedSnapshot loaded;
  Analysis analysis;
  nlohmann::json expect;
};

Analyzed analyzed(const std::string& name) {
  Analyzed a{load_snapshot(fixture(name + ".pickle").string()), {}, {}};
  a.analysis = analyze(a.loaded);
  a.expect = test::fixture_expect(name);
  return a;
}

using test::pattern;

constexpr PatternId kWorkload[] = {PatternId::StaleGradients, PatternId::ActivationsWithoutBackward,
                                   PatternId::ForwardTensorsAfterBackward, PatternId::OptimizerStepTemporaries,
                                   PatternId::AttentionScores, PatternId::TrainingStateInEvaluation};

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

// Under autocast the cast cache's weight copies (64 MiB) are live at the peak too, but autograd does
// not hold them: inference_mode would free the activations alone, and the finding counts those.
TEST(Phases, SavedActivationsWithNoBackwardLeaveTheCastCacheOut) {
  const Analyzed x = analyzed("forward_only_under_autocast");
  EXPECT_EQ(peak_phase(x.analysis), Phase::Evaluation);
  const Pattern* p = pattern(x.analysis, PatternId::ActivationsWithoutBackward);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->saving_bytes, x.expect.at("saved_activation_bytes").get<std::uint64_t>());
  const MemoryBudget* peak = peak_budget(x.analysis.budgets, 0);
  ASSERT_NE(peak, nullptr);
  EXPECT_EQ(bytes_by_kind(*peak)[static_cast<std::size_t>(Category::AutocastCopy)], x.expect.at("autocast_copy_bytes").get<std::uint64_t>());
}

TEST(Phases, TrainingStateThroughAnEvaluation) {
  // Two training steps ran before the recording; then a no_grad evaluation. Their gradients and
  // AdamW state have no stacks: the peak's budget names them by size, and so does the phases line.
  const Analyzed x = analyzed("evaluation_after_training");
  EXPECT_EQ(peak_phase(x.analysis), Phase::Evaluation);
  const auto grads = x.expect.at("gradient_bytes").get<std::uint64_t>();
  const auto state = x.expect.at("optimizer_state_bytes").get<std::uint64_t>();
  expect_only(x.analysis, PatternId::TrainingStateInEvaluation, grads + state);
  const Pattern* p = pattern(x.analysis, PatternId::TrainingStateInEvaluation);
  EXPECT_EQ(p->confidence, Confidence::Medium);
  EXPECT_EQ(p->summary.text().rfind("An evaluation runs with the training state resident: " + Bytes(grads).text() + " of gradients and " +
                                        Bytes(state).text() + " of optimizer state (74% of the ",
                                    0),
            0u)
      << p->summary.text();
  ASSERT_EQ(p->fix.size(), 2u);
  EXPECT_EQ(p->fix[0].id, FixId::FreeTrainingStateForEvaluation);
  EXPECT_EQ(p->fix[1].id, FixId::ZeroGradBeforeEvaluation);
  const auto kinds = phases_json(x.analysis).at(0).at("peak").at("live_by_kind");
  EXPECT_EQ(kinds.at("gradient").get<std::uint64_t>(), grads);
  EXPECT_EQ(kinds.at("optimizer_state").get<std::uint64_t>(), state);
  EXPECT_EQ(kinds.begin().key(), "optimizer_state");  // largest first
  const std::string tail = "The peak is in an evaluation with the training state still resident: " + Bytes(grads + state).text() +
                           " of gradients and optimizer state (74% of the peak) that the forward does not use; free it if no "
                           "training follows.";
  EXPECT_NE(x.analysis.headline.find(tail), std::string::npos) << x.analysis.headline;
}

TEST(Phases, RealForwardBenchmarkAfterTrainingNamesTheTrainingState) {
  const auto file = corpus_file("Wedsonlin_assignment2-systems_results_medium_128_inference_memory_snapshot.pickle");
  if (!std::filesystem::exists(file)) GTEST_SKIP() << "real corpus not found: " << file;
  const Analysis a = analyze(load_snapshot(file.string()));
  const Pattern* p = pattern(a, PatternId::TrainingStateInEvaluation);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(*p->saving_bytes, 1207959552u);  // 384 MiB of gradients + 768 MiB of AdamW state, 70% of the 1.62 GiB peak
  // The phases line counts kinds as the budget does, not "unknown" for every stack-less block.
  const auto kinds = phases_json(a).at(0).at("peak").at("live_by_kind");
  EXPECT_EQ(kinds.at("optimizer_state").get<std::uint64_t>(), 805306368u);
  EXPECT_EQ(kinds.at("unknown").get<std::uint64_t>(), 82178048u);  // 90,697,728 before its stack-less cuBLAS workspace was told by size
  EXPECT_EQ(kinds.at("workspace").get<std::uint64_t>(), 8519680u);
  ASSERT_FALSE(a.next_steps.empty());
  EXPECT_EQ(a.next_steps.front().pattern, PatternId::TrainingStateInEvaluation);
  EXPECT_NE(a.headline.find("evaluation with the training state still resident: 1.12 GiB of gradients and optimizer state (70% of the "
                            "peak)"),
            std::string::npos)
      << a.headline;
}

// The peak's line lists every kind the budget holds, as the budget sentence does: a sixth one
// (a0kuma's 1.25 KiB of activations, once left out), and with more than six the negligible one
// left out (Wedsonlin's 4-byte loss gradient) before the two smallest of the rest (its unknown
// kind and its two cuBLAS workspaces) are summed as "2 other kinds".
std::string peak_line(const Analysis& a) {
  for (const std::string& line : phase_text_lines(a)) {
    if (line.starts_with("The peak (")) return line;
  }
  return "";
}

TEST(Phases, ThePeaksKindsAreAllSaid) {
  const auto six = corpus_file("a0kuma_ckptTry_abc.pickle");
  const auto seven = corpus_file("Wedsonlin_assignment2-systems_results_medium_1024_training_memory_snapshot.pickle");
  const auto negligible = corpus_file("Wedsonlin_assignment2-systems_results_medium_512_training_memory_snapshot.pickle");
  if (!std::filesystem::exists(six) || !std::filesystem::exists(seven)) GTEST_SKIP() << "real corpus not found";
  EXPECT_EQ(peak_line(analyze(load_snapshot(six.string()))),
            "The peak (148.26 MiB) is in the backward pass; live then by kind: gradient 65.75 MiB, parameter 65.75 MiB, workspace "
            "16.25 MiB, temporary 512.00 KiB, unknown 12.75 KiB, activation 1.25 KiB");
  const std::string line = peak_line(analyze(load_snapshot(seven.string())));
  EXPECT_TRUE(line.ends_with("temporary 1.27 GiB, 2 other kinds 107.32 MiB")) << line;
  // Six kinds and a 4-byte gradient (under 1/10000 of the peak): the six are said, the scalar not.
  const std::string six_and_a_scalar = peak_line(analyze(load_snapshot(negligible.string())));
  EXPECT_TRUE(six_and_a_scalar.ends_with("temporary 195.32 MiB, workspace 16.25 MiB")) << six_and_a_scalar;
  EXPECT_EQ(six_and_a_scalar.find("gradient"), std::string::npos) << six_and_a_scalar;
}

// The look-at steps name the peak's sites when the peak is 1.5x what its device holds at the end
// (what to shrink is what made the peak), the end's sites otherwise.
std::vector<std::string> look_at_texts(const Analysis& a) {
  std::vector<std::string> out;
  for (const NextStep& s : a.next_steps) {
    if (s.kind == NextStepKind::LookAtSite) out.push_back(s.text());
  }
  return out;
}

TEST(Phases, LookAtStepsNameThePeaksSitesWhenThePeakDwarfsTheEnd) {
  const Analyzed pressure = analyzed("activation_pressure");
  const auto peak_steps = look_at_texts(pressure.analysis);
  ASSERT_FALSE(peak_steps.empty());
  const Site& top = pressure.analysis.sites_at_peak.front();
  EXPECT_NE(peak_steps.front().find(top.site), std::string::npos) << peak_steps.front();
  EXPECT_NE(peak_steps.front().find(": it holds " + Bytes(top.bytes).text() + " at the peak in "), std::string::npos) << peak_steps.front();
  for (const auto& t : peak_steps) EXPECT_EQ(t.find(" live in "), std::string::npos) << t;

  const Analyzed healthy = analyzed("healthy_training");
  EXPECT_EQ(healthy.analysis.headline.find("tensors hold"), std::string::npos) << healthy.analysis.headline;  // no site dominates
  const auto end_steps = look_at_texts(healthy.analysis);
  ASSERT_FALSE(end_steps.empty());
  for (const auto& t : end_steps) EXPECT_NE(t.find(" live in "), std::string::npos) << t;
}

TEST(Phases, RealScriptPointsAtThePeaksTwoLargestTensors) {
  const auto file = corpus_file("HugePandaCoder_octree-nca-groupeq_mem_snapshots_inference2_peso_oct.pickle");
  if (!std::filesystem::exists(file)) GTEST_SKIP() << "real corpus not found: " << file;
  // Peak 17.23 GiB, end 4.92 GiB: a conv output (line 198) and its relu copy (line 200), 6.85 GiB each.
  const Analysis a = analyze(load_snapshot(file.string()));
  EXPECT_NE(a.headline.find(". 2 tensors hold 80% of it: 6.85 GiB from torch/nn/modules/conv.py:_conv_forward at "), std::string::npos)
      << a.headline;
  EXPECT_NE(a.headline.find("inference2_peso_oct.py:198 (<module>) and 6.85 GiB from torch/nn/functional.py:relu at "), std::string::npos)
      << a.headline;
  const auto steps = look_at_texts(a);
  ASSERT_GE(steps.size(), 2u);
  EXPECT_NE(steps[0].find("inference2_peso_oct.py:198 (<module>): it holds 6.85 GiB at the peak in 1 block (activation)"),
            std::string::npos)
      << steps[0];
  // F.relu at the script's top level is an activation like the conv's output before it: no
  // module call is around either, but the relu is torch.nn.functional.
  EXPECT_NE(steps[1].find("inference2_peso_oct.py:200 (<module>): it holds 6.85 GiB at the peak in 1 block (activation)"),
            std::string::npos)
      << steps[1];
  EXPECT_EQ(a.headline.rfind("At the peak 17.23 GiB is live on device 0: activations 13.70 GiB, unknown kind 3.53 GiB. ", 0), 0u)
      << a.headline;
}

// When one of the two lines holds two of the tensors, the clause says so: "3 tensors" counts
// tensors, and two lines are named.
TEST(Phases, ALineOfTwoTensorsSaysItsCount) {
  const auto file = corpus_file("HugePandaCoder_octree-nca-groupeq_my_snapshot_300688c.pickle");
  if (!std::filesystem::exists(file)) GTEST_SKIP() << "real corpus not found: " << file;
  const Analysis a = analyze(load_snapshot(file.string()));
  EXPECT_NE(a.headline.find(". 3 tensors hold 79% of it: 2.78 GiB (2 tensors) from at::_ops::cat at "), std::string::npos) << a.headline;
  EXPECT_NE(a.headline.find("Model_BasicNCA2D_fast.py:95 (forward_cuda) and 1.39 GiB from torch/nn/functional.py:interpolate at "),
            std::string::npos)
      << a.headline;
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
// The workload detectors read the lifetimes live at the peak from the replay's list: on every
// fixture it is every lifetime live at the peak, in order, and its requested bytes add up to the
// peak's live set.
TEST(Phases, TheLifetimesAtThePeakAreEveryLifetimeLiveThere) {
  std::size_t listed = 0;
  for (const std::string& name : test::fixture_names()) {
    SCOPED_TRACE(name);
    const LoadedSnapshot loaded = load_snapshot(fixture(name + ".pickle").string());
    const Analysis a = analyze(loaded);
    for (const DeviceTimeline& t : a.timelines) {
      std::vector<std::size_t> live;
      for (std::size_t i = 0; i < t.lifetimes.size(); ++i) {
        if (t.lifetimes[i].live_at(t.peak_index)) live.push_back(i);
      }
      EXPECT_EQ(t.lifetimes_at_peak, live) << "device " << t.device;
      std::uint64_t bytes = 0, items = 0;
      for (std::size_t i : t.lifetimes_at_peak) bytes += t.lifetimes[i].size;
      for (const LiveItem& item : t.live_at_peak) items += item.requested;
      EXPECT_EQ(bytes, items) << "device " << t.device;
      listed += live.size();
    }
  }
  EXPECT_GT(listed, 1000u);
}

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

namespace memsnap {
namespace phases_tests {

using phases_detail::kUnlabelled;

// The free-order inference as a walk over every event, with each free's forward allocation in
// an array of one entry an event: what the walk over the labelled events and forward frees alone
// must decide, event for event.
void backward_by_walking_every_event(std::vector<std::uint8_t>& phase, const Lifetimes& lifetimes, const TraceEvents& events,
                                     std::vector<bool>& inferred) {
  const auto fwd = static_cast<std::uint8_t>(Phase::Forward);
  const std::size_t n = events.size();
  if (std::find(phase.begin(), phase.end(), fwd) == phase.end()) return;
  std::vector<bool> is_alloc(n, false);
  for (const Lifetime& lt : lifetimes) {
    if (lt.alloc != kBeforeWindow && lt.alloc < n) is_alloc[lt.alloc] = true;
  }
  std::vector<EventIndex> forward_alloc_of_free(n, kBeforeWindow);
  for (const Lifetime& lt : lifetimes) {
    if (lt.alloc != kBeforeWindow && lt.free != kStillLive && lt.free < n && lt.alloc < n && phase[lt.alloc] == fwd && !is_alloc[lt.free]) {
      forward_alloc_of_free[lt.free] = lt.alloc;
    }
  }
  std::size_t pass_start = 0, prev_mark = SIZE_MAX;
  std::int64_t fwd_live = 0, live_at_mark = 0;
  auto freed_forward = [&](std::size_t k) { return forward_alloc_of_free[k] != kBeforeWindow && forward_alloc_of_free[k] >= pass_start; };
  auto gap_is_backward = [&](std::size_t from, std::size_t to) {
    std::size_t frees = 0, lifo = 0, allocated = 0;
    std::uint64_t freed = 0;
    EventIndex last_alloc = kBeforeWindow;
    for (std::size_t k = from; k < to; ++k) {
      allocated += is_alloc[k];
      if (!freed_forward(k)) continue;
      if (frees > 0 && forward_alloc_of_free[k] < last_alloc) ++lifo;
      last_alloc = forward_alloc_of_free[k];
      ++frees;
      freed += events[k].size;
    }
    return frees >= 8 && allocated >= 2 && allocated * 4 >= frees && double(lifo) >= 0.6 * double(frees - 1) && live_at_mark > 0 &&
           freed * 100 >= static_cast<std::uint64_t>(live_at_mark) * 50;
  };
  auto mark_backward = [&](std::size_t from, std::size_t to) {
    for (std::size_t j = from; j < to; ++j) phase[j] = static_cast<std::uint8_t>(Phase::Backward), inferred[j] = true;
  };
  for (std::size_t k = 0; k < n; ++k) {
    const std::uint8_t p = phase[k];
    if (p != kUnlabelled && p != fwd) {
      if (prev_mark != SIZE_MAX && k - prev_mark > 8 && gap_is_backward(prev_mark + 1, k)) mark_backward(prev_mark + 1, k);
      prev_mark = SIZE_MAX;
      continue;
    }
    if (p == fwd) {
      if (prev_mark == SIZE_MAX) {
        pass_start = k, fwd_live = 0;
      } else if (k - prev_mark > 8 && gap_is_backward(prev_mark + 1, k)) {
        mark_backward(prev_mark + 1, k);
        pass_start = k, fwd_live = 0;
      }
      prev_mark = k;
      if (is_alloc[k]) fwd_live += static_cast<std::int64_t>(events[k].size);
    }
    if (freed_forward(k)) fwd_live -= static_cast<std::int64_t>(events[k].size);
    if (p == fwd) live_at_mark = fwd_live;
  }
  if (prev_mark != SIZE_MAX) {
    std::size_t to = prev_mark + 1;
    while (to < n && phase[to] == kUnlabelled) ++to;
    if (to - prev_mark > 8 && gap_is_backward(prev_mark + 1, to)) mark_backward(prev_mark + 1, to);
  }
}

// Training-like traces: passes of forward allocations (some labelled), gaps that allocate
// gradients and free the forward's tensors nearly last in first out (or not), frees of earlier
// passes' tensors (during a forward too), other labels between passes, frees at alloc events and
// repeated frees.
struct RandomTrace {
  std::vector<std::uint8_t> phase;
  Lifetimes lifetimes;
  TraceEvents events;
};

RandomTrace random_trace(std::uint32_t seed) {
  std::mt19937 rng(seed);
  auto chance = [&](int percent) { return static_cast<int>(rng() % 100) < percent; };
  RandomTrace r;
  auto event = [&](std::uint64_t size, std::uint8_t label) {
    TraceEvent e;
    e.size = size;
    r.events.push_back(e);
    r.phase.push_back(label);
    return static_cast<EventIndex>(r.events.size() - 1);
  };
  std::vector<std::pair<EventIndex, std::uint64_t>> older;  // allocations of earlier passes, not yet freed
  std::vector<Lifetime> all;
  auto free_older = [&] {
    if (older.empty()) return;
    Lifetime o;
    o.alloc = older.back().first;
    o.size = older.back().second;
    o.free = event(o.size, kUnlabelled);
    all.push_back(o);
    older.pop_back();
  };
  const int passes = 1 + static_cast<int>(rng() % 6);
  for (int pass = 0; pass < passes; ++pass) {
    std::vector<std::pair<EventIndex, std::uint64_t>> forward;
    const int allocs = 4 + static_cast<int>(rng() % 40);
    for (int i = 0; i < allocs; ++i) {
      const std::uint64_t size = 512 * (1 + rng() % 64);
      const bool labelled = chance(80);
      forward.emplace_back(event(size, labelled ? static_cast<std::uint8_t>(Phase::Forward) : kUnlabelled), size);
      if (chance(10)) event(0, kUnlabelled);  // a free_requested
      if (chance(10)) free_older();  // an earlier pass's tensor freed during the forward
    }
    const bool lifo = chance(70);
    const int freed_percent = std::array{30, 45, 60, 95}[rng() % 4];  // of the forward's tensors, in the gap
    if (!lifo) std::shuffle(forward.begin(), forward.end(), rng);
    else std::reverse(forward.begin(), forward.end());
    for (std::size_t i = 0; i < forward.size(); ++i) {
      if (chance(20)) {  // a gradient
        Lifetime g;
        g.alloc = event(4096, kUnlabelled);
        g.size = 4096;
        all.push_back(g);
      }
      if (chance(15) && i + 1 < forward.size()) std::swap(forward[i], forward[i + 1]);
      if (chance(10)) free_older();  // an earlier pass's tensor
      if (chance(freed_percent)) {
        Lifetime f;
        f.alloc = forward[i].first;
        f.size = forward[i].second;
        f.free = chance(3) && !all.empty() && all.back().alloc != kBeforeWindow ? all.back().alloc : event(f.size, kUnlabelled);
        all.push_back(f);
        if (chance(3)) all.push_back(f);  // the same free twice
      } else {
        older.push_back(forward[i]);
      }
    }
    if (chance(50)) event(128, static_cast<std::uint8_t>(chance(50) ? Phase::OptimizerStep : Phase::ZeroGrad));
    if (chance(30)) event(64, static_cast<std::uint8_t>(Phase::Forward));
  }
  std::stable_sort(all.begin(), all.end(), [](const Lifetime& a, const Lifetime& b) { return a.alloc < b.alloc; });
  for (const Lifetime& lt : all) r.lifetimes.push_back(lt);
  return r;
}

TEST(Phases, TheFreeOrderWalkDecidesAsAWalkOverEveryEvent) {
  std::size_t inferred_events = 0, traces_with_backward = 0;
  for (std::uint32_t seed = 0; seed < 3000; ++seed) {
    RandomTrace r = random_trace(seed);
    std::vector<std::uint8_t> expected = r.phase, got = r.phase;
    std::vector<bool> expected_inferred(r.events.size(), false), got_inferred(r.events.size(), false);
    backward_by_walking_every_event(expected, r.lifetimes, r.events, expected_inferred);
    phases_detail::infer_backward_from_frees(got, r.lifetimes, r.events, got_inferred);
    ASSERT_EQ(got, expected) << "seed " << seed;
    ASSERT_EQ(got_inferred, expected_inferred) << "seed " << seed;
    const auto n = static_cast<std::size_t>(std::count(got_inferred.begin(), got_inferred.end(), true));
    inferred_events += n;
    traces_with_backward += n > 0;
  }
  // The traces reach both answers often.
  EXPECT_GT(traces_with_backward, 300u);
  EXPECT_LT(traces_with_backward, 2700u);
  EXPECT_GT(inferred_events, 10000u);
}

}  // namespace phases_tests
}  // namespace memsnap
