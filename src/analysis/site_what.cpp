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
  const auto paren = name.find('(');
  if (paren != std::string::npos && paren > 0 && !name.substr(0, paren).ends_with("operator")) name.resize(paren);
  for (std::string_view prefix : {"torch::autograd::generated::", "torch::autograd::"}) {
    if (const auto at = name.find(prefix); at != std::string::npos) return name.substr(at + prefix.size());
  }
  return name;
}

void describe_what(const Snapshot& s, StackId stack, std::size_t site_position, Site& site) {
  site.what.clear();
  site.what_frame.clear();
  site.what_op.clear();
  const FrameId* frames = s.stack_begin(stack);
  for (std::size_t i = 0; i < site_position && i < s.stack_size(stack); ++i) {
    const Frame& f = s.frames[frames[i]];
    if (site.what_op.empty() && is_informative_op(f.facts)) site.what_op = short_cxx_name(s.str(f.name));
    if (site.what_frame.empty() && is_library_frame(f.facts)) {
      site.what_frame = format_frame(s, frames[i]);
      std::string file(s.str(f.filename));
      std::replace(file.begin(), file.end(), '\\', '/');
      site.what = fmt::format("{}:{}", package_path(file), s.str(f.name));
    }
  }
  if (site.what.empty()) site.what = site.what_op;
  // The entry names the memory only where it decides the kind (inside every forward and backward call).
  const StackSignals signals = stack_signals(s, stack);
  site.known = category_rule(signals).from_known_allocator ? signals.known.entry : nullptr;
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
