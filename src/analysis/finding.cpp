// Rendering of the typed conclusions (sentences, fixes, next steps) and the fix catalogue: every
// fix text memsnap can give, by id, in one table.
#include "analysis/finding.h"

#include <array>
#include <fmt/args.h>
#include <fmt/format.h>
#include <limits>

#include "base/format_bytes.h"

namespace memsnap {
namespace {

struct FixText {
  FixId id;
  PatternId pattern;
  std::string_view text;
};

// In FixId order (checked below).
constexpr std::array kFixes = {
    FixText{FixId::ExpandableSegments, PatternId::Fragmentation,
            "set PYTORCH_ALLOC_CONF=expandable_segments:True so segments grow instead of new fixed-size segments being allocated"},
    FixText{FixId::MaxSplitSize, PatternId::Fragmentation,
            "or set PYTORCH_ALLOC_CONF=max_split_size_mb:{} so blocks larger than the failing request are not split"},
    FixText{FixId::FixedShapes, PatternId::Fragmentation, "reduce allocation-size variation (pad batches or sequences to fixed shapes)"},
    FixText{FixId::ExpandableIfLargerFails, PatternId::Fragmentation,
            "if an allocation larger than {} fails, set PYTORCH_ALLOC_CONF=expandable_segments:True"},
    FixText{FixId::EmptyCacheKeepsFragments, PatternId::Fragmentation,
            "torch.cuda.empty_cache() cannot return fragments: only segments with no live block are released"},
    FixText{FixId::ExpandableAlreadyOn, PatternId::Fragmentation,
            "expandable_segments is already on (allocator_settings), so the gaps are between live blocks of one growing segment: free "
            "long-lived tensors in the order they were allocated, or allocate them before the short-lived ones"},
    FixText{FixId::SmallerBatch, PatternId::Capacity, "reduce the batch size or sequence length"},
    FixText{FixId::Checkpointing, PatternId::Capacity, "use activation checkpointing (torch.utils.checkpoint)"},
    FixText{FixId::ShardState, PatternId::Capacity, "shard parameters, gradients and optimizer state (FSDP/ZeRO)"},
    FixText{FixId::LowerPrecision, PatternId::Capacity, "use lower precision (bf16/fp16) where possible"},
    FixText{FixId::RaiseProcessLimit, PatternId::Capacity,
            "the device had {} free: raise or remove this process's limit (torch.cuda.set_per_process_memory_fraction, set to "
            "at least {} of the device's memory for this request), unless the cap is deliberate (a shared GPU), then the fixes below"},
    FixText{FixId::SyncSideStream, PatternId::PendingFrees,
            "synchronize the side stream (or let it finish) before the memory is needed again"},
    FixText{FixId::AvoidRecordStream, PatternId::PendingFrees,
            "avoid tensor.record_stream() on long-lived side-stream work; free tensors after the consuming stream is done"},
    FixText{FixId::CheckNativeBuffers, PatternId::NonPytorchMemory,
            "check NCCL buffers (NCCL_BUFFSIZE, number of communicators), cuBLAS/cuDNN workspaces (CUBLAS_WORKSPACE_CONFIG) and custom "
            "CUDA extensions"},
    FixText{FixId::CompareDeviceMemoryUsed, PatternId::NonPytorchMemory,
            "compare torch.cuda.device_memory_used() with torch.cuda.memory_reserved() around the suspect code"},
    FixText{FixId::OtherProcesses, PatternId::NonPytorchMemory, "look for other processes on the same GPU (nvidia-smi)"},
    FixText{FixId::AccumulateItem, PatternId::RetainedAutogradGraph,
            "at {}: accumulate loss.item() (or loss.detach()) instead of the tensor, e.g. `total += loss.item()`"},
    FixText{FixId::DetachKept, PatternId::RetainedAutogradGraph,
            "detach before logging or keeping: store loss.detach() or loss.item() rather than tensors that carry the graph"},
    FixText{FixId::DetachLossAt, PatternId::RetainedAutogradGraph,
            "detach before logging or keeping: store loss.detach() or loss.item() rather than the tensor computed at {}"},
    FixText{FixId::DetachNotGraph, PatternId::RetainedAutogradGraph,
            "detach before logging or keeping: store loss.detach() or loss.item(), not tensors that carry the graph"},
    FixText{FixId::RetainGraphOrKept, PatternId::RetainedAutogradGraph,
            "look for backward(retain_graph=True) and for outputs or losses kept in lists or on self across steps"},
    FixText{FixId::NoGradForEval, PatternId::RetainedAutogradGraph,
            "no backward ran in this window: if this is evaluation, run it under torch.no_grad() or torch.inference_mode()"},
    FixText{FixId::AppendDetachCpu, PatternId::GrowingContainer,
            "at {}: append tensor.detach().cpu() (or .item() for a scalar) instead of the CUDA tensor"},
    FixText{FixId::BoundContainer, PatternId::GrowingContainer, "or bound the container (collections.deque(maxlen=N)) or clear it every N steps"},
    FixText{FixId::OptimizerNothingToFix, PatternId::OptimizerStateSpike,
            "nothing to fix: optimizer state lives as long as the optimizer; act only if memory is short"},
    FixText{FixId::OptimizerIfShort, PatternId::OptimizerStateSpike,
            "if memory is short: a smaller model or batch, a leaner optimizer (SGD with momentum, Adafactor, 8-bit AdamW), or shard the "
            "optimizer state (ZeRO-1 / FSDP / ZeroRedundancyOptimizer); this is not a leak to hunt"},
    FixText{FixId::DumpAfterFirstStep, PatternId::OptimizerStateSpike,
            "nothing to fix: dump the earlier snapshot after the first optimizer.step() so optimizer state is in both"},
    FixText{FixId::CheckpointModules, PatternId::ActivationPressure,
            "wrap the modules called at {} in torch.utils.checkpoint.checkpoint(module, x, use_reentrant=False): up to {} of activations "
            "need not stay live until backward"},
    FixText{FixId::RecomputeCostOfStep, PatternId::ActivationPressure,
            "recompute cost: one extra forward of the checkpointed modules in backward, at most ~{:.1f} ms per step (~{:.0f}% of the "
            "{:.1f} ms step)"},
    FixText{FixId::RecomputeCostMs, PatternId::ActivationPressure,
            "recompute cost: one extra forward of the checkpointed modules in backward, at most ~{:.1f} ms per step"},
    FixText{FixId::RecomputeCostTypical, PatternId::ActivationPressure,
            "recompute cost: one extra forward of the checkpointed modules in backward (typically +20-35% step time)"},
    FixText{FixId::HfGradientCheckpointing, PatternId::ActivationPressure,
            "for a Hugging Face model, model.gradient_checkpointing_enable() checkpoints each decoder layer"},
    FixText{FixId::SmallerMicroBatch, PatternId::ActivationPressure,
            "or a smaller micro-batch with gradient accumulation, or bf16 autocast to halve activation bytes"},
    FixText{FixId::WarnTensorCycles, PatternId::ReferenceCycles,
            "call `from torch.utils.viz._cycles import warn_tensor_cycles; warn_tensor_cycles()` at start-up: it reports each reference "
            "cycle that keeps a CUDA tensor alive"},
    FixText{FixId::BreakCycle, PatternId::ReferenceCycles,
            "break the cycle that holds the tensors allocated at {} (an object that references itself, a hook or closure capturing "
            "self, a kept exception or traceback), or del the reference at the end of the step"},
    FixText{FixId::GcCollect, PatternId::ReferenceCycles, "as a stopgap, gc.collect() after each step frees them sooner"},
    FixText{FixId::ShardReplicated, PatternId::ReplicatedGradients,
            "shard them with FSDP (torch.distributed.fsdp.fully_shard) or ZeRO (DeepSpeed stage 1-3): each rank then holds about 1/N of "
            "parameters, gradients and optimizer state"},
    FixText{FixId::ZeroOneSaving, PatternId::ReplicatedGradients,
            "ZeRO-1 alone (torch.distributed.optim.ZeroRedundancyOptimizer) saves about {} per rank with {} ranks"},
    FixText{FixId::UseDdpNotDataParallel, PatternId::DeviceImbalance,
            "use DistributedDataParallel (one process per GPU, torchrun) instead of torch.nn.DataParallel: every device then holds one "
            "replica and its own outputs and loss; PyTorch recommends it over DataParallel"},
    FixText{FixId::BalanceStages, PatternId::DeviceImbalance,
            "move layers from the stage on device {} to the lighter stages (or split the microbatches finer) so the stages' peaks even out"},
    FixText{FixId::MoveWorkOffDevice, PatternId::DeviceImbalance,
            "move part of what device {} holds (the sites above) to the lighter devices, or give it a smaller share of the batch"},
    FixText{FixId::ZeroGradBeforeForward, PatternId::StaleGradients,
            "call optimizer.zero_grad(set_to_none=True) at the top of the step, before the forward pass, not between forward and "
            "backward: last step's gradients ({}) are then freed before the activations are allocated"},
    FixText{FixId::InferenceMode, PatternId::ActivationsWithoutBackward,
            "run the forward under `with torch.inference_mode():` (or torch.no_grad()) when no backward follows: autograd then saves "
            "none of the {} of activations"},
    FixText{FixId::DropForwardRefs, PatternId::ForwardTensorsAfterBackward,
            "drop the references to the forward's tensors once backward has run ({} live at the peak, most at {}): `del outputs, "
            "loss`, log loss.item() or tensor.detach().cpu(), and do not keep outputs across steps"},
    FixText{FixId::ForeachOrFused, PatternId::OptimizerStepTemporaries,
            "use the optimizer's fused=True (or foreach=True) implementation, or in-place updates (p.mul_, exp_avg.lerp_, "
            "p.addcdiv_) instead of out-of-place temporaries: {} of them are live at the peak"},
    FixText{FixId::FusedAttention, PatternId::AttentionScores,
            "use torch.nn.functional.scaled_dot_product_attention (FlashAttention / memory-efficient kernels) instead of "
            "materializing the scores at {}: {} of {} need not exist"},
    FixText{FixId::FusedSdpaBackend, PatternId::AttentionScores,
            "the scores at {} come from torch.nn.functional.scaled_dot_product_attention's math path, which materializes them: make "
            "a fused backend eligible (fp16/bf16 inputs, a head_dim it supports, is_causal=True instead of an explicit attn_mask) "
            "and run under `with torch.nn.attention.sdpa_kernel(SDPBackend.FLASH_ATTENTION):` (or EFFICIENT_ATTENTION), which "
            "fails while that backend is not eligible and warns why: {} of {} need not exist"},
    FixText{FixId::FreeTrainingStateForEvaluation, PatternId::TrainingStateInEvaluation,
            "if this process only evaluates (a forward-only benchmark, inference after training), free the training state before "
            "the forward: optimizer.zero_grad(set_to_none=True) frees the {} of gradients and `del optimizer` (or no optimizer and no "
            "warm-up optimizer steps at all) the {} of optimizer state"},
    FixText{FixId::ZeroGradBeforeEvaluation, PatternId::TrainingStateInEvaluation,
            "if training resumes after this evaluation, its optimizer state is needed (expected), but call "
            "optimizer.zero_grad(set_to_none=True) before evaluating all the same: the next backward writes the {} of gradients anew"},
    FixText{FixId::InplaceActivation, PatternId::OutOfPlaceActivation,
            "run {} in place at {}: {}; its input is freed right after it, so the output can take its memory"},
    FixText{FixId::Bf16WeightsForInference, PatternId::AutocastWeightCopies,
            "for inference, cast the model itself (model.to(torch.bfloat16)) and drop autocast: one bf16 set of weights replaces the fp32 "
            "weights and their copies"},
    FixText{FixId::AutocastNoCache, PatternId::AutocastWeightCopies,
            "in training, torch.autocast(device_type=\"cuda\", dtype=torch.bfloat16, cache_enabled=False) casts each weight at use "
            "instead of caching the copies (up to {} less, at the cost of a cast per use)"},
    FixText{FixId::LowerGpuMemoryUtilization, PatternId::KvCache,
            "lower gpu_memory_utilization (vllm.LLM(..., gpu_memory_utilization=0.5); in verl "
            "actor_rollout_ref.rollout.gpu_memory_utilization) when training or other models share the GPU, or free the cache between "
            "rollouts"},
    FixText{FixId::BoundKvCache, PatternId::KvCache,
            "bound the cache: a smaller batch or max_new_tokens, a static or quantized cache (transformers StaticCache / QuantizedCache), "
            "or offload it"},
    FixText{FixId::PrivatePoolsCannotServe, PatternId::Capacity,
            "{} is inactive in private pools ({}) that the default pool cannot use: the allocator gives a private pool's memory "
            "only to the CUDA graph captures or torch.cuda.use_mem_pool() blocks that own it"},
    FixText{FixId::SharePoolBetweenGraphs, PatternId::Capacity,
            "let the graphs share one private pool (capture them with pool=torch.cuda.graph_pool_handle()), or delete graphs that "
            "are no longer replayed so their pools are released"},
    FixText{FixId::CaptureFewerSizes, PatternId::Capacity,
            "capture fewer input sizes: every captured shape keeps its own memory in its graph's pool (pad to a few fixed shapes)"},
    FixText{FixId::ReduceOverheadWhereNeeded, PatternId::Capacity,
            "use torch.compile(mode=\"reduce-overhead\") (CUDA graphs) only on the modules that need it, and mode=\"default\" "
            "elsewhere"},
    FixText{FixId::GraphPoolOom, PatternId::Capacity,
            "the request was made inside private pool {} (a CUDA graph capture or torch.cuda.use_mem_pool()), which can only grow "
            "with new segments: free memory in the default pool (torch.cuda.empty_cache() before capture), capture smaller "
            "shapes, or share one pool between graphs (torch.cuda.graph_pool_handle())"},
    FixText{FixId::FromReport, PatternId::Fragmentation, "{}"},
};

constexpr bool catalogue_in_order() {
  for (std::size_t i = 0; i < kFixes.size(); ++i) {
    if (static_cast<std::size_t>(kFixes[i].id) != i) return false;
  }
  return true;
}
static_assert(catalogue_in_order(), "kFixes must list every FixId once, in FixId order");

std::string render(std::string_view format, const std::vector<Arg>& args) {
  fmt::dynamic_format_arg_store<fmt::format_context> store;
  for (const Arg& a : args) {
    std::visit(
        [&](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, Bytes>) {
            store.push_back(v.text());
          } else {
            store.push_back(v);
          }
        },
        a);
  }
  return fmt::vformat(format, store);
}

}  // namespace

std::string Bytes::text() const {
  if (!sign) return format_bytes(value);
  return std::string(value > 0 ? "+" : value < 0 ? "-" : "") + format_bytes(value < 0 ? -value : value);
}

std::string Sentence::text() const { return render(format, args); }

std::string Fix::text() const { return render(kFixes[static_cast<std::size_t>(id)].text, args); }

std::string NextStep::text() const {
  std::string out = kind == NextStepKind::Fix && fix && pattern ? fmt::format("[{}] {}", name_of(*pattern), fix->text()) : sentence.text();
  if (saving_bytes && peak_bytes) out += fmt::format(" (saves about {} of the {} peak)", format_bytes(*saving_bytes), format_bytes(peak_bytes));
  return out;
}

NextStep fix_step(PatternId pattern, const Fix& f) { return NextStep{NextStepKind::Fix, pattern, f, {}, {}, 0}; }

Sentence verbatim(std::string text) { return Sentence{"{}", {Arg(std::move(text))}}; }

}  // namespace memsnap
