// Frame classification by path and name, following the workflow's rule: attribute memory to
// the user's own code, skipping allocator, interpreter and framework internals.
#include "analysis/frame_filter.h"

#include <array>
#include <string>

namespace memsnap {
namespace {

bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }
bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string normalized_path(std::string_view filename) {
  std::string p(filename);
  for (char& c : p) {
    if (c == '\\') c = '/';
  }
  return p;
}

bool is_native(std::string_view filename, std::string_view name) {
  if (filename == "??" || filename.empty()) return true;
  for (std::string_view ext : {".cpp", ".cc", ".cu", ".cuh", ".h", ".hpp", ".c", ".cxx", ".S", ".o"}) {
    if (ends_with(filename, ext)) return true;
  }
  if (contains(filename, ".so")) return true;
  const bool python_file = ends_with(filename, ".py") || (!filename.empty() && filename[0] == '<');
  return !python_file && contains(name, "::");
}

bool is_torch_path(std::string_view p) {
  return p.rfind("torch/", 0) == 0 || contains(p, "/torch/") || contains(p, "/functorch/");
}

bool is_stdlib_path(std::string_view p) {
  if (!p.empty() && p[0] == '<') return true;  // <frozen runpy>, <string>
  for (std::string_view marker : {"/lib/python2", "/lib/python3", "/Lib/", "/lib64/python3"}) {
    if (contains(p, marker)) return true;
  }
  return false;
}

// A native frame worth naming: not the unwinder, allocator, thread start-up or tensor factory.
bool is_informative_native(std::string_view filename, std::string_view name) {
  if (is_omitted_frame(filename, name)) return false;
  for (std::string_view skip : {"CUDACachingAllocator", "c10::cuda::", "CapturedTraceback", "<unwind unsupported>",
                                "execute_native_thread_routine", "start_thread", "clone", "empty", "Allocator",
                                "allocate", "malloc"}) {
    if (contains(name, skip)) return false;
  }
  return name != "??" && !name.empty();
}

}  // namespace

const char* frame_kind_name(FrameKind kind) {
  switch (kind) {
    case FrameKind::User: return "user";
    case FrameKind::ThirdParty: return "third_party";
    case FrameKind::Torch: return "torch";
    case FrameKind::Stdlib: return "stdlib";
    case FrameKind::Native: return "native";
    case FrameKind::Generated: return "generated";
  }
  return "native";
}

FrameKind classify_frame(std::string_view filename, std::string_view name) {
  if (is_native(filename, name)) return FrameKind::Native;
  const std::string p = normalized_path(filename);
  if (p.rfind("<eval_with_key>", 0) == 0 || contains(p, "/torchinductor_")) return FrameKind::Generated;
  const bool packaged = contains(p, "/site-packages/") || contains(p, "/dist-packages/");
  if (is_torch_path(p) && (packaged || !contains(p, "/home/") || contains(p, "/pytorch/torch/"))) return FrameKind::Torch;
  if (packaged) return FrameKind::ThirdParty;
  if (is_stdlib_path(p)) return FrameKind::Stdlib;
  return FrameKind::User;
}

bool is_omitted_frame(std::string_view filename, std::string_view name) {
  static constexpr std::array<std::string_view, 8> kFunctions = {
      "unwind::unwind", "CapturedTraceback::gather", "gather_with_cpp", "_start", "__libc_start_main",
      "PyEval_", "PyObject_", "PyFunction_"};
  static constexpr std::array<std::string_view, 10> kFiles = {
      "core/boxing", "/Register", "/Redispatch", "pythonrun.c", "Modules/main.c", "Objects/call.c",
      "Objects/methodobject.c", "pycore_ceval.h", "ceval.c", "cpython/abstract.h"};
  for (auto f : kFunctions) {
    if (contains(name, f)) return true;
  }
  for (auto f : kFiles) {
    if (contains(filename, f)) return true;
  }
  return false;
}

SiteChoice choose_site(const Snapshot& s, StackId stack) {
  const std::size_t n = s.stack_size(stack);
  const FrameId* frames = s.stack_begin(stack);
  SiteChoice best[4];  // user, third-party, torch, any python
  SiteChoice native, backward_node;
  for (std::size_t i = 0; i < n; ++i) {
    const Frame& f = s.frames[frames[i]];
    const FrameKind kind = classify_frame(s.str(f.filename), s.str(f.name));
    const SiteChoice here{frames[i], kind, i, true};
    const int slot = kind == FrameKind::User ? 0 : kind == FrameKind::ThirdParty ? 1 : kind == FrameKind::Torch ? 2 : kind == FrameKind::Native ? -1 : 3;
    if (slot == 0) return here;
    if (slot > 0 && !best[slot].found) best[slot] = here;
    if (slot < 0 && !backward_node.found && contains(s.str(f.name), "Backward")) backward_node = here;
    if (slot < 0 && !native.found && is_informative_native(s.str(f.filename), s.str(f.name))) native = here;
  }
  for (int slot = 1; slot < 4; ++slot) {
    if (best[slot].found) return best[slot];
  }
  if (backward_node.found) return backward_node;  // e.g. torch::autograd::generated::MmBackward0::apply
  if (native.found) return native;
  if (n > 0) return {frames[0], FrameKind::Native, 0, true};
  return {};
}

}  // namespace memsnap
