// The recorded allocator_settings as a JSON object.
#include "model/settings_json.h"

#include <nlohmann/json.hpp>

namespace memsnap {

nlohmann::json settings_object(const AllocatorSettings& settings) {
  if (!settings.present || settings.json.empty()) return nlohmann::json::object();
  auto j = nlohmann::json::parse(settings.json, nullptr, false);
  return j.is_object() ? j : nlohmann::json::object();
}

}  // namespace memsnap
