// The known-allocator table. A new framework's allocator is one row here (and, when no frame
// fact shows its frames yet, one row in model/frame_facts.cpp); docs/known-allocators.md lists
// the same rows and test_known_allocators fails when the two differ.
#include "analysis/known_allocators.h"

#include "analysis/attribution.h"

namespace memsnap {
namespace {

constexpr TextPattern kAny{};
constexpr TextPattern has(std::string_view t) { return {TextMatch::Contains, t}; }
constexpr TextPattern ends(std::string_view t) { return {TextMatch::EndsWith, t}; }

constexpr FrameMatch kVllm[] = {{has("vllm/"), kAny}};
constexpr FrameMatch kSglang[] = {{has("sglang/"), kAny}};
constexpr FrameMatch kHfCache[] = {{ends("transformers/cache_utils.py"), kAny}};
constexpr FrameMatch kPastKeyValues[] = {{kAny, has("past_key_value")}};
constexpr FrameMatch kFlexGen[] = {{has("flexgen/"), kAny}};
constexpr FrameMatch kKivi[] = {{has("new_pack.py"), kAny}};
constexpr FrameMatch kAnyFrame[] = {{kAny, kAny}};
constexpr FrameMatch kSdpaMath[] = {{kAny, has("_scaled_dot_product_attention_math")}};
constexpr FrameMatch kBlasWorkspace[] = {{kAny, has("Workspace")}};
constexpr FrameMatch kCudaGraphs[] = {{has("torch/"), kAny}};
constexpr FrameMatch kFsdp[] = {{has("torch/distributed/fsdp/"), kAny}};
constexpr FrameMatch kMegatronGrads[] = {{has("param_and_grad_buffer.py"), kAny}};
constexpr FrameMatch kMegatronOptimizer[] = {{has("distrib_optimizer.py"), kAny}};
constexpr FrameMatch kDdp[] = {{kAny, has("Reducer")}, {has("torch/nn/parallel/distributed.py"), kAny}};
constexpr FrameMatch kNccl[] = {{kAny, has("nccl")}, {kAny, has("NCCL")}};
constexpr FrameMatch kTorchDistributed[] = {{has("torch/distributed/"), kAny}, {kAny, has("c10d::")}};
constexpr FrameMatch kAdam[] = {{ends("torch/optim/adam.py"), kAny}, {ends("torch/optim/adamw.py"), kAny}};
constexpr FrameMatch kSgd[] = {{ends("torch/optim/sgd.py"), kAny}};
constexpr FrameMatch kTorchOptim[] = {{has("torch/optim/"), kAny}};

constexpr std::string_view kKvNote =
    "keys and values of every past token, per layer: 2 x layers x batch x kv_heads x tokens x head_dim x dtype bytes";

constexpr KnownAllocator kTable[] = {
    {"vllm_kv_cache", kKvCacheCode, kVllm, 0, Category::KvCache, "vLLM KV cache",
     "vLLM allocates the KV cache once at start-up, sized to fill gpu_memory_utilization of the device after the "
     "weights and a profiling run; it is meant to take most of the memory and is not a leak",
     "gpu_memory_utilization (also max_model_len, max_num_seqs)", "/usr/lib/python3.10/site-packages/vllm/worker/cache_engine.py",
     "_allocate_kv_cache"},
    {"sglang_kv_cache", kKvCacheCode, kSglang, 0, Category::KvCache, "SGLang KV cache pool",
     "SGLang pre-allocates its token-to-KV pool from mem_fraction_static of the device; it is meant to stay",
     "mem_fraction_static (also max_total_tokens)", "/usr/lib/python3.10/site-packages/sglang/srt/mem_cache/memory_pool.py",
     "_create_buffers"},
    {"hf_kv_cache", kKvCacheCode, kHfCache, 0, Category::KvCache, "Hugging Face KV cache (DynamicCache)", kKvNote,
     "a StaticCache (cache_implementation=\"static\") or a quantized cache; fewer max_new_tokens or a smaller batch",
     "/usr/lib/python3.10/site-packages/transformers/cache_utils.py", "update"},
    {"flexgen_kv_cache", kKvCacheCode, kFlexGen, 0, Category::KvCache, "FlexGen KV cache",
     "FlexGen allocates each GPU batch's keys and values for the whole prompt + generated length up front (fp16, "
     "(prompt_len + gen_len - 1) x gpu_batch_size x heads x head_dim per layer); the share of the cache on the GPU is "
     "cache_gpu_percent of --percent, the rest is on the CPU or disk",
     "--percent (the cache's GPU share), --compress-cache (4-bit groups), --gpu-batch-size / --num-gpu-batches",
     "/usr/lib/python3.10/site-packages/flexgen/pytorch_backend.py", "init_cache_one_gpu_batch"},
    {"kivi_kv_cache", kKvCacheCode, kKivi, 0, Category::KvCache, "KIVI quantized KV cache",
     "KIVI keeps the keys quantized per channel and the values per token (2 or 4 bits packed into int32, with an fp16 "
     "scale and minimum per group) and the newest residual_length tokens in full precision: about 1/8 of an fp16 "
     "cache at 2 bits, plus the residual",
     "k_bits / v_bits, group_size, residual_length", "/home/user/KIVI/quant/new_pack.py", "triton_quantize_and_pack_along_last_dim"},
    {"past_key_values", kKvCacheCode, kPastKeyValues, 0, Category::KvCache, "past_key_values (KV cache)", kKvNote,
     "use_cache=False when no generation follows; fewer generated tokens", "/home/user/project/model.py",
     "_update_past_key_values"},
    {"autocast_cast_cache", kAutocastCast, kAnyFrame, 0, Category::AutocastCopy, "autocast weight copies",
     "under torch.autocast every fp32 weight a matmul uses is cast to fp16/bf16 and, with cache_enabled=True, kept until "
     "the autocast region exits: a second, half-size copy of the weights (activations' casts are temporaries)",
     "torch.autocast(..., cache_enabled=False), or bf16 parameters for inference (model.to(torch.bfloat16))", "??",
     "at::autocast::cached_cast(c10::ScalarType, at::Tensor const&, c10::DeviceType)"},
    {"sdpa_math", kAttentionMath, kSdpaMath, 0, Category::Activation, "SDPA math path (materialised attention scores)",
     "F.scaled_dot_product_attention fell back to its math path: the batch x heads x seq x seq scores and their softmax "
     "are materialised (and saved for backward)",
     "a fused SDPA backend (flash or memory-efficient: fp16/bf16 inputs, a supported head_dim and mask), or FlashAttention",
     "??", "at::native::_scaled_dot_product_attention_math(at::Tensor const&, at::Tensor const&, at::Tensor const&)"},
    {"softmax_scores", kAttentionMath, kAnyFrame, kAttentionCode, Category::Activation,
     "materialised softmax attention scores",
     "attention written as softmax(q @ k^T) keeps a batch x heads x seq x seq matrix per layer, saved for backward",
     "F.scaled_dot_product_attention with a fused backend, or FlashAttention (timm: fused_attn=True)",
     "/usr/lib/python3.10/site-packages/torch/nn/functional.py", "softmax"},
    {"cublas_workspace", kWorkspaceCode, kBlasWorkspace, 0, Category::Workspace, "cuBLAS workspace",
     "cuBLAS/cuBLASLt keep one workspace per handle and stream (a few MiB, 32 MiB on Hopper), allocated on first use "
     "and kept for the process",
     "CUBLAS_WORKSPACE_CONFIG (e.g. :4096:8), CUBLASLT_WORKSPACE_SIZE, fewer streams", "??", "at::cuda::getNewWorkspace()"},
    {"cuda_graph_pool", kWorkspaceCode, kCudaGraphs, 0, Category::Workspace, "CUDA graph / Inductor cudagraph pool",
     "a captured CUDA graph keeps its private memory pool (inputs, outputs and intermediates of the graph) while the "
     "graph lives; torch.compile's cudagraph trees keep one per captured shape",
     "fewer captured shapes (dynamic=False, padding), or mode=\"max-autotune-no-cudagraphs\"",
     "/usr/lib/python3.10/site-packages/torch/_inductor/cudagraph_trees.py", "record_function"},
    {"fsdp_flat_param", kFrameworkBuffer, kFsdp, 0, Category::Parameter, "FSDP flat parameters",
     "FSDP keeps each rank's shard of the flat parameters and, while a unit runs, its unsharded (all-gathered) flat "
     "parameter",
     "reshard_after_forward / FULL_SHARD, smaller units (auto_wrap_policy), limit_all_gathers=True",
     "/usr/lib/python3.10/site-packages/torch/distributed/fsdp/_flat_param.py", "_alloc_padded_unsharded_flat_param"},
    {"flexgen_weights", kFrameworkBuffer, kFlexGen, 0, Category::Parameter, "FlexGen weights (GPU share and streamed layers)",
     "FlexGen places every weight on the GPU, the CPU or disk by w_gpu_percent / w_cpu_percent of --percent "
     "(init_weight_list) and copies an offloaded layer's weights to the GPU while it runs (load_weight), so beside the "
     "resident share the weights of the layers in flight are on the GPU",
     "--percent (the weights' GPU share), --compress-weight (4-bit groups), --pin-weight, --overlap",
     "/usr/lib/python3.10/site-packages/flexgen/flex_opt.py", "init_weight_list"},
    {"megatron_grad_buffer", kFrameworkBuffer, kMegatronGrads, 0, Category::Gradient, "Megatron param-and-grad buffer",
     "Megatron's DDP puts all gradients in one contiguous buffer (fp32 unless grad_reduce_in_fp32 is off) and, with the "
     "distributed optimizer, the parameters in another; the buckets of these buffers are the all-reduce / "
     "reduce-scatter communication buffers, so they count as gradients here",
     "bf16 gradient reduction (grad_reduce_in_fp32=False), the distributed optimizer, bucket_size",
     "/usr/lib/python3.10/site-packages/megatron/core/distributed/param_and_grad_buffer.py", "__init__"},
    {"megatron_main_params", kFrameworkBuffer, kMegatronOptimizer, 0, Category::OptimizerState,
     "Megatron distributed optimizer (fp32 main params)",
     "the distributed optimizer keeps fp32 master copies of its shard of the parameters (4 bytes per parameter over "
     "the data-parallel size), beside the Adam moments",
     "a larger data-parallel size; a precision-aware optimizer (bf16 main params)",
     "/usr/lib/python3.10/site-packages/megatron/core/optimizer/distrib_optimizer.py", "_build_model_and_main_param_groups"},
    {"ddp_reducer_buckets", kCommunication, kDdp, 0, Category::Communication, "DDP reducer buckets",
     "DistributedDataParallel copies the gradients into buckets for the all-reduce: about one more copy of the "
     "gradients unless the gradients are views of the buckets",
     "gradient_as_bucket_view=True, bucket_cap_mb", "??", "c10d::Reducer::initialize_buckets"},
    {"nccl_buffers", kCommunication, kNccl, 0, Category::Communication, "NCCL communication buffers",
     "NCCL and ProcessGroupNCCL allocate buffers and scratch for collectives, per communicator",
     "fewer process groups; NCCL_BUFFSIZE; TORCH_NCCL_AVOID_RECORD_STREAMS=1", "??", "c10d::ProcessGroupNCCL::allreduce"},
    {"torch_distributed", kCommunication, kTorchDistributed, 0, Category::Communication,
     "torch.distributed collective buffers", "outputs and staging tensors of collectives (all_gather, reduce_scatter)",
     "chunk the collective, or free its output sooner",
     "/usr/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py", "all_gather_into_tensor"},
    {"adam_moments", kOptimizerCode, kAdam, 0, Category::OptimizerState, "Adam/AdamW moments (exp_avg, exp_avg_sq)",
     "two fp32 moments per parameter (8 bytes per fp32 parameter), created by the first optimizer.step() and kept",
     "a fused or 8-bit optimizer (bitsandbytes AdamW8bit), ZeRO / FSDP sharding of the state, or Adafactor",
     "/usr/lib/python3.10/site-packages/torch/optim/adam.py", "_init_group"},
    {"sgd_momentum", kOptimizerCode, kSgd, 0, Category::OptimizerState, "SGD momentum buffers",
     "one momentum buffer per parameter, created by the first optimizer.step() and kept", "momentum=0 (no buffers)",
     "/usr/lib/python3.10/site-packages/torch/optim/sgd.py", "_init_group"},
    {"torch_optimizer_state", kOptimizerCode, kTorchOptim, 0, Category::OptimizerState, "torch.optim state",
     "the optimizer's per-parameter state, created by the first optimizer.step() and kept",
     "a lighter optimizer, or sharding the state (ZeroRedundancyOptimizer, FSDP)",
     "/usr/lib/python3.10/site-packages/torch/optim/rmsprop.py", "_init_group"},
    {"fused_optimizer_state", kOtherOptimizer, kAnyFrame, 0, Category::OptimizerState,
     "fused / 8-bit optimizer state (apex, bitsandbytes)", "the optimizer's per-parameter state, kept across steps",
     "8-bit state (bitsandbytes), or sharding the state", "/usr/lib/python3.10/site-packages/apex/optimizers/fused_adam.py",
     "step"},
};

bool frame_matches(std::span<const FrameMatch> frames, std::string_view file, std::string_view name) {
  for (const FrameMatch& m : frames) {
    if (matches(m.file, file) && matches(m.name, name)) return true;
  }
  return false;
}

}  // namespace

std::span<const KnownAllocator> known_allocators() { return kTable; }

const KnownAllocator* find_known_allocator(std::string_view id) {
  for (const KnownAllocator& k : kTable) {
    if (k.id == id) return &k;
  }
  return nullptr;
}

KnownMatch match_known_allocator(const Snapshot& s, StackId stack, FrameFacts stack_facts) {
  const FrameId* frames = s.stack_begin(stack);
  const std::size_t n = s.stack_size(stack);
  for (const KnownAllocator& k : kTable) {
    if (!(stack_facts & k.fact) || (stack_facts & k.with) != k.with) continue;
    for (std::size_t i = 0; i < n; ++i) {
      const Frame& f = s.frames[frames[i]];
      if ((f.facts & k.fact) && frame_matches(k.frames, s.str(f.filename), s.str(f.name))) return {&k, i};
    }
  }
  return {};
}

bool cublas_workspace_by_size(const Snapshot& snapshot, StackId stack, std::uint64_t requested) {
  if (requested != kDefaultCublasWorkspaceBytes || stack == kNoStack || snapshot.stack_size(stack) == 0) return false;
  const FrameId* frames = snapshot.stack_begin(stack);
  for (std::size_t i = 0; i < snapshot.stack_size(stack); ++i) {
    if (snapshot.frames[frames[i]].facts & kNativeFile) return false;
  }
  return true;
}

}  // namespace memsnap
