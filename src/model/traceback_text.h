// Python traceback text as frames: the `File "model.py", line 42, in forward` lines of
// traceback.format_stack() output, which PyTorch writes as forward_frames (anomaly mode) and as a
// frame's fx_original_trace (an FX node's stack_trace).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace memsnap {

struct TextFrame {
  std::string_view file;
  std::int64_t line = 0;
  std::string_view name;
};

// The frames named by `File "...", line N, in NAME` lines of `text`, in text order (outermost
// first for format_stack()); other lines (the source code under each) are skipped.
std::vector<TextFrame> parse_traceback(std::string_view text);

}  // namespace memsnap
