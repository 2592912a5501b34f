// Ready-to-paste Python recipes for capturing snapshots (from the analysis workflow).
#pragma once

#include <string>

namespace memsnap {

enum class CaptureKind { Minimal, Oom, Diff, Distributed, NoPath };
std::string capture_recipe(CaptureKind kind);

}  // namespace memsnap
