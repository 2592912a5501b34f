// Which frame of a stack names the user's code: frames are classified (user, third-party,
// torch, standard library, C++/CPython, generated) and the most useful one is chosen.
#pragma once

#include <string_view>

#include "model/snapshot.h"

namespace memsnap {

enum class FrameKind { User, ThirdParty, Torch, Stdlib, Native, Generated };
const char* frame_kind_name(FrameKind kind);

FrameKind classify_frame(std::string_view filename, std::string_view name);

// Frames PyTorch's own tools omit (unwinder, interpreter plumbing, dispatcher registration).
bool is_omitted_frame(std::string_view filename, std::string_view name);

struct SiteChoice {
  FrameId frame = 0;
  FrameKind kind = FrameKind::Native;
  std::size_t position = 0;  // index in the stack (0 = innermost)
  bool found = false;        // false: the stack is empty
};

// The innermost user frame; else the innermost third-party frame; else the innermost torch
// frame; else the innermost Python frame of any kind; else the first meaningful native frame.
SiteChoice choose_site(const Snapshot& snapshot, StackId stack);

}  // namespace memsnap
