// The autocast_weight_copies and kv_cache findings (rules in patterns_kinds.h).
#include "analysis/patterns_kinds.h"
#include "base/units.h"

#include <algorithm>

namespace memsnap {
namespace {


struct KindShare {
  const MemoryBudget* budget = nullptr;
  std::uint64_t bytes = 0;
  double percent = 0;
};

KindShare share_of(const Measured& m, Category kind) {
  KindShare k;
  k.budget = main_budget(m.budgets);
  if (!k.budget || k.budget->live_bytes == 0) return k;
  k.bytes = bytes_by_kind(*k.budget)[static_cast<std::size_t>(kind)];
  k.percent = 100.0 * double(k.bytes) / double(k.budget->live_bytes);
  return k;
}

// The largest site of `kind` (sites are largest first), or null.
const Site* largest_site(const Measured& m, Category kind) {
  for (const Site& s : m.sites) {
    if (s.category == kind && !s.no_stack) return &s;
  }
  return nullptr;
}

bool is_serving_engine(const Site* s) {
  return s && s->known && (s->known->id == "vllm_kv_cache" || s->known->id == "sglang_kv_cache");
}

}  // namespace

std::optional<Pattern> autocast_weight_copies(const Measured& m) {
  const KindShare k = share_of(m, Category::AutocastCopy);
  if (k.bytes < 256 * kMiB || k.percent < 10.0) return std::nullopt;
  Pattern p;
  p.id = PatternId::AutocastWeightCopies;
  p.verdict = Verdict::Info;
  p.confidence = Confidence::High;
  p.summary = sentence("autocast's cast cache holds {} ({:.0f}% of the {} live {}): lower-precision copies of fp32 weights, kept until the "
                       "autocast region exits",
                       Bytes(k.bytes), k.percent, Bytes(k.budget->live_bytes), moment_text(*k.budget));
  p.evidence.push_back(sentence("{} of autocast_copy memory {} on device {}", Bytes(k.bytes), moment_text(*k.budget), k.budget->device));
  if (const Site* s = largest_site(m, Category::AutocastCopy)) {
    p.evidence.push_back(sentence("the largest site is {} ({}): {} in {} blocks", s->site, s->function, Bytes(s->bytes), s->blocks));
    p.sites.push_back(s->site);
  }
  p.fix = {fix(FixId::Bf16WeightsForInference), fix(FixId::AutocastNoCache, Bytes(k.bytes))};
  p.saving_bytes = k.bytes;
  return p;
}

std::optional<Pattern> kv_cache(const Measured& m) {
  const KindShare k = share_of(m, Category::KvCache);
  if (k.bytes < kGiB || k.percent < 25.0) return std::nullopt;
  const Site* s = largest_site(m, Category::KvCache);
  Pattern p;
  p.id = PatternId::KvCache;
  p.confidence = Confidence::High;
  if (is_serving_engine(s)) {
    p.verdict = Verdict::Expected;
    p.summary = sentence("the {} holds {} ({:.0f}% of the {} live {}): the engine pre-allocates it at start-up from gpu_memory_utilization "
                         "(a share of the whole device), so it is expected, not a leak",
                         s->known->name, Bytes(k.bytes), k.percent, Bytes(k.budget->live_bytes), moment_text(*k.budget));
    p.fix = {fix(FixId::LowerGpuMemoryUtilization)};
  } else {
    p.verdict = Verdict::Info;
    p.summary = sentence("a KV cache holds {} ({:.0f}% of the {} live {}): it grows with batch x generated length x layers",
                         Bytes(k.bytes), k.percent, Bytes(k.budget->live_bytes), moment_text(*k.budget));
    p.fix = {fix(FixId::BoundKvCache)};
  }
  p.evidence.push_back(sentence("{} of kv_cache memory {} on device {}", Bytes(k.bytes), moment_text(*k.budget), k.budget->device));
  if (s) {
    p.evidence.push_back(sentence("allocated at {} ({}): {} in {} blocks", s->site, s->function, Bytes(s->bytes), s->blocks));
    p.sites.push_back(s->site);
  }
  p.saving_bytes = std::nullopt;
  return p;
}

}  // namespace memsnap
