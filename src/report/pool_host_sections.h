// Report sections for memory pools (reserved by device x segment_pool_id) and pinned host
// memory, in text and JSON (the HTML page draws its tables from the JSON: report.js
// renderMemoryPools / renderHostMemory).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "analysis/analyze.h"

namespace memsnap {

// "memory_pools": one object per (device, pool).
nlohmann::ordered_json memory_pools_json(const std::vector<PoolTotals>& pools);
// "host_memory": null when the file has no host keys; `sites` is the sites array already made.
nlohmann::ordered_json host_memory_json(const HostMemoryReport& host, nlohmann::ordered_json sites);

// "Memory pools" (only when a private pool holds memory) and "Pinned host memory" (only when the
// file has host keys), each with its heading; nothing otherwise.
void memory_pools_text(std::string& out, const std::vector<PoolTotals>& pools);
void host_memory_text(std::string& out, const HostMemoryReport& host, std::size_t top);

// The timeline section's line when there is no device history, or "" when there is some.
std::string no_device_history_text(const Analysis& a);

}  // namespace memsnap
