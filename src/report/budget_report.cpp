// The memory budget as text and JSON (budget_report.h).
#include "report/budget_report.h"

#include <algorithm>
#include <fmt/format.h>

#include "base/format_bytes.h"
#include "base/plural.h"
#include "report/text_wrap.h"

namespace memsnap {
namespace {

constexpr std::size_t kTextRows = 8;
constexpr std::size_t kJsonSizes = 20;

std::string provenance_text(Provenance p) {
  switch (p) {
    case Provenance::InWindow: return "";
    case Provenance::BeforeWindow: return "; allocated before recording";
    case Provenance::NoTrace: return "; no trace";
  }
  return "";
}

std::string source_text(KindSource source) {
  std::string out(name_of(source));
  std::replace(out.begin(), out.end(), '_', ' ');
  return out;
}

void budget_table(std::string& out, const MemoryBudget& b) {
  out += fmt::format("  {}: {} live in {} block{}\n", moment_text(b), format_bytes(b.live_bytes), b.blocks, plural_s(b.blocks));
  std::uint64_t rest_bytes = 0, rest_blocks = 0;
  for (std::size_t i = 0; i < b.rows.size(); ++i) {
    const BudgetRow& row = b.rows[i];
    if (i >= kTextRows) {
      rest_bytes += row.bytes;
      rest_blocks += row.blocks;
      continue;
    }
    out += fmt::format("    {:<17} {:>10} {:5.1f}% {:>6} blocks  {}{}\n", kind_text(row.kind), format_bytes(row.bytes), row.share,
                       row.blocks, source_text(row.source), provenance_text(row.provenance));
  }
  if (rest_blocks > 0) out += fmt::format("    ... {} more rows: {} in {} blocks\n", b.rows.size() - kTextRows, format_bytes(rest_bytes), rest_blocks);
}

}  // namespace

void budget_text_section(std::string& out, const Analysis& a) {
  const MemoryBudget* main = main_budget(a.budgets);
  if (!main) return;
  out += fmt::format("\nMemory budget (device {}; kind, bytes, share of live, blocks, how the kind was decided)\n", main->device);
  for (const MemoryBudget& b : a.budgets) {
    if (b.device == main->device) budget_table(out, b);
  }
  for (const std::string& e : main->evidence) out += wrap(e, "  - ", "    ");
  for (const MemoryBudget& b : a.budgets) {
    if (b.device != main->device && b.live_bytes > 0 && b.moment != BudgetMoment::Oom) out += wrap(budget_sentence(b), "  ", "    ");
  }
}

nlohmann::ordered_json budget_json(const std::vector<MemoryBudget>& budgets) {
  auto out = nlohmann::ordered_json::array();
  const MemoryBudget* main = main_budget(budgets);
  for (const MemoryBudget& b : budgets) {
    nlohmann::ordered_json j = {{"device", b.device}, {"moment", name_of(b.moment)}, {"main", &b == main}};
    if (b.moment == BudgetMoment::Oom) j["oom"] = b.oom;
    if (b.moment != BudgetMoment::End) j["event_index"] = b.event_index;
    j["live_bytes"] = b.live_bytes;
    j["blocks"] = b.blocks;
    auto rows = nlohmann::ordered_json::array();
    for (const BudgetRow& row : b.rows) {
      rows.push_back({{"kind", name_of(row.kind)}, {"provenance", name_of(row.provenance)}, {"source", name_of(row.source)},
                      {"bytes", row.bytes}, {"blocks", row.blocks}, {"share", row.share}});
    }
    j["rows"] = rows;
    auto sizes = nlohmann::ordered_json::array();
    for (std::size_t i = 0; i < b.stackless_sizes.size() && i < kJsonSizes; ++i) {
      sizes.push_back({{"size", b.stackless_sizes[i].size}, {"count", b.stackless_sizes[i].count}});
    }
    j["stackless_sizes"] = sizes;
    j["stackless_sizes_not_listed"] = b.stackless_sizes.size() > kJsonSizes ? b.stackless_sizes.size() - kJsonSizes : 0;
    j["evidence"] = b.evidence;
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace memsnap
