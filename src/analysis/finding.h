// The typed conclusions of an analysis: a pattern finding (id, verdict, confidence, evidence as
// sentence templates with their numbers, the sites to change, fix ids into one catalogue, the
// estimated saving) and the next steps. Report writers turn them into prose; no code decides
// anything by reading that prose.
#pragma once

#include <array>
#include <concepts>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "base/enum_names.h"
#include "base/plural.h"

namespace memsnap {

enum class PatternId {
  Fragmentation,
  Capacity,
  CachedMemory,
  PendingFrees,
  NonPytorchMemory,
  RetainedAutogradGraph,
  GrowingContainer,
  OptimizerStateSpike,
  ActivationPressure,
  ReferenceCycles,
  ReplicatedGradients,
  DeviceImbalance,
  StaleGradients,              // the workload patterns (patterns_workload.cpp)
  ActivationsWithoutBackward,
  ForwardTensorsAfterBackward,
  OptimizerStepTemporaries,
  AttentionScores,
  AutocastWeightCopies,        // the kind patterns (patterns_kinds.cpp)
  KvCache,
  TrainingStateInEvaluation,  // a workload pattern, added after the kind patterns
  OutOfPlaceActivation,       // the peak's allocation (patterns_inplace.cpp)
};
template <>
struct EnumNames<PatternId> {
  static constexpr std::array<std::string_view, 21> names = {
      "fragmentation",           "capacity",          "cached_memory",         "pending_frees",
      "non_pytorch_memory",      "retained_autograd_graph", "growing_container", "optimizer_state_spike",
      "activation_pressure",     "reference_cycles",  "replicated_gradients",  "device_imbalance", "stale_gradients",
      "activations_without_backward", "forward_tensors_after_backward", "optimizer_step_temporaries", "attention_scores",
      "autocast_weight_copies", "kv_cache", "training_state_in_evaluation", "out_of_place_activation"};
};
inline bool is_leak_pattern(PatternId id) { return id == PatternId::RetainedAutogradGraph || id == PatternId::GrowingContainer; }

enum class Verdict { Leak, Expected, Problem, Info };
template <>
struct EnumNames<Verdict> {
  static constexpr std::array<std::string_view, 4> names = {"leak", "expected", "problem", "info"};
};

enum class Confidence { High, Medium, Low };
template <>
struct EnumNames<Confidence> {
  static constexpr std::array<std::string_view, 3> names = {"high", "medium", "low"};
};

// A byte count, written as a binary size ("1.50 GiB"); `sign` writes "+" or "-" in front.
struct Bytes {
  std::int64_t value = 0;
  bool sign = false;
  template <std::integral T>
  Bytes(T v, bool with_sign = false) : value(clamped(v)), sign(with_sign) {}
  bool operator==(const Bytes&) const = default;
  std::string text() const;

 private:
  template <std::integral T>
  static std::int64_t clamped(T v) {
    constexpr auto kMax = static_cast<std::uint64_t>(INT64_MAX);
    if constexpr (std::is_signed_v<T>) return static_cast<std::int64_t>(v);
    else return static_cast<std::uint64_t>(v) > kMax ? INT64_MAX : static_cast<std::int64_t>(v);
  }
};

// One value of a sentence: text, a count, a number (formatted by the template's spec) or bytes.
using Arg = std::variant<std::string, std::int64_t, std::uint64_t, double, Bytes>;

// A sentence template ({fmt} syntax, a string literal) and its values, rendered by text().
struct Sentence {
  std::string_view format;
  std::vector<Arg> args;
  std::string text() const;
  bool operator==(const Sentence&) const = default;
};

template <class T>
Arg to_arg(T&& v) {
  using D = std::decay_t<T>;
  if constexpr (std::is_same_v<D, Bytes> || std::is_same_v<D, std::string> || std::is_same_v<D, double>) return Arg(std::forward<T>(v));
  else if constexpr (std::is_floating_point_v<D>) return Arg(static_cast<double>(v));
  else if constexpr (std::is_integral_v<D> && std::is_signed_v<D>) return Arg(static_cast<std::int64_t>(v));
  else if constexpr (std::is_integral_v<D>) return Arg(static_cast<std::uint64_t>(v));
  else return Arg(std::string(std::forward<T>(v)));
}

// sentence("{} live in {} blocks", Bytes(n), blocks)
template <class... A>
Sentence sentence(std::string_view format, A&&... args) {
  return Sentence{format, {to_arg(std::forward<A>(args))...}};
}

// The fix catalogue (finding.cpp): one text per id, grouped by the pattern it belongs to.
enum class FixId {
  ExpandableSegments, MaxSplitSize, FixedShapes,                                // fragmentation at an OOM
  ExpandableIfLargerFails, EmptyCacheKeepsFragments,                           // fragmentation without an OOM
  ExpandableAlreadyOn,                                                         // either, when the setting is on
  SmallerBatch, Checkpointing, ShardState, LowerPrecision, RaiseProcessLimit,  // capacity
  SyncSideStream, AvoidRecordStream,                                           // pending_frees
  CheckNativeBuffers, CompareDeviceMemoryUsed, OtherProcesses,                 // non_pytorch_memory
  AccumulateItem, DetachKept, DetachLossAt, DetachNotGraph, RetainGraphOrKept, NoGradForEval,  // retained_autograd_graph
  AppendDetachCpu, BoundContainer,                                             // growing_container
  OptimizerNothingToFix, OptimizerIfShort, DumpAfterFirstStep,                 // optimizer_state_spike
  CheckpointModules, RecomputeCostOfStep, RecomputeCostMs, RecomputeCostTypical, HfGradientCheckpointing,
  SmallerMicroBatch,                                                           // activation_pressure
  WarnTensorCycles, BreakCycle, GcCollect,                                     // reference_cycles
  ShardReplicated, ZeroOneSaving,                                              // replicated_gradients
  UseDdpNotDataParallel, BalanceStages, MoveWorkOffDevice,                     // device_imbalance
  ZeroGradBeforeForward, InferenceMode, DropForwardRefs, ForeachOrFused, FusedAttention, FusedSdpaBackend,  // workload patterns
  FreeTrainingStateForEvaluation, ZeroGradBeforeEvaluation,                   // training_state_in_evaluation
  InplaceActivation,                                                           // out_of_place_activation
  Bf16WeightsForInference, AutocastNoCache, LowerGpuMemoryUtilization, BoundKvCache,  // the kind patterns
  PrivatePoolsCannotServe, SharePoolBetweenGraphs, CaptureFewerSizes, ReduceOverheadWhereNeeded,  // OOM next to private pools
  GraphPoolOom,                                                                // OOM inside a private pool
  FromReport,                                                                  // a fix read back from a JSON report
};

struct Fix {
  FixId id;
  std::vector<Arg> args;
  std::string text() const;
  bool operator==(const Fix&) const = default;
};

template <class... A>
Fix fix(FixId id, A&&... args) {
  return Fix{id, {to_arg(std::forward<A>(args))...}};
}

struct Pattern {
  PatternId id = PatternId::Fragmentation;
  Verdict verdict = Verdict::Info;
  Confidence confidence = Confidence::Medium;
  Sentence summary;
  std::vector<Sentence> evidence;
  std::vector<std::string> sites;
  std::vector<Fix> fix;
  std::optional<std::uint64_t> saving_bytes;  // what acting on it would free, where the snapshot says
};

enum class NextStepKind {
  Fix,                  // a pattern's fix: "[pattern] text"
  LookAtSite,           // one of the largest live sites
  ConfirmLeakWithDiff,  // capture a pair and diff it (a leak was found)
  DiffIfGrowing,        // capture a pair if memory grows (no leak seen)
  CaptureHistory,       // record again with trace history
  LookAtRankSite,       // a site that explains an outlier rank
};
template <>
struct EnumNames<NextStepKind> {
  static constexpr std::array<std::string_view, 6> names = {"fix",          "look_at_site",   "confirm_leak_with_diff",
                                                            "diff_if_growing", "capture_history", "look_at_rank_site"};
};

struct NextStep {
  NextStepKind kind = NextStepKind::Fix;
  std::optional<PatternId> pattern;  // with kind Fix
  std::optional<Fix> fix;            // with kind Fix (absent when read back from a report)
  Sentence sentence;                 // the other kinds, and fixes read back from a report
  // What acting on it would save of the peak, and that peak (the text says "saves about X of the Y peak").
  std::optional<std::uint64_t> saving_bytes;
  std::uint64_t peak_bytes = 0;
  std::string text() const;
  bool operator==(const NextStep&) const = default;
  // A step of a kind other than Fix, said by its sentence.
  static NextStep said(NextStepKind kind, Sentence sentence) {
    NextStep step;
    step.kind = kind;
    step.sentence = std::move(sentence);
    return step;
  }
};

NextStep fix_step(PatternId pattern, const Fix& fix);
// A line read back from a JSON report, kept as it was written.
Sentence verbatim(std::string text);

}  // namespace memsnap
