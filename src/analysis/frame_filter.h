// Which frame of a stack names the user's code: each frame's facts (model/frame_facts.h) give
// its kind (user, third-party, torch, standard library, C++/CPython, generated) through one
// decision table, and the most useful frame of the stack is chosen.
#pragma once

#include <span>
#include <string_view>

#include "model/snapshot.h"

namespace memsnap {

enum class FrameKind { User, ThirdParty, Torch, Stdlib, Native, Generated };
const char* frame_kind_name(FrameKind kind);

// One row of the kind table: the first row whose facts a frame has all of (and none of
// `none_of`) gives its kind.
struct KindRule {
  FrameFacts all_of;
  FrameFacts none_of;
  FrameKind kind;
  std::string_view reason;
};
std::span<const KindRule> frame_kind_rules();
// The row that decides a frame with these facts (the last row matches everything).
const KindRule& kind_rule(FrameFacts facts);

FrameKind frame_kind(FrameFacts facts);
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
// frame; else the innermost Python frame of any kind; else the innermost autograd node; else the
// first native frame worth naming (not omitted, not allocator plumbing); else the innermost frame.
SiteChoice choose_site(const Snapshot& snapshot, StackId stack);

}  // namespace memsnap
