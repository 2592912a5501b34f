// One-line summary of the recorded allocator settings.
#include "report/allocator_settings_text.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/format_bytes.h"
#include "model/settings_json.h"

namespace memsnap {
namespace {

std::string on_off(const nlohmann::json& v) { return v.is_boolean() ? (v.get<bool>() ? "on" : "off") : v.dump(); }

std::string max_split(const nlohmann::json& v) {
  if (!v.is_number_integer()) return v.dump();
  const auto n = v.get<std::int64_t>();
  return n < 0 || n == INT64_MAX ? "unlimited" : format_bytes(n);
}

// The size intervals with a division count, "1:4 256:8" (MiB interval: divisions), else "none".
std::string divisions(const nlohmann::json& v) {
  if (!v.is_object() && !v.is_array()) return v.dump();
  std::string out;
  if (v.is_object()) {
    for (const auto& [interval, n] : v.items()) {
      if (n.is_number() && n.get<double>() != 0) out += fmt::format("{}{}:{}", out.empty() ? "" : " ", interval, n.dump());
    }
  } else {
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (v[i].is_number() && v[i].get<double>() != 0) out += fmt::format("{}{}:{}", out.empty() ? "" : " ", std::size_t{1} << i, v[i].dump());
    }
  }
  return out.empty() ? "none" : out;
}

}  // namespace

std::string allocator_settings_line(const AllocatorSettings& settings) {
  if (!settings.present) return "not in the snapshot (recorded from PyTorch 2.1 on)";
  if (settings.json.empty() || settings.json.front() != '{') return "present but not a dict";  // written compact
  const nlohmann::json j = settings_object(settings);
  std::string out = settings.conf.empty() ? "PYTORCH_CUDA_ALLOC_CONF unset" : fmt::format("PYTORCH_CUDA_ALLOC_CONF '{}'", settings.conf);
  std::string knobs;
  auto add = [&](const char* key, const std::string& value) { knobs += fmt::format("{}{} {}", knobs.empty() ? "" : ", ", key, value); };
  if (j.contains("expandable_segments")) add("expandable_segments", on_off(j["expandable_segments"]));
  if (j.contains("max_split_size")) add("max_split_size", max_split(j["max_split_size"]));
  if (j.contains("garbage_collection_threshold")) add("garbage_collection_threshold", j["garbage_collection_threshold"].dump());
  if (j.contains("roundup_power2_divisions")) add("roundup_power2_divisions", divisions(j["roundup_power2_divisions"]));
  return knobs.empty() ? out : out + ": " + knobs;
}

}  // namespace memsnap
