// The frame rules, table-driven: frames and stacks of the shapes real snapshots hold (C++ frames,
// ??:0, torch/_dynamo, vllm, deepspeed, accelerate, lightning, transformers) with the kind, site
// and category each must get, and checks that every row of the three tables is needed: each kind
// and category row decides some case, and dropping any pattern row changes some expected outcome.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "analysis/attribution.h"
#include "analysis/frame_filter.h"
#include "analysis/site_what.h"
#include "test_support.h"

namespace memsnap {
namespace frame_rules_tests {

constexpr std::string_view kPkgs = "/opt/conda/lib/python3.11/site-packages/";

struct FrameText {
  std::string file;
  std::string name;
};

std::string pkg(std::string_view rest) { return std::string(kPkgs) + std::string(rest); }

struct FrameCase {
  FrameText frame;
  FrameKind kind;
  bool omitted = false;
  FrameFacts facts = 0;  // facts the frame must have (the device facts decide no kind or category)
};

const std::vector<FrameCase>& frame_cases() {
  static const std::vector<FrameCase> cases = {
      // native: C/C++/CUDA sources, shared objects, no file
      {{"??", "??"}, FrameKind::Native},
      {{"", "cudaMalloc"}, FrameKind::Native},
      {{"aten/src/ATen/native/cuda/Blas.cpp", "addmm_out_cuda_impl"}, FrameKind::Native},
      {{"third_party/gloo/gloo/allreduce.cc", "allreduce_ring"}, FrameKind::Native},
      {{"src/kernels.cxx", "launch"}, FrameKind::Native},
      {{"c10/util/intrusive_ptr.h", "reset_"}, FrameKind::Native},
      {{"include/cutlass/gemm.hpp", "operator()"}, FrameKind::Native},
      {{"aten/src/ATen/native/cuda/Indexing.cu", "index_put_kernel"}, FrameKind::Native},
      {{"aten/src/ATen/native/cuda/Loops.cuh", "gpu_kernel"}, FrameKind::Native},
      {{"sysdeps/unix/sysv/linux/x86_64/clone3.S", "__clone3"}, FrameKind::Native},
      {{"build/ops.o", "run_op"}, FrameKind::Native},
      {{"/lib/x86_64-linux-gnu/libc.so.6", "__libc_start_main"}, FrameKind::Native, true},
      {{"/usr/include/c++/12/thread", "std::thread::_State_impl::_M_run"}, FrameKind::Native},
      // a Python file or <...> stays Python even with a C++-looking (TorchScript) name
      {{"/home/me/scripted.py", "__torch__::Net::forward"}, FrameKind::User},
      {{"<string>", "torch::jit::run"}, FrameKind::Stdlib},
      // generated code
      {{"<eval_with_key>.12", "forward"}, FrameKind::Generated},
      {{"/tmp/torchinductor_alice/xy/cxyz.py", "call"}, FrameKind::Generated},
      {{"/tmp/tmpk2j1/fx_graph_module_7f3a.py", "forward"}, FrameKind::Generated},
      {{"fx_generated_0a1b.py", "forward"}, FrameKind::Generated},
      // PyTorch: installed, checked out, relative, functorch; a torch/ folder in a home directory is the user's
      {{pkg("torch/nn/modules/linear.py"), "forward"}, FrameKind::Torch},
      {{"/home/u/.venv/lib/python3.11/site-packages/torch/nn/functional.py", "linear"}, FrameKind::Torch},
      {{"/home/u/env/lib/python3.10/dist-packages/torch/autograd/__init__.py", "backward"}, FrameKind::Torch},
      {{"torch/_dynamo/eval_frame.py", "_fn"}, FrameKind::Torch},
      {{"/usr/local/lib/python3.10/torch/_dynamo/convert_frame.py", "_compile"}, FrameKind::Torch},
      {{pkg("functorch/_src/aot_autograd.py"), "aot_function"}, FrameKind::Torch},
      {{"/home/me/pytorch/torch/_tensor.py", "backward"}, FrameKind::Torch},
      {{"/home/me/proj/torch/utils.py", "helper"}, FrameKind::User},
      {{"C:\\Users\\me\\venv\\Lib\\site-packages\\torch\\nn\\modules\\module.py", "_call_impl"}, FrameKind::Torch},
      // other installed packages
      {{pkg("transformers/models/llama/modeling_llama.py"), "forward"}, FrameKind::ThirdParty},
      {{"/usr/lib/python3/dist-packages/accelerate/accelerator.py", "backward"}, FrameKind::ThirdParty},
      {{"/usr/local/lib/python3.12/dist-packages/vllm/worker/model_runner.py", "execute_model"}, FrameKind::ThirdParty},
      {{pkg("deepspeed/runtime/zero/stage3.py"), "step"}, FrameKind::ThirdParty},
      {{pkg("lightning/pytorch/loops/optimization/automatic.py"), "run"}, FrameKind::ThirdParty},
      // the standard library and the interpreter
      {{"/usr/lib/python3.10/threading.py", "run"}, FrameKind::Stdlib},
      {{"/usr/lib/python2.7/runpy.py", "_run_code"}, FrameKind::Stdlib},
      {{"/usr/lib64/python3.9/runpy.py", "_run_module_as_main"}, FrameKind::Stdlib},
      {{"C:\\Python311\\Lib\\runpy.py", "_run_code"}, FrameKind::Stdlib},
      {{"<frozen runpy>", "_run_module_as_main"}, FrameKind::Stdlib},
      // the user's code
      {{"/home/me/train.py", "main"}, FrameKind::User},
      {{"train.py", "<module>"}, FrameKind::User},
      {{"/workspace/model.py", "forward"}, FrameKind::User},
      // frames PyTorch's tools omit
      {{"??", "torch::unwind::unwind()"}, FrameKind::Native, true},
      {{"??", "torch::CapturedTraceback::gather(bool, bool, bool)"}, FrameKind::Native, true},
      {{"??", "torch::gather_with_cpp()"}, FrameKind::Native, true},
      {{"??", "PyEval_EvalCode"}, FrameKind::Native, true},
      {{"??", "PyObject_Call"}, FrameKind::Native, true},
      {{"??", "_PyFunction_Vectorcall"}, FrameKind::Native, true},
      {{"aten/src/ATen/core/boxing/impl/boxing.h", "call"}, FrameKind::Native, true},
      {{"build/aten/src/ATen/RegisterCUDA.cpp", "wrapper_CUDA_mm"}, FrameKind::Native, true},
      {{"build/aten/src/ATen/RedispatchFunctions.h", "mm"}, FrameKind::Native, true},
      {{"Python/pythonrun.c", "run_mod"}, FrameKind::Native, true},
      {{"Modules/main.c", "pymain_run_python"}, FrameKind::Native, true},
      {{"Objects/call.c", "object_vacall"}, FrameKind::Native, true},
      {{"Objects/methodobject.c", "cfunction_call"}, FrameKind::Native, true},
      {{"Include/internal/pycore_ceval.h", "eval_frame_inline"}, FrameKind::Native, true},
      {{"Python/ceval.c", "main_loop"}, FrameKind::Native, true},
      {{"Include/cpython/abstract.h", "vectorcall_tstate"}, FrameKind::Native, true},
      // code that spreads one model over the devices of one process (the device_imbalance pattern)
      {{pkg("torch/nn/parallel/data_parallel.py"), "forward"}, FrameKind::Torch, false, kDataParallel},
      {{pkg("torch/nn/parallel/parallel_apply.py"), "_worker"}, FrameKind::Torch, false, kDataParallel},
      {{pkg("torch/nn/parallel/replicate.py"), "replicate"}, FrameKind::Torch, false, kDataParallel},
      {{pkg("torch/nn/parallel/scatter_gather.py"), "gather"}, FrameKind::Torch, false, kDataParallel},
      {{pkg("torch/nn/parallel/comm.py"), "broadcast_coalesced"}, FrameKind::Torch, false, kDataParallel},
      {{pkg("torch/distributed/pipelining/stage.py"), "forward_one_chunk"}, FrameKind::Torch, false, kPipelineStages},
      {{pkg("torch/distributed/pipeline/sync/pipe.py"), "forward"}, FrameKind::Torch, false, kPipelineStages},
  };
  return cases;
}

struct StackCase {
  std::string what;
  std::vector<FrameText> frames;  // innermost first
  std::size_t site;               // the position choose_site must pick
  Category category;
  const char* known = nullptr;    // the known-allocator entry's id ("" none; nullptr: not checked)
  const char* site_what = nullptr;  // the site's what (nullptr: not checked)
  const char* op = nullptr;       // the site's what_op (nullptr: not checked)
};

const FrameText kUser{"/home/me/train.py", "main"};
const FrameText kAddmm{"/usr/lib/libtorch_cuda.so", "at::native::addmm"};

// Weight loading, and every known-allocator entry from the frames real snapshots show.
std::vector<StackCase> known_allocator_cases() {
  const FrameText vit{pkg("timm/models/vision_transformer.py"), "forward"};
  const FrameText fwd{"/home/me/model.py", "forward"};
  return {
      {"safetensors", {{pkg("safetensors/torch.py"), "load_file"}, kUser}, 1, Category::Parameter},
      {"torch.load", {{pkg("torch/serialization.py"), "load"}, kUser}, 1, Category::Parameter},
      {"transformers loading", {{pkg("transformers/modeling_utils.py"), "_load_state_dict_into_meta_model"}, kUser}, 1,
       Category::Parameter},
      {"accelerate placing", {{pkg("accelerate/utils/modeling.py"), "set_module_tensor_to_device"}, kUser}, 1, Category::Parameter},
      {"vLLM load_weights", {{pkg("vllm/model_executor/models/qwen2.py"), "load_weights"}, kUser}, 1, Category::Parameter},
      {"vLLM creating a layer's weights (the rollout engine's copy of the model, verl)",
       {{pkg("torch/utils/_device.py"), "__torch_function__"}, {pkg("vllm/model_executor/layers/linear.py"), "create_weights"},
        {pkg("vllm/model_executor/layers/linear.py"), "__init__"}, {pkg("vllm/model_executor/models/qwen2.py"), "__init__"},
        {"/srv/rollout.py", "__init__"}},
       4, Category::Parameter},
      {"vLLM building the model: a buffer of a layer's constructor",
       {{pkg("vllm/model_executor/layers/rotary_embedding.py"), "__init__"},
        {pkg("vllm/model_executor/model_loader/loader.py"), "_initialize_model"}, kUser},
       2, Category::Parameter},
      {"SGLang creating a layer's weights", {{pkg("sglang/srt/layers/linear.py"), "create_weights"}, kUser}, 1, Category::Parameter},
      {"SGLang building the model: a buffer of a layer's constructor",
       {{pkg("sglang/srt/layers/rotary_embedding.py"), "__init__"}, {pkg("sglang/srt/model_loader/loader.py"), "_initialize_model"},
        kUser},
       2, Category::Parameter},
      {"Megatron moving the tied embedding weight",
       {{"??", "at::native::_to_copy(at::Tensor const&)"},
        {pkg("megatron/core/models/common/language_module/language_module.py"), "setup_embeddings_and_output_layer"}, kUser},
       2, Category::Parameter},
      {"vLLM's forward is no weight", {{pkg("vllm/model_executor/layers/linear.py"), "apply"}, {pkg("vllm/model_executor/layers/linear.py"), "forward"}, kUser},
       2, Category::Activation},
      {"DDP reducer from Python", {{pkg("torch/nn/parallel/distributed.py"), "_ddp_init_helper"}, kUser}, 1,
       Category::Communication, "ddp_reducer_buckets"},
      {"vLLM cache engine",
       {{pkg("vllm/worker/cache_engine.py"), "_allocate_kv_cache"}, {pkg("vllm/worker/worker.py"), "_init_cache_engine"},
        {"/srv/rollout.py", "__init__"}},
       2, Category::KvCache, "vllm_kv_cache", "vllm/worker/cache_engine.py:_allocate_kv_cache"},
      {"vLLM v1", {{pkg("vllm/v1/worker/gpu_model_runner.py"), "initialize_kv_cache"}, kUser}, 1, Category::KvCache, "vllm_kv_cache"},
      {"SGLang", {{pkg("sglang/srt/mem_cache/memory_pool.py"), "_create_buffers"}, kUser}, 1, Category::KvCache, "sglang_kv_cache"},
      {"DynamicCache in forward",
       {{pkg("transformers/cache_utils.py"), "update"}, {pkg("transformers/models/llama/modeling_llama.py"), "forward"}, kUser}, 2,
       Category::KvCache, "hf_kv_cache"},
      {"past_key_values", {{"/home/me/kv.py", "build_past_key_values"}, fwd}, 0, Category::KvCache, "past_key_values", ""},
      {"autocast copy",
       {{"??", "at::native::_to_copy(at::Tensor const&)"}, {"??", "at::autocast::cached_cast(c10::ScalarType, at::Tensor const&)"},
        {pkg("torch/nn/modules/linear.py"), "forward"}, fwd},
       3, Category::AutocastCopy, "autocast_cast_cache", "torch/nn/modules/linear.py:forward", "at::native::_to_copy"},
      {"SDPA math", {{"??", "at::native::_scaled_dot_product_attention_math(at::Tensor const&)"}, fwd}, 1, Category::Activation,
       "sdpa_math", "at::native::_scaled_dot_product_attention_math"},
      {"softmax in timm", {{"??", "at::native::softmax(at::Tensor const&, long)"}, vit, fwd}, 2, Category::Activation,
       "softmax_scores", "timm/models/vision_transformer.py:forward", "at::native::softmax"},
      {"_softmax in an attention file", {{"??", "at::native::_softmax(at::Tensor const&, long, bool)"}, {"/home/me/attention.py", "f"}},
       1, Category::Activation, "softmax_scores"},
      {"F.softmax in an attention function", {{pkg("torch/nn/functional.py"), "softmax"}, {"/home/me/model.py", "attention"}}, 1,
       Category::Activation, "softmax_scores"},
      {"softmax in attn_fwd", {{pkg("torch/nn/functional.py"), "softmax"}, {"/home/me/model.py", "attn_fwd"}}, 1,
       Category::Activation, "softmax_scores"},
      {"softmax outside attention", {{pkg("torch/nn/functional.py"), "softmax"}, {"/home/me/head.py", "classify"}}, 1,
       Category::Activation, ""},
      {"cuBLAS workspace", {{"??", "at::cuda::getNewWorkspace()"}, {"??", "at::native::addmm_out_cuda_impl(at::Tensor&)"}, fwd}, 2,
       Category::Workspace, "cublas_workspace", "at::cuda::getNewWorkspace"},
      {"cuBLASLt workspace", {{"??", "at::cuda::getCUDABlasLtWorkspace()"}, fwd}, 1, Category::Workspace, "cublas_workspace"},
      {"cudagraph trees", {{pkg("torch/_inductor/cudagraph_trees.py"), "record_function"}, kUser}, 1, Category::Workspace,
       "cuda_graph_pool"},
      {"torch.cuda.graph", {{pkg("torch/cuda/graphs.py"), "__enter__"}, kUser}, 1, Category::Workspace, "cuda_graph_pool"},
      {"Megatron grad buffer", {{pkg("megatron/core/distributed/param_and_grad_buffer.py"), "__init__"}, kUser}, 1, Category::Gradient,
       "megatron_grad_buffer"},
      {"Megatron main params", {{pkg("megatron/core/optimizer/distrib_optimizer.py"), "_build_model_and_main_param_groups"}, kUser}, 1,
       Category::OptimizerState, "megatron_main_params"},
      {"FSDP flat parameter in forward",
       {{pkg("torch/distributed/fsdp/_flat_param.py"), "_alloc_padded_unsharded_flat_param"},
        {pkg("torch/distributed/fsdp/fully_sharded_data_parallel.py"), "forward"}, kUser},
       2, Category::Parameter, "fsdp_flat_param"},
      {"apex", {{pkg("apex/optimizers/fused_adam.py"), "step"}, kUser}, 1, Category::OptimizerState, "fused_optimizer_state"},
      {"bitsandbytes", {{pkg("bitsandbytes/optim/optimizer.py"), "init_state"}, kUser}, 1, Category::OptimizerState,
       "fused_optimizer_state"},
      {"Adam moments", {{pkg("torch/optim/adam.py"), "_init_group"}, kUser}, 1, Category::OptimizerState, "adam_moments"},
      {"a forward inside step(closure) is no optimizer state",
       {{pkg("torch/nn/modules/linear.py"), "forward"}, {pkg("torch/optim/adamw.py"), "step"}, kUser}, 2, Category::Activation, ""},
      {"NCCL", {{"??", "c10d::ProcessGroupNCCL::allgather"}, kUser}, 1, Category::Communication, "nccl_buffers"},
      {"a forward inside a torch.distributed wrapper stays communication (no entry: the forward is innermost)",
       {{pkg("torch/nn/modules/linear.py"), "forward"},
        {pkg("torch/distributed/algorithms/_checkpoint/checkpoint_wrapper.py"), "forward"}, kUser},
       2, Category::Communication, ""},
      {"FlexGen KV cache",
       {{pkg("flexgen/pytorch_backend.py"), "allocate"}, {pkg("flexgen/pytorch_backend.py"), "init_cache_one_gpu_batch"}, kUser}, 2,
       Category::KvCache, "flexgen_kv_cache", "flexgen/pytorch_backend.py:init_cache_one_gpu_batch"},
      {"FlexGen placing weights", {{pkg("flexgen/pytorch_backend.py"), "allocate"}, {pkg("flexgen/flex_opt.py"), "init_weight_list"}, kUser},
       2, Category::Parameter, "flexgen_weights"},
      {"FlexGen streaming weights", {{pkg("flexgen/pytorch_backend.py"), "copy"}, {pkg("flexgen/flex_opt.py"), "load_weight"}, kUser}, 2,
       Category::Parameter, "flexgen_weights"},
      {"KIVI from its clone", {{"/home/me/KIVI/quant/new_pack.py", "triton_quantize_and_pack_along_last_dim"}, {"/home/me/KIVI/models/llama_kivi.py", "forward"}},
       0, Category::KvCache, "kivi_kv_cache"},
      {"plain memory matches no entry", {fwd}, 0, Category::Activation, "", ""},
  };
}

// The what: the innermost library frame below the site, skipping dispatch glue.
std::vector<StackCase> what_cases() {
  const FrameText fwd{"/home/me/model.py", "forward"};
  const FrameText mm{"??", "at::native::mm(at::Tensor const&, at::Tensor const&)"};
  auto glue = [&](FrameText frame) { return StackCase{"skips " + frame.name, {frame, mm, fwd}, 2, Category::Activation, nullptr,
                                                      "at::native::mm", "at::native::mm"}; };
  auto py_glue = [&](FrameText frame) {
    return StackCase{"skips " + frame.name, {frame, {pkg("vllm/model_executor/layers/linear.py"), "apply"}, fwd}, 2,
                     Category::Activation, nullptr, "vllm/model_executor/layers/linear.py:apply"};
  };
  return {
      glue({"??", "c10::impl::wrap_kernel_functor_unboxed_<at::native::mm>::call"}),
      glue({"??", "at::_ops::mm::call(at::Tensor const&, at::Tensor const&)"}),
      glue({"VariableType_0.cpp", "torch::autograd::VariableType::(anonymous namespace)::mm(c10::DispatchKeySet)"}),
      glue({"python_torch_functions_0.cpp", "torch::autograd::THPVariable_mm(_object*, _object*)"}),
      glue({"python_variable_methods.cpp", "torch::autograd::dispatch_to(at::Tensor const&)"}),
      glue({"??", "torch::handle_torch_function(torch::PythonArgs&)"}),
      glue({"RegisterCUDA.cpp", "at::(anonymous namespace)::wrapper_CUDA_mm(at::Tensor const&)"}),
      glue({"RegisterCUDA.cpp", "at::(anonymous namespace)::create_out(c10::ArrayRef<long>)"}),
      glue({"RegisterCUDA.cpp", "at::(anonymous namespace)::structured_mm_out_cuda_functional::set_output_raw_strided(long)"}),
      glue({"??", "at::meta::structured_mm::meta(at::Tensor const&, at::Tensor const&)"}),
      {"an anonymous namespace and a Windows path",
       {{"??", "at::native::(anonymous namespace)::addmm_out_cuda_impl(at::Tensor&)"},
        {"C:\\venv\\Lib\\site-packages\\torch\\nn\\modules\\linear.py", "forward"}, {"/home/me/model.py", "forward"}},
       2, Category::Activation, nullptr, "torch/nn/modules/linear.py:forward", "at::native::addmm_out_cuda_impl"},
      {"Inductor's generated code by its file name",
       {{"/tmp/torchinductor_me/ab/cabc.py", "call"}, {"/home/me/model.py", "forward"}}, 1, Category::Activation, nullptr,
       "torch.compile (Inductor) output code cabc.py:call"},
      py_glue({pkg("torch/utils/_device.py"), "__torch_function__"}),
      py_glue({pkg("torch/nn/modules/module.py"), "_call_impl"}),
      py_glue({pkg("torch/nn/modules/module.py"), "_wrapped_call_impl"}),
      py_glue({pkg("torch/_tensor.py"), "wrapped"}),
      py_glue({pkg("torch/utils/_contextlib.py"), "decorate_context"}),
      py_glue({pkg("torch/_dynamo/eval_frame.py"), "_fn"}),
      {"a backward node's op", {mm, {"??", "torch::autograd::generated::MmBackward0::apply(std::vector<at::Tensor>&&)"}}, 1,
       Category::Unknown, "", "at::native::mm", "at::native::mm"},
  };
}

std::vector<StackCase> stack_cases() {
  std::vector<StackCase> cases = {
      // realistic stacks
      {"C++ frames and ??:0 under torch._dynamo",
       {{"??", "c10::cuda::CUDACachingAllocator::malloc(void**, int, unsigned long, CUstream_st*)"},
        {"??", "??"},
        {"aten/src/ATen/native/cuda/Blas.cpp", "at::native::addmm_out_cuda_impl"},
        {"??", "_PyEval_EvalFrameDefault"},
        {pkg("torch/_dynamo/eval_frame.py"), "_fn"},
        {"/home/me/train.py", "train"}},
       5, Category::Unknown},
      {"vllm layer called from the user's server",
       {{pkg("vllm/model_executor/layers/linear.py"), "forward"},
        {pkg("torch/nn/modules/module.py"), "_call_impl"},
        {pkg("vllm/worker/model_runner.py"), "execute_model"},
        {"/home/me/serve.py", "main"}},
       3, Category::Activation},
      {"vllm serve: no user frame, the innermost third-party frame",
       {{pkg("torch/nn/functional.py"), "linear"}, {pkg("vllm/model_executor/layers/linear.py"), "forward"},
        {pkg("vllm/entrypoints/cli/main.py"), "main"}},
       1, Category::Activation},
      {"deepspeed ZeRO-3 partitions built from the user's script",
       {{pkg("deepspeed/runtime/zero/stage3.py"), "_create_fp32_partitions"},
        {pkg("deepspeed/runtime/engine.py"), "_configure_zero_optimizer"}, kUser},
       2, Category::Unknown},
      {"accelerate backward",
       {{pkg("torch/autograd/graph.py"), "_engine_run_backward"}, {pkg("torch/autograd/__init__.py"), "backward"},
        {pkg("torch/_tensor.py"), "backward"}, {pkg("accelerate/accelerator.py"), "backward"}, kUser},
       4, Category::Gradient},
      {"lightning runs forward inside optimizer.step(closure)",
       {{pkg("torch/nn/modules/linear.py"), "forward"},
        {pkg("torch/nn/modules/module.py"), "_call_impl"},
        {"/home/me/model.py", "training_step"},
        {pkg("lightning/pytorch/loops/optimization/automatic.py"), "closure"},
        {pkg("torch/optim/optimizer.py"), "wrapper"},
        {pkg("lightning/pytorch/loops/optimization/automatic.py"), "run"}},
       2, Category::Activation},
      {"transformers trainer without a user frame",
       {{pkg("transformers/models/llama/modeling_llama.py"), "forward"},
        {pkg("torch/nn/modules/module.py"), "_call_impl"},
        {pkg("transformers/trainer.py"), "training_step"}},
       0, Category::Activation},
      {"only torch frames: the innermost",
       {{pkg("torch/nn/functional.py"), "linear"}, {pkg("torch/nn/modules/linear.py"), "forward"}}, 0,
       Category::Activation},
      {"third-party before torch",
       {{pkg("torch/nn/functional.py"), "linear"}, {pkg("transformers/activations.py"), "gelu"}}, 1, Category::Activation},
      {"F.relu at a script's top level", {{"??", "at::native::relu(at::Tensor const&)"}, {pkg("torch/nn/functional.py"), "relu"},
       {"/home/me/infer.py", "<module>"}}, 2, Category::Activation, "", "torch/nn/functional.py:relu"},
      {"torch.cat at a script's top level", {{"??", "at::native::cat(at::Tensor const&)"}, {"/home/me/infer.py", "<module>"}}, 1,
       Category::Unknown, ""},
      {"generated and standard library: the innermost Python frame",
       {{"??", "at::native::mm"}, {"<eval_with_key>.3", "forward"}, {"/usr/lib/python3.10/threading.py", "run"}}, 1,
       Category::Activation},
      {"nothing worth naming: the innermost frame",
       {{"??", "c10::cuda::CUDACachingAllocator::malloc"}, {"??", "??"}}, 0, Category::Unknown},
      // autograd in C++ only: the node, not the kernel
      {"backward node",
       {{"??", "c10::cuda::CUDACachingAllocator::malloc"},
        {"/usr/lib/libtorch_cuda.so", "at::native::mm_out_cuda"},
        {"/usr/lib/libtorch_cpu.so", "torch::autograd::generated::MmBackward0::apply"},
        {"/usr/lib/libtorch_cpu.so", "torch::autograd::Engine::evaluate_function"},
        {"??", "start_thread"}},
       2, Category::Gradient},
      {"autograd engine thread", {{"??", "torch::autograd::Engine::thread_main"}}, 0, Category::Gradient},
      {"AccumulateGrad", {{"??", "torch::autograd::AccumulateGrad::apply"}}, 0, Category::Gradient},
      {"evaluate_function", {{"??", "evaluate_function"}}, 0, Category::Gradient},
      {"engine under a Python forward is activation (checkpoint recompute)",
       {{"??", "torch::autograd::Engine::execute"}, {"/home/me/model.py", "forward"}}, 1, Category::Activation},
      // communication
      {"torch.distributed", {{pkg("torch/distributed/distributed_c10d.py"), "all_gather_into_tensor"}, kUser}, 1,
       Category::Communication},
      {"c10d", {{"??", "c10d::Reducer::initialize_buckets"}, kUser}, 1, Category::Communication},
      {"nccl", {{"/usr/lib/libnccl.so.2", "ncclAllReduce"}, kUser}, 1, Category::Communication},
      {"NCCL", {{"??", "ProcessGroupNCCL::allreduce"}, kUser}, 1, Category::Communication},
      // optimizer state, gradients
      {"Adam state", {{pkg("torch/optim/adam.py"), "_init_group"}, {pkg("torch/optim/optimizer.py"), "wrapper"}, kUser},
       2, Category::OptimizerState},
      {"Windows optimizer path", {{"C:\\venv\\Lib\\site-packages\\torch\\optim\\adam.py", "step"}, kUser}, 1,
       Category::OptimizerState},
      {"backward()", {{pkg("torch/autograd/__init__.py"), "backward"}, kUser}, 1, Category::Gradient},
      {"_engine_run_backward", {{pkg("torch/autograd/graph.py"), "_engine_run_backward"}, kUser}, 1, Category::Gradient},
      {"autograd.grad", {{pkg("torch/autograd/__init__.py"), "grad"}, kUser}, 1, Category::Gradient},
      {"backward inside forward is activation",
       {{"/home/me/model.py", "forward"}, {pkg("torch/autograd/__init__.py"), "backward"}}, 0, Category::Activation},
      // parameters
      {"Module.to", {{pkg("torch/nn/modules/module.py"), "to"}, kUser}, 1, Category::Parameter},
      {"Module.cuda", {{pkg("torch/nn/modules/module.py"), "cuda"}, kUser}, 1, Category::Parameter},
      {"Module._apply", {{pkg("torch/nn/modules/module.py"), "_apply"}, kUser}, 1, Category::Parameter},
      {"convert", {{pkg("torch/nn/modules/module.py"), "convert"}, kUser}, 1, Category::Parameter},
      {"nn.Parameter", {{pkg("torch/nn/parameter.py"), "__new__"}, kUser}, 1, Category::Parameter},
      {"reset_parameters", {{pkg("torch/nn/modules/linear.py"), "reset_parameters"}, kUser}, 1, Category::Parameter},
      {"load_state_dict", {{"/home/me/ckpt.py", "load_state_dict"}}, 0, Category::Parameter},
      {"from_pretrained", {{pkg("transformers/modeling_utils.py"), "from_pretrained"}, kUser}, 1, Category::Parameter},
      {"module constructor",
       {{pkg("torch/nn/modules/linear.py"), "__init__"}, {"/home/me/model.py", "__init__"}}, 1, Category::Parameter},
      // activations, unknown
      {"forward", {{"/home/me/model.py", "forward"}}, 0, Category::Activation},
      {"_call_impl", {{pkg("torch/nn/modules/module.py"), "_call_impl"}, kUser}, 1, Category::Activation},
      {"_wrapped_call_impl", {{pkg("torch/nn/modules/module.py"), "_wrapped_call_impl"}, kUser}, 1, Category::Activation},
      {"a hand-written loss outside any forward (CS336's cross_entropy at the script's top level)",
       {{"/home/me/nn_utils.py", "log_softmax"}, {"/home/me/nn_utils.py", "cross_entropy"}, {"/home/me/train.py", "<module>"}}, 0,
       Category::Activation},
      {"nothing decisive", {{"/home/me/data.py", "collate"}}, 0, Category::Unknown},
  };
  for (StackCase& c : known_allocator_cases()) cases.push_back(std::move(c));
  for (StackCase& c : what_cases()) cases.push_back(std::move(c));
  // Native frames not worth naming: the next native frame is the site.
  for (const FrameText& skipped :
       std::vector<FrameText>{{"??", "c10::cuda::CUDAStream::query"},
                              {"??", "torch::CapturedTraceback::symbolize"},
                              {"??", "<unwind unsupported>"},
                              {"??", "execute_native_thread_routine"},
                              {"??", "start_thread"},
                              {"??", "__clone3"},
                              {"??", "at::native::empty_cuda"},
                              {"??", "at::CachingHostAllocator::record_event"},
                              {"??", "at::native::allocate_workspace"},
                              {"??", "__libc_malloc"},
                              {"??", "??"},
                              {"/usr/lib/libfoo.so", ""}}) {
    cases.push_back({"skips " + skipped.name, {skipped, kAddmm}, 1, Category::Unknown});
  }
  return cases;
}

// A snapshot with one stack of `frames`, their facts from `rules` (as the builder sets them).
Snapshot snapshot_of(const std::vector<FrameText>& frames, std::span<const FactRule> rules) {
  std::vector<test::StackFrame> stack;
  for (const FrameText& f : frames) stack.push_back({f.file, f.name});
  return test::one_stack(stack, rules);
}
constexpr StackId kStack = 1;

// What is wrong with the case under `rules` ("" when it comes out as expected).
std::string frame_case_error(const FrameCase& c, std::span<const FactRule> rules) {
  const FrameFacts facts = frame_facts(c.frame.file, c.frame.name, ~FrameFacts(0), rules);
  std::string error;
  if (frame_kind(facts) != c.kind) error += std::string(" kind ") + frame_kind_name(frame_kind(facts));
  if (((facts & kOmitted) != 0) != c.omitted) error += c.omitted ? " not omitted" : " omitted";
  if ((facts & c.facts) != c.facts) error += " lacks its device fact";
  return error;
}

std::string stack_case_error(const StackCase& c, std::span<const FactRule> rules) {
  const Snapshot s = snapshot_of(c.frames, rules);
  const SiteChoice site = choose_site(s, kStack);
  std::string error;
  if (!site.found || site.position != c.site) error += " site at " + std::to_string(site.position);
  if (categorize_stack(s, kStack) != c.category) error += std::string(" category ") + category_name(categorize_stack(s, kStack));
  const Site d = describe_site(s, kStack, site);
  const std::string known_id = d.known ? std::string(d.known->id) : "";
  if (c.known && known_id != c.known) error += " known " + known_id;
  if (c.site_what && d.what != c.site_what) error += " what " + d.what;
  if (c.op && d.what_op != c.op) error += " op " + d.what_op;
  return error;
}

TEST(FrameRules, EveryFrameCaseGetsItsKind) {
  for (const FrameCase& c : frame_cases()) {
    EXPECT_EQ(frame_case_error(c, frame_fact_rules()), "") << c.frame.file << " " << c.frame.name;
    EXPECT_EQ(classify_frame(c.frame.file, c.frame.name), c.kind) << c.frame.file;
    EXPECT_EQ(is_omitted_frame(c.frame.file, c.frame.name), c.omitted) << c.frame.name;
  }
}

TEST(FrameRules, EveryStackCaseGetsItsSiteAndCategory) {
  for (const StackCase& c : stack_cases()) EXPECT_EQ(stack_case_error(c, frame_fact_rules()), "") << c.what;
}

TEST(FrameRules, EveryKindRowDecidesACase) {
  for (const KindRule& rule : frame_kind_rules()) {
    bool decides = false;
    for (const FrameCase& c : frame_cases()) decides |= &kind_rule(frame_facts(c.frame.file, c.frame.name)) == &rule;
    EXPECT_TRUE(decides) << rule.reason;
  }
}

TEST(FrameRules, EveryCategoryRowDecidesACase) {
  for (const CategoryRule& rule : category_rules()) {
    bool decides = false;
    for (const StackCase& c : stack_cases()) {
      const Snapshot s = snapshot_of(c.frames, frame_fact_rules());
      decides |= &category_rule(stack_signals(s, kStack)) == &rule;
    }
    EXPECT_TRUE(decides) << rule.reason;
  }
}

// A pattern row no case depends on is dead or untested: dropping each row must break a case.
TEST(FrameRules, EveryPatternRowIsNeededByACase) {
  const std::span<const FactRule> all = frame_fact_rules();
  const std::vector<StackCase> stacks = stack_cases();
  for (std::size_t r = 0; r < all.size(); ++r) {
    std::vector<FactRule> without(all.begin(), all.end());
    without.erase(without.begin() + static_cast<std::ptrdiff_t>(r));
    std::size_t broken = 0;
    for (const FrameCase& c : frame_cases()) broken += !frame_case_error(c, without).empty();
    for (const StackCase& c : stacks) broken += !stack_case_error(c, without).empty();
    EXPECT_GT(broken, 0u) << "row " << r << " (" << all[r].file.text << " " << all[r].name.text << ": " << all[r].reason
                          << ") decides no case";
  }
}

TEST(FrameRules, AnEmptyStackHasNoSite) {
  const Snapshot s = snapshot_of({}, frame_fact_rules());
  EXPECT_FALSE(choose_site(s, kNoStack).found);
  EXPECT_EQ(categorize_stack(s, kNoStack), Category::Unknown);
}

// The builder sets every interned frame's facts: a JSON snapshot's site and category come out
// as from the table.
TEST(FrameRules, TheBuilderSetsEachFramesFacts) {
  const std::string json = R"({"segments":[{"device":0,"address":0,"total_size":1024,"stream":0,"blocks":[
    {"size":1024,"state":"active_allocated","frames":[
      {"filename":"??","name":"c10::cuda::CUDACachingAllocator::malloc","line":0},
      {"filename":"/opt/conda/lib/python3.11/site-packages/torch/optim/adam.py","name":"_init_group","line":120},
      {"filename":"/home/me/train.py","name":"main","line":42}]}]}]})";
  const LoadedSnapshot loaded = test::load_bytes(std::vector<std::uint8_t>(json.begin(), json.end()));
  const Snapshot& s = loaded.snapshot;
  ASSERT_EQ(s.frames.size(), 3u);
  for (const Frame& f : s.frames) EXPECT_EQ(f.facts, frame_facts(s.str(f.filename), s.str(f.name)));
  const std::vector<Site> sites = attribute(s, live_blocks(s));
  ASSERT_EQ(sites.size(), 1u);
  EXPECT_EQ(sites[0].site, "/home/me/train.py:42");
  EXPECT_EQ(sites[0].kind, FrameKind::User);
  EXPECT_EQ(sites[0].category, Category::OptimizerState);
  EXPECT_EQ(sites[0].bytes, 1024u);
}

}  // namespace frame_rules_tests
}  // namespace memsnap
