// One run of `memsnap PATH [--diff LATER]`: chooses the single, diff or rank-directory analysis,
// concludes it, and renders it with the format's writer from one table.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "analysis/analyze.h"
#include "base/error.h"
#include "model/load.h"

namespace memsnap::cli {

struct RunRequest {
  std::string path;       // a snapshot, or a directory of per-rank snapshots
  std::string diff_path;  // LATER of a diff, or empty
  bool path_is_directory = false;
  std::string format = "text";  // a name in the renderer table: text, json, html
  bool want_json = false;       // the JSON report is needed besides the output (budgets)
  AnalyzeOptions options;
  LoadOptions load;
};

struct RunOutput {
  std::string text;                             // what is written
  std::optional<nlohmann::ordered_json> report;  // the JSON report, when the format or want_json needed it
};

// Bad input in LATER of a diff (PATH's own errors are plain InputErrors).
struct LaterInputError {
  std::string path;
  InputError error;
};

// Throws InputError for bad input in PATH, LaterInputError for bad input in LATER.
RunOutput run_memsnap(const RunRequest& request);

// True when `format` names a renderer.
bool known_format(const std::string& format);

}  // namespace memsnap::cli
