// Memory pools and pinned host memory as report sections (text and JSON).
#include "report/pool_host_sections.h"

#include <fmt/format.h>

#include "base/format_bytes.h"
#include "base/plural.h"

namespace memsnap {

nlohmann::ordered_json memory_pools_json(const std::vector<PoolTotals>& pools) {
  auto arr = nlohmann::ordered_json::array();
  for (const PoolTotals& p : pools) {
    arr.push_back({{"device", p.device}, {"pool_id", {p.pool.first, p.pool.second}}, {"kind", pool_kind_name(pool_kind(p.pool))},
                   {"label", pool_label(p.pool)}, {"reserved", p.reserved}, {"allocated", p.allocated},
                   {"pending_free", p.pending_free}, {"inactive", p.inactive},
                   {"largest_inactive_block", p.largest_inactive_block}, {"segments", p.segments}});
  }
  return arr;
}

nlohmann::ordered_json host_memory_json(const HostMemoryReport& host, nlohmann::ordered_json sites) {
  if (!host.present) return nullptr;
  const Totals& t = host.totals;
  nlohmann::ordered_json j;
  j["reserved"] = t.reserved;
  j["allocated"] = t.allocated;
  j["requested"] = t.requested;
  j["pending_free"] = t.pending_free;
  j["inactive"] = t.inactive;
  j["segments"] = t.segments;
  j["blocks"] = t.blocks;
  j["events"] = host.events;
  j["peak_allocated"] = host.peak_live ? nlohmann::ordered_json(*host.peak_live) : nlohmann::ordered_json(nullptr);
  j["peak_event_index"] = host.peak_live ? nlohmann::ordered_json(host.peak_index) : nlohmann::ordered_json(nullptr);
  j["top_sites"] = std::move(sites);
  return j;
}

void memory_pools_text(std::string& out, const std::vector<PoolTotals>& pools) {
  if (!has_private_pools(pools)) return;
  out += "\nMemory pools (reserved by device and pool)\n";
  for (const PoolTotals& p : pools) {
    out += fmt::format("  device {} {:<44} {:>10} reserved, {:>10} allocated, {:>10} inactive, {} segment{}\n", p.device,
                       pool_label(p.pool), format_bytes(p.reserved), format_bytes(p.allocated), format_bytes(p.inactive), p.segments,
                       plural_s(p.segments));
  }
  out += "  Memory of a private pool serves only requests made in that pool (during its graph's capture or\n"
         "  under its MemPool); the default pool cannot reuse it, and empty_cache() does not release it while\n"
         "  the graph or pool lives.\n";
}

void host_memory_text(std::string& out, const HostMemoryReport& host, std::size_t top) {
  if (!host.present) return;
  const Totals& t = host.totals;
  out += "\nPinned host memory (host_segments, host_traces)\n";
  out += fmt::format("  {:<30}{}\n", "reserved (host segments)", format_bytes(t.reserved));
  out += fmt::format("  {:<30}{}\n", "allocated (live)", format_bytes(t.allocated));
  out += fmt::format("  {:<30}{}\n", "inactive (cached)", format_bytes(t.inactive));
  out += fmt::format("  {:<30}{}\n", "segments / blocks", fmt::format("{} / {}", t.segments, t.blocks));
  if (host.peak_live) {
    out += fmt::format("  {:<30}{} after host event {} of {}\n", "peak allocated (host trace)", format_bytes(*host.peak_live),
                       host.peak_index, host.events);
  } else {
    out += fmt::format("  {:<30}{}\n", "peak allocated (host trace)", "unknown (no host trace history)");
  }
  for (std::size_t i = 0; i < host.sites.size() && i < top; ++i) {
    const Site& s = host.sites[i];
    out += fmt::format("  {:>2}. {:>10}  {:5.1f}%  {:>5} blocks  {}\n", i + 1, format_bytes(s.bytes), s.percent, s.blocks,
                       s.no_stack ? std::string("[no stack recorded]") : s.site + " (" + s.function + ")");
  }
}

std::string no_device_history_text(const Analysis& a) {
  if (a.trace.analyzed != 0) return "";
  if (a.host.events > 0) {
    return fmt::format("  Device history was not recorded (record_cuda=False); the pinned host history has {} events (below).\n",
                       a.host.events);
  }
  return "  No trace history: frees, the peak and OOM moments are unknown.\n";
}

}  // namespace memsnap
