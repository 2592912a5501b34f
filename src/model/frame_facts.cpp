// The frame patterns: each row names a file and/or function pattern and the fact it shows. A new
// rule for a framework or a path layout is one row here (and, for a new kind of decision, one row
// in the decision tables of analysis/frame_filter.cpp or analysis/attribution.cpp).
#include "model/frame_facts.h"

#include <string>

namespace memsnap {
namespace {

constexpr TextPattern kAny{};
constexpr TextPattern is(std::string_view t) { return {TextMatch::Equals, t}; }
constexpr TextPattern starts(std::string_view t) { return {TextMatch::StartsWith, t}; }
constexpr TextPattern ends(std::string_view t) { return {TextMatch::EndsWith, t}; }
constexpr TextPattern has(std::string_view t) { return {TextMatch::Contains, t}; }

constexpr FactRule kRules[] = {
    // ---- what sort of code (analysis/frame_filter.cpp turns these into a FrameKind) ----
    {is("??"), kAny, kNativeFile, "an unsymbolized native frame (??:0)"},
    {is(""), kAny, kNativeFile, "a frame without a file"},
    {ends(".cpp"), kAny, kNativeFile, "C++ source"},
    {ends(".cc"), kAny, kNativeFile, "C++ source"},
    {ends(".cxx"), kAny, kNativeFile, "C++ source"},
    {ends(".c"), kAny, kNativeFile, "C source"},
    {ends(".h"), kAny, kNativeFile, "C/C++ header"},
    {ends(".hpp"), kAny, kNativeFile, "C++ header"},
    {ends(".cu"), kAny, kNativeFile, "CUDA source"},
    {ends(".cuh"), kAny, kNativeFile, "CUDA header"},
    {ends(".S"), kAny, kNativeFile, "assembly source"},
    {ends(".o"), kAny, kNativeFile, "an object file"},
    {has(".so"), kAny, kNativeFile, "a shared object (libtorch_cuda.so, libc.so.6)"},
    {ends(".py"), kAny, kPythonFile, "a Python file"},
    {starts("<"), kAny, kPythonFile, "Python code without a file (<frozen runpy>, <string>)"},
    {kAny, has("::"), kCxxName, "a qualified C++ function name"},
    {starts("<eval_with_key>"), kAny, kGeneratedCode, "torch.fx generated code"},
    {has("/torchinductor_"), kAny, kGeneratedCode, "Inductor generated code"},
    {has("fx_generated_"), kAny, kGeneratedCode, "an FX graph module's pretend file (fx_generated_<hash>.py, PyTorch 2.10+)"},
    {has("fx_graph_module_"), kAny, kGeneratedCode, "an FX graph module's pretend file (fx_graph_module_<hash>.py)"},
    {starts("torch/"), kAny, kTorchPath, "a relative torch/ path"},
    {has("/torch/"), kAny, kTorchPath, "a torch/ folder"},
    {has("/functorch/"), kAny, kTorchPath, "a functorch/ folder"},
    {has("/site-packages/"), kAny, kInstalledPackage, "an installed package (pip)"},
    {has("/dist-packages/"), kAny, kInstalledPackage, "an installed package (Debian)"},
    {has("/home/"), kAny, kHomeDir, "a home directory"},
    {has("/pytorch/torch/"), kAny, kPytorchCheckout, "a PyTorch source checkout"},
    {starts("<"), kAny, kStdlibPath, "interpreter code (<frozen runpy>, <string>)"},
    {has("/lib/python2"), kAny, kStdlibPath, "the Python 2 standard library"},
    {has("/lib/python3"), kAny, kStdlibPath, "the Python 3 standard library"},
    {has("/lib64/python3"), kAny, kStdlibPath, "the Python 3 standard library (lib64)"},
    {has("/Lib/"), kAny, kStdlibPath, "the Python standard library (Windows)"},

    // ---- native frames PyTorch's own tools omit, and ones not worth naming as a site ----
    {kAny, has("unwind::unwind"), kOmitted, "the unwinder"},
    {kAny, has("CapturedTraceback::gather"), kOmitted, "the traceback collector"},
    {kAny, has("gather_with_cpp"), kOmitted, "the traceback collector"},
    {kAny, has("_start"), kOmitted, "process start-up (_start, __libc_start_main)"},
    {kAny, has("PyEval_"), kOmitted, "the CPython interpreter loop"},
    {kAny, has("PyObject_"), kOmitted, "CPython object calls"},
    {kAny, has("PyFunction_"), kOmitted, "CPython function calls"},
    {has("core/boxing"), kAny, kOmitted, "dispatcher boxing"},
    {has("/Register"), kAny, kOmitted, "dispatcher registration"},
    {has("/Redispatch"), kAny, kOmitted, "dispatcher redispatch"},
    {has("pythonrun.c"), kAny, kOmitted, "the CPython interpreter"},
    {has("Modules/main.c"), kAny, kOmitted, "the CPython interpreter"},
    {has("Objects/call.c"), kAny, kOmitted, "the CPython interpreter"},
    {has("Objects/methodobject.c"), kAny, kOmitted, "the CPython interpreter"},
    {has("pycore_ceval.h"), kAny, kOmitted, "the CPython interpreter"},
    {has("ceval.c"), kAny, kOmitted, "the CPython interpreter"},
    {has("cpython/abstract.h"), kAny, kOmitted, "the CPython interpreter"},
    {kAny, has("c10::cuda::"), kUninformative, "CUDA runtime glue"},
    {kAny, has("CapturedTraceback"), kUninformative, "the traceback collector"},
    {kAny, has("<unwind unsupported>"), kUninformative, "no native unwinding"},
    {kAny, has("execute_native_thread_routine"), kUninformative, "thread start-up"},
    {kAny, has("start_thread"), kUninformative, "thread start-up"},
    {kAny, has("__clone"), kUninformative, "thread start-up (__clone, __clone3; not at::native::clone)"},
    {kAny, has("empty"), kUninformative, "a tensor factory (at::empty)"},
    {kAny, has("Allocator"), kUninformative, "an allocator (CUDACachingAllocator, CPUAllocator)"},
    {kAny, has("allocate"), kUninformative, "an allocator"},
    {kAny, has("malloc"), kUninformative, "an allocator"},
    {kAny, is("??"), kUninformative, "an unsymbolized function"},
    {kAny, is(""), kUninformative, "a frame without a function name"},
    {kAny, has("Backward"), kBackwardNode, "an autograd node (MmBackward0::apply)"},

    // ---- what the code is doing (analysis/attribution.cpp turns these into a Category) ----
    {has("torch/optim/"), kAny, kOptimizerCode, "torch.optim"},
    {has("torch/distributed/"), kAny, kCommunication, "torch.distributed"},
    {has("torch/nn/parallel/data_parallel.py"), kAny, kDataParallel, "torch.nn.DataParallel"},
    {has("torch/nn/parallel/parallel_apply.py"), kAny, kDataParallel, "DataParallel's parallel_apply"},
    {has("torch/nn/parallel/replicate.py"), kAny, kDataParallel, "DataParallel's replicate"},
    {has("torch/nn/parallel/scatter_gather.py"), kAny, kDataParallel, "DataParallel's scatter / gather"},
    {has("torch/nn/parallel/comm.py"), kAny, kDataParallel, "DataParallel's broadcast / gather"},
    {has("torch/distributed/pipelining/"), kAny, kPipelineStages, "torch.distributed.pipelining"},
    {has("torch/distributed/pipeline/"), kAny, kPipelineStages, "torch.distributed.pipeline (Pipe)"},
    {kAny, has("c10d::"), kCommunication, "c10d collectives"},
    {kAny, has("nccl"), kCommunication, "NCCL"},
    {kAny, has("NCCL"), kCommunication, "NCCL"},
    {has("torch/autograd/"), is("backward"), kBackwardCall, "torch.autograd.backward"},
    {has("torch/autograd/"), is("_engine_run_backward"), kBackwardCall, "the autograd engine's Python entry"},
    {has("torch/autograd/"), is("grad"), kBackwardCall, "torch.autograd.grad"},
    {kAny, has("torch::autograd::Engine"), kAutogradEngine, "the C++ autograd engine"},
    {kAny, has("AccumulateGrad"), kAutogradEngine, "gradient accumulation"},
    {kAny, has("evaluate_function"), kAutogradEngine, "the autograd engine running a node"},
    {has("torch/nn/modules/module.py"), is("_apply"), kParameterInit, "Module._apply (to(), cuda())"},
    {has("torch/nn/modules/module.py"), is("convert"), kParameterInit, "Module.to's tensor conversion"},
    {has("torch/nn/modules/module.py"), is("to"), kParameterInit, "Module.to"},
    {has("torch/nn/modules/module.py"), is("cuda"), kParameterInit, "Module.cuda"},
    {has("torch/nn/parameter.py"), kAny, kParameterInit, "nn.Parameter"},
    {kAny, is("reset_parameters"), kParameterInit, "a module's parameter initialisation"},
    {kAny, is("load_state_dict"), kParameterInit, "loading a checkpoint"},
    {kAny, is("from_pretrained"), kParameterInit, "loading pretrained weights"},
    {has("torch/nn/modules/"), is("__init__"), kParameterInit, "a torch.nn module's constructor"},
    {has("/safetensors/"), kAny, kParameterInit, "loading safetensors weights"},
    {ends("torch/serialization.py"), is("load"), kParameterInit, "torch.load of a checkpoint"},
    {kAny, is("_load_state_dict_into_meta_model"), kParameterInit, "transformers loading weights"},
    {kAny, is("set_module_tensor_to_device"), kParameterInit, "accelerate placing weights"},
    {kAny, is("load_weights"), kParameterInit, "a model loader's load_weights (vLLM, SGLang)"},
    {has("vllm/model_executor/"), is("create_weights"), kParameterInit, "vLLM's layers creating their weights"},
    {has("vllm/model_executor/model_loader/"), is("_initialize_model"), kParameterInit, "vLLM building the model (weights, buffers)"},
    {has("sglang/srt/"), is("create_weights"), kParameterInit, "SGLang's layers creating their weights"},
    {has("sglang/srt/model_loader/"), is("_initialize_model"), kParameterInit, "SGLang building the model (weights, buffers)"},
    {has("megatron/core/models/common/language_module/"), is("setup_embeddings_and_output_layer"), kParameterInit,
     "Megatron placing the shared embedding / output weight"},
    {has("torch/nn/parallel/distributed.py"), is("_ddp_init_helper"), kCommunication, "DDP building its reducer"},
    {kAny, is("forward"), kForwardCall, "a forward method"},
    {kAny, is("cross_entropy"), kForwardCall, "the loss (F.cross_entropy or a hand-written one): the forward computation's end"},
    {kAny, is("_call_impl"), kForwardCall, "Module.__call__"},
    {kAny, is("_wrapped_call_impl"), kForwardCall, "Module.__call__"},
    {ends("torch/nn/functional.py"), kAny, kFunctionalOp, "torch.nn.functional (F.relu called outside any module)"},

    // ---- code known to allocate one kind of memory (analysis/known_allocators.cpp names it) ----
    {has("vllm/worker/cache_engine.py"), kAny, kKvCacheCode, "vLLM's cache engine"},
    {has("vllm/v1/worker/"), has("kv_cache"), kKvCacheCode, "vLLM v1 allocating the KV cache"},
    {has("sglang/srt/mem_cache/"), kAny, kKvCacheCode, "SGLang's memory pool"},
    {ends("transformers/cache_utils.py"), kAny, kKvCacheCode, "Hugging Face caches (DynamicCache, StaticCache)"},
    {kAny, has("past_key_value"), kKvCacheCode, "code that builds past_key_values"},
    {has("flexgen/"), is("init_cache_one_gpu_batch"), kKvCacheCode, "FlexGen allocating a GPU batch's KV cache"},
    {has("new_pack.py"), has("_and_pack"), kKvCacheCode, "KIVI quantizing and packing the KV cache (quant/new_pack.py)"},
    {kAny, has("at::autocast::cached_cast"), kAutocastCast, "autocast's cast cache"},
    {kAny, has("_scaled_dot_product_attention_math"), kAttentionMath, "SDPA's math (unfused) path"},
    {kAny, starts("at::native::softmax"), kAttentionMath, "softmax (the scores' probabilities)"},
    {kAny, starts("at::native::_softmax"), kAttentionMath, "softmax (the scores' probabilities)"},
    {ends("torch/nn/functional.py"), is("softmax"), kAttentionMath, "F.softmax"},
    {has("attention"), kAny, kAttentionCode, "an attention file"},
    {has("timm/models/vision_transformer.py"), kAny, kAttentionCode, "timm's ViT (Attention.forward)"},
    {kAny, has("attention"), kAttentionCode, "an attention function"},
    {kAny, has("attn"), kAttentionCode, "an attention function (attn)"},
    {kAny, has("getNewWorkspace"), kWorkspaceCode, "the cuBLAS workspace"},
    {kAny, has("getCUDABlasLtWorkspace"), kWorkspaceCode, "the cuBLASLt workspace"},
    {has("torch/_inductor/cudagraph_trees.py"), kAny, kWorkspaceCode, "Inductor's CUDA graph trees"},
    {has("torch/cuda/graphs.py"), kAny, kWorkspaceCode, "torch.cuda.graph capture"},
    {has("megatron/core/distributed/param_and_grad_buffer.py"), kAny, kFrameworkBuffer, "Megatron's param and grad buffer"},
    {has("megatron/core/optimizer/distrib_optimizer.py"), kAny, kFrameworkBuffer, "Megatron's distributed optimizer"},
    {has("torch/distributed/fsdp/"), has("flat_param"), kFrameworkBuffer, "FSDP's flat parameters"},
    {has("flexgen/"), is("init_weight_list"), kFrameworkBuffer, "FlexGen placing the weights (--percent)"},
    {has("flexgen/"), is("load_weight"), kFrameworkBuffer, "FlexGen streaming offloaded weights to the GPU"},
    {has("/apex/optimizers/"), kAny, kOtherOptimizer, "apex's fused optimizers"},
    {has("/bitsandbytes/optim/"), kAny, kOtherOptimizer, "bitsandbytes' 8-bit optimizers"},

    // ---- frames below the user's line that say nothing about what the memory is (c10::, at::meta::,
    //      TensorIterator and other C++ plumbing: analysis/site_what.cpp kPlumbing) ----
    {kAny, has("at::_ops::"), kBoilerplate, "operator dispatch stubs"},
    {kAny, has("torch::autograd::VariableType"), kBoilerplate, "autograd's dispatch wrappers"},
    {kAny, has("torch::autograd::THPVariable"), kBoilerplate, "Python bindings of tensor methods"},
    {kAny, has("torch::autograd::dispatch_"), kBoilerplate, "Python bindings' dispatch"},
    {kAny, has("torch::handle_torch_function"), kBoilerplate, "__torch_function__ dispatch"},
    {kAny, has("wrapper_"), kBoilerplate, "generated kernel wrappers"},
    {kAny, has("create_out"), kBoilerplate, "structured kernels' output allocation"},
    {kAny, has("set_output_raw_strided"), kBoilerplate, "structured kernels' output allocation"},
    {has("torch/utils/_device.py"), kAny, kBoilerplate, "the device context manager's __torch_function__"},
    {has("torch/nn/modules/module.py"), is("_call_impl"), kBoilerplate, "Module.__call__"},
    {has("torch/nn/modules/module.py"), is("_wrapped_call_impl"), kBoilerplate, "Module.__call__"},
    {has("torch/_tensor.py"), is("wrapped"), kBoilerplate, "a Tensor method's wrapper"},
    {has("torch/utils/_contextlib.py"), kAny, kBoilerplate, "a no_grad / inference_mode decorator"},
    {has("torch/_dynamo/eval_frame.py"), kAny, kBoilerplate, "torch.compile's frame evaluation"},
};

}  // namespace

std::span<const FactRule> frame_fact_rules() { return kRules; }

bool matches(const TextPattern& p, std::string_view text) {
  switch (p.match) {
    case TextMatch::Any: return true;
    case TextMatch::Equals: return text == p.text;
    case TextMatch::StartsWith: return text.starts_with(p.text);
    case TextMatch::EndsWith: return text.ends_with(p.text);
    case TextMatch::Contains: return text.find(p.text) != std::string_view::npos;
  }
  return false;
}

bool matches(const FactRule& rule, std::string_view file, std::string_view name) {
  return matches(rule.file, file) && matches(rule.name, name);
}

FrameFacts frame_facts(std::string_view filename, std::string_view name, FrameFacts wanted, std::span<const FactRule> rules) {
  std::string normalized;
  if (filename.find('\\') != std::string_view::npos) {
    normalized.assign(filename);
    for (char& c : normalized) {
      if (c == '\\') c = '/';
    }
    filename = normalized;
  }
  FrameFacts facts = 0;
  for (const FactRule& rule : rules) {
    if ((rule.fact & wanted & ~facts) && matches(rule, filename, name)) facts |= rule.fact;
  }
  return facts;
}

}  // namespace memsnap
