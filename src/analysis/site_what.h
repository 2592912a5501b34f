// What a site's memory is, beside where it was allocated: the innermost informative frames
// below the site's line (a library function, an aten op, a backward node; dispatch glue and
// Module.__call__ skipped) and the known-allocator entry the stack matches, and the one
// wording of a site used by the headline, the next steps and the text report.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "analysis/attribution.h"

namespace memsnap {

// Fills site.what, what_frame, what_op and known from `stack`, whose frame at `site_position`
// is the site's.
void describe_what(const Snapshot& snapshot, StackId stack, std::size_t site_position, Site& site);

// A path as an installed package names it ("vllm/worker/cache_engine.py"), else as it is.
std::string_view package_path(std::string_view path);

// A C++ function name without its parameters and autograd's namespaces ("MmBackward0::apply").
std::string short_cxx_name(std::string_view name);

// The site in words: "vLLM KV cache (vllm/worker/cache_engine.py:_allocate_kv_cache) at
// /srv/rollout.py:114 (__init__)", "/home/me/model.py:22 (forward)", or for a C++-only stack
// "MmBackward0::apply (at::native::mm) in C++, no Python line recorded".
std::string site_phrase(const Site& site);

// Every frame of `stack`, innermost first, as "file:line:function".
std::vector<std::string> full_stack(const Snapshot& snapshot, StackId stack);

}  // namespace memsnap
