// The "what" of a site: frames below the user's line, chosen by their facts, and the wording.
#include "analysis/site_what.h"

#include <algorithm>
#include <fmt/format.h>

namespace memsnap {
namespace {

constexpr FrameFacts kNotInformative = kOmitted | kUninformative | kBoilerplate;

bool is_library_frame(FrameFacts facts) {
  return frame_kind(facts) != FrameKind::Native && !(facts & kBoilerplate);
}

bool is_informative_op(FrameFacts facts) {
  return frame_kind(facts) == FrameKind::Native && (facts & kCxxName) && !(facts & kNotInformative);
}

// C++ plumbing that runs inside many ops and names none of them (short_cxx_name()s): the
// TensorIterator set-up that allocates an elementwise op's output, structured kernels' shape
// checks, storage resizing, backward formulas' helpers (their node, MmBackward0::apply, names the
// op), c10 and the standard library. Kernels' helpers in at::native's anonymous namespace are not
// plumbing: in the corpus they are the ops' implementations (addmm_out_cuda_impl,
// index_put_with_sort_kernel, reflection_pad2d_out_template).
constexpr std::string_view kPlumbing[] = {
    "at::TensorIteratorBase::", "at::TensorIterator::", "at::TensorIteratorConfig::", "at::meta::", "at::native::resize_",
    "at::native::_resize_output", "at::detail::", "details::", "c10::", "std::", "__gnu_cxx::",
};

bool is_plumbing(std::string_view name) {
  return std::any_of(std::begin(kPlumbing), std::end(kPlumbing), [&](std::string_view p) { return name.starts_with(p); });
}

// "at::_ops::mul_Tensor::redispatch" -> "at::_ops::mul_Tensor": the aten op a dispatch stub calls,
// the what of an op whose own frames are all plumbing (an elementwise op: TensorIterator and a
// generated wrapper only). "" for other names, and for the allocation factories an op calls
// (empty, empty_strided, empty_like: clone's output is clone's memory).
std::string aten_op(std::string_view name) {
  constexpr std::string_view kOps = "at::_ops::";
  if (!name.starts_with(kOps)) return "";
  const auto end = name.find("::", kOps.size());
  const std::string_view op = name.substr(kOps.size(), end == std::string_view::npos ? std::string_view::npos : end - kOps.size());
  if (op.find("empty") != std::string_view::npos) return "";
  return std::string(name.substr(0, end));
}

// The name without a leading return type: "void at::meta::f<T>" -> "at::meta::f<T>" (the last
// space outside template brackets).
std::string_view without_return_type(std::string_view name) {
  int depth = 0;
  std::size_t cut = std::string_view::npos;
  for (std::size_t i = 0; i < name.size(); ++i) {
    if (name[i] == '<') ++depth;
    else if (name[i] == '>') --depth;
    else if (name[i] == ' ' && depth == 0) cut = i;
  }
  if (cut == std::string_view::npos || name.substr(0, cut).ends_with("operator")) return name;
  return name.substr(cut + 1);
}

}  // namespace

std::string_view package_path(std::string_view path) {
  if (const auto at = path.find("/torchinductor_"); at != std::string_view::npos) return path.substr(path.rfind('/') + 1);
  for (std::string_view marker : {"site-packages/", "dist-packages/", "/pytorch/torch/"}) {
    if (const auto at = path.find(marker); at != std::string_view::npos) {
      return marker == "/pytorch/torch/" ? path.substr(at + 9) : path.substr(at + marker.size());
    }
  }
  return path;
}

std::string short_cxx_name(std::string_view full) {
  std::string name(full);
  for (std::size_t at; (at = name.find("(anonymous namespace)::")) != std::string::npos;) name.erase(at, 23);
  for (std::size_t at; (at = name.find("{anonymous}::")) != std::string::npos;) name.erase(at, 13);
  const auto paren = name.find('(');
  if (paren != std::string::npos && paren > 0 && !name.substr(0, paren).ends_with("operator")) name.resize(paren);
  name = std::string(without_return_type(name));
  for (std::string_view prefix : {"torch::autograd::generated::", "torch::autograd::"}) {
    if (const auto at = name.find(prefix); at != std::string::npos) return name.substr(at + prefix.size());
  }
  return name;
}

namespace {

// Inductor's output code lives in a file named by a 52-character hash under the
// torchinductor_<user> cache: say what it is, with the hash shortened ("" for other frames).
std::string generated_code_what(std::string_view file, std::string_view function, FrameFacts facts) {
  if (!(facts & kGeneratedCode) || file.find("/torchinductor_") == std::string_view::npos) return "";
  const std::size_t slash = file.find_last_of('/');
  const std::string_view base = slash == std::string_view::npos ? file : file.substr(slash + 1);
  return fmt::format("torch.compile (Inductor) output code {}{}:{}", base.substr(0, 8), base.size() > 11 ? "..." : "", function);
}

}  // namespace

void describe_what(const Snapshot& s, StackId stack, std::size_t site_position, Site& site) {
  site.what.clear();
  site.what_frame.clear();
  site.what_op.clear();
  // The entry names the memory only where it decides the kind (inside every forward and backward call).
  const StackSignals signals = stack_signals(s, stack);
  site.known = category_rule(signals).from_known_allocator ? signals.known.entry : nullptr;
  // The entry's own Python frame below the site is the what (FlexGen's init_cache_one_gpu_batch,
  // not the allocate() it calls); else the innermost library frame.
  const std::size_t known_at = site.known ? signals.known.position : StackSignals::kNever;
  const FrameId* frames = s.stack_begin(stack);
  std::string stub_op;  // the innermost at::_ops:: stub's op, when no frame names the op
  for (std::size_t i = 0; i < site_position && i < s.stack_size(stack); ++i) {
    const Frame& f = s.frames[frames[i]];
    if (site.what_op.empty() && frame_kind(f.facts) == FrameKind::Native && (f.facts & kCxxName)) {
      const std::string name = short_cxx_name(s.str(f.name));
      if (stub_op.empty()) stub_op = aten_op(name);
      if (is_informative_op(f.facts) && !is_plumbing(name)) site.what_op = name;
    }
    if ((site.what_frame.empty() || i == known_at) && is_library_frame(f.facts)) {
      site.what_frame = format_frame(s, frames[i]);
      std::string file(s.str(f.filename));
      std::replace(file.begin(), file.end(), '\\', '/');
      site.what = generated_code_what(file, s.str(f.name), f.facts);
      if (site.what.empty()) site.what = fmt::format("{}:{}", package_path(file), s.str(f.name));
    }
  }
  if (site.what_op.empty()) site.what_op = stub_op;
  if (site.what.empty()) site.what = site.what_op;
}

std::string site_phrase(const Site& site) {
  if (site.no_stack) return site.site;
  const std::string& what = site.what;
  std::string label = site.known ? std::string(site.known->name) : "";
  if (!what.empty()) label = label.empty() ? what : fmt::format("{} ({})", label, what);
  if (site.kind == FrameKind::Native) {
    const std::string fn = short_cxx_name(site.function);
    return fmt::format("{}{} in C++, no Python line recorded", site.known ? std::string(site.known->name) + ": " : "",
                       what.empty() ? fn : fmt::format("{} ({})", fn, what));
  }
  const std::string where = fmt::format("{} ({})", site.site, site.function);
  return label.empty() ? where : fmt::format("{} at {}", label, where);
}

std::vector<std::string> full_stack(const Snapshot& s, StackId stack) {
  std::vector<std::string> out;
  const FrameId* frames = s.stack_begin(stack);
  for (std::size_t i = 0; i < s.stack_size(stack); ++i) out.push_back(format_frame(s, frames[i]));
  return out;
}

}  // namespace memsnap
