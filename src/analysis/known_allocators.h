// Known allocators as data: code whose allocations an expert names at sight (vLLM's KV cache,
// autocast's cast cache, DDP's buckets, Megatron's buffers, optimizer moments, ...). One table
// (known_allocators.cpp): each entry is recognised by a frame fact (model/frame_facts.cpp) and
// the frame's text, and gives the memory's kind, a plain name, the expert's note and the knob
// that changes it. docs/known-allocators.md is this table (test_known_allocators checks it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "model/frame_facts.h"
#include "model/snapshot.h"

namespace memsnap {

enum class Category;

// One way an entry's frame looks: its file and function name (both must match).
struct FrameMatch {
  TextPattern file;
  TextPattern name;
};

struct KnownAllocator {
  std::string_view id;                 // stable, for JSON and the docs ("vllm_kv_cache")
  FrameFacts fact;                     // the entry's frame has this fact ...
  std::span<const FrameMatch> frames;  // ... and matches one of these
  FrameFacts with;                     // facts some frame of the stack must also have (0: none)
  Category kind;
  std::string_view name;               // "vLLM KV cache"
  std::string_view note;               // what an expert says about it
  std::string_view knob;               // what changes it
  std::string_view example_file;       // a frame the entry matches (docs and tests)
  std::string_view example_function;
};

// The table, most specific first: the first entry that matches a stack is its entry.
std::span<const KnownAllocator> known_allocators();
const KnownAllocator* find_known_allocator(std::string_view id);

struct KnownMatch {
  const KnownAllocator* entry = nullptr;
  std::size_t position = 0;  // the innermost matching frame (0 = innermost)
};

// cuBLAS's default workspace on GPUs before Hopper (CUBLAS_WORKSPACE_CONFIG ":4096:2:16:8": two
// 4 MiB chunks and eight 16 KiB ones). Hopper's default, 32 MiB, is too common a size to tell.
inline constexpr std::uint64_t kDefaultCublasWorkspaceBytes = 2 * 4096 * 1024 + 8 * 16 * 1024;
// The size as the reports write it.
inline constexpr std::string_view kDefaultCublasWorkspaceText = "8,519,680 bytes";
static_assert(kDefaultCublasWorkspaceBytes == 8'519'680, "kDefaultCublasWorkspaceText says 8,519,680");

// A block of exactly that size whose stack has no C++ frame (recorded with stacks="python", or a
// block of the final state without them): cuBLAS's workspace, which at::cuda::getNewWorkspace's
// frame would name if the stack had C++ frames.
bool cublas_workspace_by_size(const Snapshot& snapshot, StackId stack, std::uint64_t requested);

// The entry of `stack`, given the OR of its frames' facts (the text is read only on frames with
// an entry's fact).
KnownMatch match_known_allocator(const Snapshot& snapshot, StackId stack, FrameFacts stack_facts);

}  // namespace memsnap
