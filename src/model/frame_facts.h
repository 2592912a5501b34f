// What a stack frame's file path and function name show (a C++ source, an installed package,
// PyTorch's own code, an optimizer, a forward call, ...), as bits. The patterns are one table
// (frame_facts.cpp); the builder evaluates it once per interned frame, and the frame rules of the
// analysis (analysis/frame_filter: which frame is the user's; analysis/attribution: the memory's
// category) decide on the bits alone.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace memsnap {

using FrameFacts = std::uint32_t;

// One bit per fact. Kind facts: what sort of code the frame is.
inline constexpr FrameFacts kNativeFile = 1u << 0;       // C/C++/CUDA source, shared object, or no file
inline constexpr FrameFacts kPythonFile = 1u << 1;       // a .py file or <frozen ...>/<string>
inline constexpr FrameFacts kCxxName = 1u << 2;          // a qualified C++ name (at::native::mm)
inline constexpr FrameFacts kGeneratedCode = 1u << 3;    // torch.fx / Inductor generated code
inline constexpr FrameFacts kTorchPath = 1u << 4;        // a torch/ or functorch/ folder
inline constexpr FrameFacts kInstalledPackage = 1u << 5; // site-packages, dist-packages
inline constexpr FrameFacts kHomeDir = 1u << 6;          // under /home/
inline constexpr FrameFacts kPytorchCheckout = 1u << 7;  // a PyTorch source checkout (pytorch/torch/)
inline constexpr FrameFacts kStdlibPath = 1u << 8;       // the Python standard library
// Site-choice facts: native frames never worth naming, and autograd nodes.
inline constexpr FrameFacts kOmitted = 1u << 9;          // unwinder, interpreter, dispatcher plumbing
inline constexpr FrameFacts kUninformative = 1u << 10;   // allocator, thread start-up, factories, unnamed
inline constexpr FrameFacts kBackwardNode = 1u << 11;    // an autograd node (MmBackward0::apply)
// Category facts: what the code on the stack is doing.
inline constexpr FrameFacts kOptimizerCode = 1u << 12;   // torch/optim/
inline constexpr FrameFacts kCommunication = 1u << 13;   // torch.distributed, c10d, NCCL
inline constexpr FrameFacts kBackwardCall = 1u << 14;    // tensor.backward() / autograd.grad()
inline constexpr FrameFacts kAutogradEngine = 1u << 15;  // the C++ autograd engine
inline constexpr FrameFacts kParameterInit = 1u << 16;   // creating, loading or moving parameters
inline constexpr FrameFacts kForwardCall = 1u << 17;     // a module's forward / __call__
inline constexpr FrameFacts kFunctionalOp = 1u << 26;    // torch.nn.functional (F.relu, F.interpolate)
// Device facts: code that spreads one model over the devices of one process.
inline constexpr FrameFacts kDataParallel = 1u << 28;    // torch.nn.DataParallel (replicate, scatter, parallel_apply, gather)
inline constexpr FrameFacts kPipelineStages = 1u << 29;  // torch.distributed.pipelining / Pipe
// Known-allocator facts: code known to allocate one kind of memory (analysis/known_allocators.cpp
// names the entry from the frame's text, read only on frames with the fact).
inline constexpr FrameFacts kKvCacheCode = 1u << 18;     // vLLM / SGLang / Hugging Face KV caches
inline constexpr FrameFacts kAutocastCast = 1u << 19;    // autocast's cast cache (at::autocast::cached_cast)
inline constexpr FrameFacts kAttentionMath = 1u << 20;   // unfused attention: SDPA's math path, softmax of scores
inline constexpr FrameFacts kAttentionCode = 1u << 21;   // an attention module or function
inline constexpr FrameFacts kWorkspaceCode = 1u << 22;   // cuBLAS / cuBLASLt workspaces, CUDA graph pools
inline constexpr FrameFacts kFrameworkBuffer = 1u << 23; // Megatron buffers and optimizer, FSDP flat parameters
inline constexpr FrameFacts kOtherOptimizer = 1u << 24;  // optimizers outside torch.optim (apex, bitsandbytes)
// "What" facts: frames below the user's line that say nothing about what the memory is.
inline constexpr FrameFacts kBoilerplate = 1u << 25;     // dispatch glue (c10::impl, at::_ops), Module.__call__

enum class TextMatch : std::uint8_t { Any, Equals, StartsWith, EndsWith, Contains };

struct TextPattern {
  TextMatch match = TextMatch::Any;  // Any: this part of the rule is not checked
  std::string_view text;
};

// A frame has `fact` when its file (backslashes read as '/') and its function name both match.
struct FactRule {
  TextPattern file;
  TextPattern name;
  FrameFacts fact;
  std::string_view reason;
};

// The table, in the order it is read (the order does not change the result: facts are OR-ed).
std::span<const FactRule> frame_fact_rules();

bool matches(const TextPattern& pattern, std::string_view text);
bool matches(const FactRule& rule, std::string_view file, std::string_view name);

// The facts of a frame; only the rows whose fact is in `wanted` are read (tests pass other `rules`).
FrameFacts frame_facts(std::string_view filename, std::string_view name, FrameFacts wanted = ~FrameFacts(0),
                       std::span<const FactRule> rules = frame_fact_rules());

}  // namespace memsnap
