// The recorded allocator_settings as a JSON object, parsed once by whoever reads its keys.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include "model/snapshot.h"

namespace memsnap {

// The settings dict; an empty object when the snapshot has none or it is not a dict.
nlohmann::json settings_object(const AllocatorSettings& settings);

}  // namespace memsnap
