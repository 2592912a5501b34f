#!/usr/bin/env python3
"""Generate a large, realistic PyTorch CUDA memory snapshot (pickle) for benchmarking memsnap.

Usage:
    python3 bench/gen_large_snapshot.py OUT --target-mb N [--devices D] [--seed S] [--protocol 4]
                                        [--stack-sharing pool|per-alloc] [--layers L]

The file has exactly the object layout and object sharing of
``torch.cuda.memory._dump_snapshot`` (``pickle.dump(dict, f)``), see
/work/shared/spec/snapshot-format.md §2-§6 and §9:

* top level: {segments, device_traces, allocator_settings, external_annotations}
* segments (all devices, sorted by address per device): keys device, address, total_size,
  allocated_size, active_size, requested_size, stream, segment_type, segment_pool_id (a fresh
  tuple), is_expandable, blocks, frames.  Like Module.cpp, a *non-empty* ``frames`` is inserted
  after symbolization, i.e. after ``blocks`` (spec §3); all generated segments have a stack.
* blocks: address, size, requested_size, state, frames (inactive blocks share one empty list).
* device_traces[d]: action, addr (device_free for oom), size, stream, time_us,
  compile_context ('N/A', a fresh str per entry), user_metadata ('' singleton), frames.
* frames: a pool of unique frame dicts {'name','filename','line'} with fresh strings per frame
  (C++ frames: filename '??', line 0; Python frames interleaved before _PyEval_EvalFrameDefault,
  innermost first), shared by identity between stack lists.
* --stack-sharing pool: one shared list object per call site (a few thousand lists of
  30-80 frames); every trace entry / block references one of them (-> LONG_BINGET). Real files
  never share lists that way, so this overstates a reader's speed.
  --stack-sharing per-alloc (default): what real PyTorch does (one CapturedTraceback per allocation): every
  allocation gets its own list object (of shared frame dicts); alloc, free_requested,
  free_completed and the live block share it.

The trace is produced by simulating a simplified CUDA caching allocator (512 B rounding,
2 MiB small segments, 20 MiB / 2 MiB-rounded large segments, best-fit + split + coalesce,
record_stream -> delayed free_completed, empty_cache -> segment_free, rare OOM) driven by a
transformer-training-like workload, so addresses/sizes/segments are mutually consistent and
the final segment list is the allocator state at the end of the trace.
"""
import argparse
import bisect
import gc
import os
import pickle
import random
import resource
import sys
import time

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB
kSmallSize = 1 * MiB
kSmallBuffer = 2 * MiB
kLargeBuffer = 20 * MiB
kMinLargeAlloc = 10 * MiB
kRoundLarge = 2 * MiB
CAPACITY = 80 * GiB
SIDE_STREAM = 94_217_734_615_552  # a raw cudaStream_t pointer value (~9.4e13)
TIME0 = 1_730_000_000_000_000  # us since epoch

NA_HEAD, NA_TAIL = "N/", "A"  # concatenated at run time -> a fresh 'N/A' str per entry


def fresh(s):
    """A new str object equal to s (len>=2); '' and 1-char strings stay CPython singletons."""
    return s.encode("utf-8", "surrogatepass").decode("utf-8", "surrogatepass")


def ilen(x):
    """Bytes the CPython pickler (protocol>=2) uses for int x."""
    if 0 <= x < 256:
        return 2
    if 0 <= x < 65536:
        return 3
    if -(2 ** 31) <= x < 2 ** 31:
        return 5
    if x > 0:
        return 2 + (x.bit_length() >> 3) + 1
    return 2 + ((-x - 1).bit_length() >> 3) + 1


def slen(s):
    n = len(s.encode("utf-8"))
    return (2 + n if n < 256 else 5 + n) + 1  # + MEMOIZE


class Done(Exception):
    pass


# ----------------------------------------------------------------------------------------------
# Stacks
# ----------------------------------------------------------------------------------------------

TORCH = "/opt/conda/lib/python3.11/site-packages/torch"
USER = "/home/user/llm"

PROLOGUE = [
    "torch::unwind::unwind()",
    "torch::CapturedTraceback::gather(bool, bool, bool)",
    "c10::cuda::CUDACachingAllocator::Native::(anonymous namespace)::gather_with_cpp()",
    "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)",
    "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::malloc(void**, signed char, unsigned long, CUstream_st*)",
    "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long)",
]
PROLOGUE_EMPTY = [
    ["at::TensorBase at::detail::_empty_generic<long>(c10::ArrayRef<long>, c10::Allocator*, c10::DispatchKeySet, c10::ScalarType, std::optional<c10::MemoryFormat>)",
     "at::detail::empty_generic(c10::ArrayRef<long>, c10::Allocator*, c10::DispatchKeySet, c10::ScalarType, std::optional<c10::MemoryFormat>)",
     "at::detail::empty_cuda(c10::ArrayRef<long>, c10::ScalarType, std::optional<c10::Device>, std::optional<c10::MemoryFormat>)"],
    ["at::TensorBase at::detail::_empty_strided_generic<c10::ArrayRef<long> >(c10::ArrayRef<long>, c10::ArrayRef<long>, c10::Allocator*, c10::DispatchKeySet, c10::ScalarType)",
     "at::detail::empty_strided_generic(c10::ArrayRef<long>, c10::ArrayRef<long>, c10::Allocator*, c10::DispatchKeySet, c10::ScalarType)",
     "at::detail::empty_strided_cuda(c10::ArrayRef<long>, c10::ArrayRef<long>, c10::ScalarType, std::optional<c10::Device>)"],
]
SIGS = [
    "at::Tensor const&, at::Tensor const&",
    "at::Tensor const&, at::Tensor const&, at::Tensor const&, c10::Scalar const&, c10::Scalar const&",
    "at::Tensor const&, c10::ArrayRef<c10::SymInt>, std::optional<at::Tensor> const&, std::optional<at::Tensor> const&, double",
    "c10::ArrayRef<at::Tensor>, c10::Scalar const&",
    "at::Tensor const&, at::Tensor const&, at::Tensor const&, double, bool, bool, std::optional<double>",
    "at::Tensor const&, long, bool",
    "at::Tensor const&, c10::ArrayRef<long>, bool, std::optional<c10::ScalarType>",
]
OP_TEMPLATES = [
    "at::native::{op}_kernel_impl(at::TensorIteratorBase&)",
    "at::native::(anonymous namespace)::{op}_out_cuda_template({sig})",
    "at::(anonymous namespace)::create_out(c10::ArrayRef<long>, c10::ArrayRef<long>, c10::TensorOptions const&)",
    "at::(anonymous namespace)::structured_{op}_out_cuda_functional::set_output_raw_strided(long, c10::ArrayRef<long>, c10::ArrayRef<long>, c10::TensorOptions, c10::ArrayRef<at::Dimname>)",
    "at::meta::structured_{op}::meta({sig})",
    "at::native::{op}_cuda({sig})",
    "at::(anonymous namespace)::wrapper_CUDA_{op}({sig})",
    "c10::impl::wrap_kernel_functor_unboxed_<c10::impl::detail::WrapFunctionIntoFunctor_<c10::CompileTimeFunctionPointer<at::Tensor ({sig}), &at::(anonymous namespace)::wrapper_CUDA_{op}>, at::Tensor, c10::guts::typelist::typelist<{sig}> >, at::Tensor ({sig})>::call(c10::OperatorKernel*, c10::DispatchKeySet, {sig})",
    "at::_ops::{op}::redispatch(c10::DispatchKeySet, {sig})",
    "torch::autograd::VariableType::(anonymous namespace)::{op}(c10::DispatchKeySet, {sig})",
    "c10::impl::wrap_kernel_functor_unboxed_<c10::impl::detail::WrapFunctionIntoFunctor_<c10::CompileTimeFunctionPointer<at::Tensor (c10::DispatchKeySet, {sig}), &torch::autograd::VariableType::(anonymous namespace)::{op}>, at::Tensor, c10::guts::typelist::typelist<c10::DispatchKeySet, {sig}> >, at::Tensor (c10::DispatchKeySet, {sig})>::call(c10::OperatorKernel*, c10::DispatchKeySet, {sig})",
    "at::_ops::{op}::call({sig})",
    "at::Tensor::{op}({sig}) const",
]
BINDING = ["torch::autograd::THPVariable_{op}(_object*, _object*, _object*)", "cfunction_call", "_PyObject_MakeTpCall"]
PY_GLUE = ["_PyFunction_Vectorcall", "_PyObject_Call_Prepend", "slot_tp_call", "_PyObject_MakeTpCall",
           "method_vectorcall", "PyObject_Call", "_PyObject_FastCallDictTstate"]
TAIL = ["PyEval_EvalCode", "run_eval_code_obj", "run_mod", "pyrun_file", "_PyRun_SimpleFileObject",
        "_PyRun_AnyFileObject", "pymain_run_file_obj", "pymain_run_file", "Py_RunMain", "Py_BytesMain",
        "__libc_start_call_main", "__libc_start_main_impl", "_start"]
BWD_FORMULA = [
    "torch::autograd::generated::details::{op}_backward({sig})",
    "at::_ops::{op}_backward::call({sig})",
    "at::_ops::{op}_backward::redispatch(c10::DispatchKeySet, {sig})",
    "at::(anonymous namespace)::wrapper_CUDA_{op}_backward({sig})",
    "at::native::{op}_backward_cuda({sig})",
    "torch::autograd::generated::details::mm_mat1_backward(at::Tensor const&, at::Tensor const&, c10::ArrayRef<c10::SymInt>, c10::ArrayRef<c10::SymInt>, c10::Layout, c10::Scalar const&)",
    "torch::autograd::generated::details::mm_mat2_backward(at::Tensor const&, at::Tensor const&, c10::ArrayRef<c10::SymInt>, c10::ArrayRef<c10::SymInt>, c10::Layout, c10::Scalar const&)",
    "torch::autograd::generated::details::sum_backward(at::Tensor const&, c10::ArrayRef<c10::SymInt>, c10::OptionalArrayRef<long>, bool)",
]
ENGINE = [
    "torch::autograd::generated::{Op}Backward0::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)",
    "torch::autograd::Node::operator()(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)",
    "torch::autograd::call_function(std::shared_ptr<torch::autograd::GraphTask>&, torch::autograd::Node*, torch::autograd::InputBuffer&)",
    "torch::autograd::Engine::evaluate_function(std::shared_ptr<torch::autograd::GraphTask>&, torch::autograd::Node*, torch::autograd::InputBuffer&, std::shared_ptr<torch::autograd::ReadyQueue> const&)",
    "torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&)",
    "torch::autograd::Engine::thread_init(int, std::shared_ptr<torch::autograd::ReadyQueue> const&, bool)",
    "torch::autograd::python::PythonEngine::thread_init(int, std::shared_ptr<torch::autograd::ReadyQueue> const&, bool)",
    "void std::__invoke_impl<void, void (torch::autograd::Engine::*)(int, std::shared_ptr<torch::autograd::ReadyQueue> const&, bool), torch::autograd::Engine*, signed char, std::shared_ptr<torch::autograd::ReadyQueue>, bool>(std::__invoke_memfun_deref, void (torch::autograd::Engine::*&&)(int, std::shared_ptr<torch::autograd::ReadyQueue> const&, bool), torch::autograd::Engine*&&, signed char&&, std::shared_ptr<torch::autograd::ReadyQueue>&&, bool&&)",
    "execute_native_thread_routine",
    "start_thread",
    "clone",
]

FWD_LEAF = {  # op -> innermost python frames (file, func, line)
    "native_layer_norm": [(TORCH + "/nn/functional.py", "layer_norm", 2901), (TORCH + "/nn/modules/normalization.py", "forward", 217)],
    "mm": [(TORCH + "/nn/modules/linear.py", "forward", 125)],
    "addmm": [(TORCH + "/nn/modules/linear.py", "forward", 125)],
    "mul": [(USER + "/rotary.py", "apply_rotary_emb", 41), (USER + "/rotary.py", "forward", 77)],
    "cat": [(USER + "/rotary.py", "rotate_half", 18), (USER + "/rotary.py", "apply_rotary_emb", 40)],
    "_scaled_dot_product_flash_attention": [(TORCH + "/nn/functional.py", "scaled_dot_product_attention", 5912)],
    "add": [],
    "gelu": [(TORCH + "/nn/modules/activation.py", "forward", 734)],
    "native_dropout": [(TORCH + "/nn/functional.py", "dropout", 1425), (TORCH + "/nn/modules/dropout.py", "forward", 70)],
    "empty": [(TORCH + "/random.py", "manual_seed", 46)],
    "_log_softmax": [(TORCH + "/nn/functional.py", "cross_entropy", 3479), (TORCH + "/nn/modules/loss.py", "forward", 1295)],
    "_to_copy": [(TORCH + "/_tensor.py", "to", 1120)],
    "embedding": [(TORCH + "/nn/functional.py", "embedding", 2551), (TORCH + "/nn/modules/sparse.py", "forward", 190)],
}


class Stacks:
    """Frame pool + one stack (list of frame dicts, innermost first) per call site."""

    def __init__(self, rng, n_pyeval_ips=6):
        self.rng = rng
        self.frames = {}
        self.sites = {}
        self.op_chains = {}
        self.bwd_chains = {}
        self.est = 0  # estimated pickle bytes of first emission of frames (+ pool lists)
        self.n_pyeval = n_pyeval_ips
        self.pool = True
        self.stack_lens = []

    def frame(self, name, filename="??", line=0, ip=0):
        key = (name, filename, line, ip)
        f = self.frames.get(key)
        if f is None:
            f = {"name": fresh(name), "filename": fresh(filename), "line": line}
            self.frames[key] = f
            self.est += 4 + 6 + slen(name) + slen(filename) + ilen(line)
        return f

    def cpp(self, names, ip=0):
        return [self.frame(n, "??", 0, ip) for n in names]

    def cpp_var(self, names, ipv=16):
        """C++ frames of one function seen at several return addresses (inlining/templates):
        same strings, distinct frame dicts (py_symbolize dedups by instruction pointer)."""
        rng = self.rng
        return [self.frame(n, "??", 0, rng.randrange(ipv)) for n in names]

    def _op_names(self, op):
        ch = self.op_chains.get(op)
        if ch is None:
            rng = self.rng
            sig = rng.choice(SIGS)
            n = rng.randint(5, 10)
            idx = sorted(rng.sample(range(len(OP_TEMPLATES)), n))
            ch = (rng.randrange(len(PROLOGUE_EMPTY)), [OP_TEMPLATES[i].format(op=op, sig=sig) for i in idx])
            self.op_chains[op] = ch
        return ch

    def _op_frames(self, op):
        pe, names = self._op_names(op)
        return self.cpp(PROLOGUE) + self.cpp(PROLOGUE_EMPTY[pe]) + self.cpp_var(names)

    def _modcall(self):
        return [(TORCH + "/nn/modules/module.py", "_call_impl", 1750),
                (TORCH + "/nn/modules/module.py", "_wrapped_call_impl", 1739)]

    def site(self, key, kind, op, layer=0, k=0):
        s = self.sites.get(key)
        if s is not None:
            return s
        rng = self.rng
        if kind == "b":  # backward: autograd engine thread, C++ frames only
            bf = self.bwd_chains.get(op)
            if bf is None:
                sig = rng.choice(SIGS)
                bf = [t.format(op=op, sig=sig) for t in rng.sample(BWD_FORMULA, rng.randint(5, 8))]
                self.bwd_chains[op] = bf
            opn = "".join(p.capitalize() for p in op.strip("_").split("_"))
            eng = [e.format(Op=opn) for e in ENGINE]
            s = self._op_frames(op) + self.cpp_var(bf) + self.cpp_var(eng[:1], 3) + self.cpp(eng[1:])
        else:
            leaf = FWD_LEAF.get(op, [(TORCH + "/_tensor.py", "__torch_function__", 1512)])
            py = list(leaf)
            if kind == "f":
                sub = "Attention" if k < 12 else "MLP"
                py += self._modcall()
                py.append((USER + "/model.py", "forward", (60 if sub == "Attention" else 110) + 2 * k + (layer % 8)))
                py += self._modcall()
                if rng.random() < 0.3:
                    py += [(TORCH + "/utils/checkpoint.py", "forward", 264),
                           (TORCH + "/autograd/function.py", "apply", 575),
                           (TORCH + "/utils/checkpoint.py", "checkpoint", 495)]
                py.append((USER + "/model.py", "forward", 140 + (layer % 4)))
                py += self._modcall()
                py.append((USER + "/model.py", "forward", 171))
                py += self._modcall()
                py += [(TORCH + "/nn/parallel/distributed.py", "_run_ddp_forward", 1468),
                       (TORCH + "/nn/parallel/distributed.py", "forward", 1643)]
                py.append((USER + "/train.py", "train_step", 88 + rng.randint(0, 3)))
            elif kind == "o":  # optimizer
                py += [(TORCH + "/optim/adamw.py", "_multi_tensor_adamw", 600 + 7 * k + rng.randint(0, 3)),
                       (TORCH + "/optim/adamw.py", "adamw", 400),
                       (TORCH + "/optim/optimizer.py", "maybe_fallback", 154),
                       (TORCH + "/optim/adamw.py", "step", 243),
                       (TORCH + "/optim/optimizer.py", "_use_grad", 79),
                       (TORCH + "/optim/optimizer.py", "wrapper", 487),
                       (TORCH + "/optim/lr_scheduler.py", "wrapper", 130),
                       (USER + "/train.py", "train_step", 101)]
            else:  # misc / setup
                py += [(USER + "/train.py", "train_step", 80 + k),
                       (USER + "/data.py", "to_device", 33 + k)]
            py += [(USER + "/train.py", "train", 150 + (k % 5)), (USER + "/train.py", "main", 188),
                   (USER + "/train.py", "<module>", 212)]
            binding = self.cpp([BINDING[0].format(op=op)]) + self.cpp_var(BINDING[1:], 2)
            # CPython >= 3.11 inlines Python->Python calls, so there are fewer
            # _PyEval_EvalFrameDefault C frames than Python frames; each Python frame is inserted
            # before the next PyEval frame, leftovers are appended after the last C++ frame.
            n_eval = max(1, min(len(py), len(py) // 2 + rng.randint(-2, 2)))
            mid = []
            for (fn, func, line) in py[:n_eval]:
                mid.append(self.frame(func, fn, line))
                mid.append(self.frame("_PyEval_EvalFrameDefault", "??", 0, rng.randrange(self.n_pyeval)))
                if rng.random() < 0.6:
                    mid.append(self.frame(rng.choice(PY_GLUE), "??", 0, rng.randrange(2)))
            tail = [self.frame(func, fn, line) for (fn, func, line) in py[n_eval:]]
            s = self._op_frames(op) + binding + mid + self.cpp(TAIL) + tail
        # keep 30..80 frames: trim C++ glue from the middle / pad with dispatcher frames
        while len(s) > 80:
            del s[len(PROLOGUE) + 3]
        if len(s) < 30:
            pad = self.cpp_var(["c10::Dispatcher::callBoxed(c10::OperatorHandle const&, std::vector<c10::IValue, std::allocator<c10::IValue> >*) const",
                                "c10::BoxedKernel::callBoxed(c10::OperatorHandle const&, c10::DispatchKeySet, std::vector<c10::IValue, std::allocator<c10::IValue> >*) const"] * 8, 4)
            s[len(PROLOGUE) + 3:len(PROLOGUE) + 3] = pad[:30 - len(s)]
        self.sites[key] = s
        self.stack_lens.append(len(s))
        if self.pool:
            self.est += 4 + 5 * len(s)
        return s


# ----------------------------------------------------------------------------------------------
# Caching-allocator simulation
# ----------------------------------------------------------------------------------------------


class Block:
    __slots__ = ("addr", "size", "req", "alloc", "pend", "prev", "next", "seg", "fr", "sl")


class Segment:
    __slots__ = ("addr", "size", "stream", "small", "head", "fr")


class OOM(Exception):
    pass


class Device:
    # est. pickle bytes per trace entry excluding size, stream and frames (see spec §9.2):
    # dict 4 + keys (size/stream/frames BINGET 2, others LONG_BINGET 5) 31 + action 5 +
    # addr LONG1(6) 8 + time_us LONG1(7) 9 + 'N/A' 6 + '' 5
    BASE = 4 + 31 + 5 + 8 + 9 + 6 + 5

    def __init__(self, dev, per_alloc, rng):
        self.dev = dev
        self.per_alloc = per_alloc
        self.rng = rng
        self.free = {}
        self.blocks = {}
        self.segs = {}
        base = 0x7F0000000000 + dev * 0x2000000000
        self.va = [[base, 0x2000000000]]  # free VA ranges [addr, size], sorted
        self.reserved = 0
        self.trace = []
        self.t = TIME0 + dev * 1234
        self.dts = [rng.choice((1, 2, 3, 5, 8, 13, 21, 40, 90)) for _ in range(4096)]
        self.ti = 0
        self.est = 0
        self.pending = []  # (due index, block), FIFO
        self.annotations = []
        self.counts = {}

    # -- trace -------------------------------------------------------------------------------
    def frames_of(self, stack):
        if self.per_alloc:  # first emission: whole list; ~half of the refs are BINGET (memo < 256)
            self.est += 4 + (7 * len(stack)) // 2 - 5
            return list(stack)
        return stack

    def emit(self, action, addr, size, stream, fr, key="addr"):
        self.ti += 1
        self.t += self.dts[self.ti & 4095]
        self.trace.append({"action": action, key: addr, "size": size, "stream": stream,
                           "time_us": self.t, "compile_context": NA_HEAD + NA_TAIL,
                           "user_metadata": "", "frames": fr})
        self.est += self.BASE + 5 + ilen(size) + ilen(stream)
        if self.pending and self.pending[0][0] <= self.ti:
            self._complete(self.pending.pop(0)[1])

    # -- VA ----------------------------------------------------------------------------------
    def va_alloc(self, size):
        for r in self.va:
            if r[1] >= size:
                a = r[0]
                r[0] += size
                r[1] -= size
                if r[1] == 0:
                    self.va.remove(r)
                return a
        raise RuntimeError("VA exhausted")

    def va_free(self, addr, size):
        va = self.va
        i = bisect.bisect_left(va, [addr, 0])
        va.insert(i, [addr, size])
        if i + 1 < len(va) and va[i][0] + va[i][1] == va[i + 1][0]:
            va[i][1] += va[i + 1][1]
            del va[i + 1]
        if i > 0 and va[i - 1][0] + va[i - 1][1] == va[i][0]:
            va[i - 1][1] += va[i][1]
            del va[i]

    # -- allocator ---------------------------------------------------------------------------
    def _fl(self, small, stream):
        k = (small, stream)
        fl = self.free.get(k)
        if fl is None:
            fl = self.free[k] = []
        return fl

    def malloc(self, size, stack, stream=0):
        r = 512 if size < 512 else (size + 511) & ~511
        small = r <= kSmallSize
        fl = self._fl(small, stream)
        i = bisect.bisect_left(fl, (r, 0))
        fr = None
        if i < len(fl):
            b = self.blocks[fl.pop(i)[1]]
        else:
            ssize = kSmallBuffer if small else (kLargeBuffer if r < kMinLargeAlloc else (r + kRoundLarge - 1) // kRoundLarge * kRoundLarge)
            if self.reserved + ssize > CAPACITY:
                self.empty_cache()
                if self.reserved + ssize > CAPACITY:
                    fr = self.frames_of(stack)
                    self.emit("oom", CAPACITY - self.reserved, r, stream, fr, key="device_free")
                    self.counts["oom"] = self.counts.get("oom", 0) + 1
                    raise OOM()
                fl = self._fl(small, stream)
            addr = self.va_alloc(ssize)
            self.reserved += ssize
            seg = Segment()
            seg.addr, seg.size, seg.stream, seg.small = addr, ssize, stream, small
            b = Block()
            b.addr, b.size, b.req, b.alloc, b.pend, b.prev, b.next, b.seg = addr, ssize, 0, False, False, None, None, seg
            b.fr = None
            seg.head = b
            self.blocks[addr] = b
            self.segs[addr] = seg
            fr = self.frames_of(stack)
            seg.fr = fr
            self.emit("segment_alloc", addr, ssize, stream, fr)
        rem = b.size - r
        if (rem >= 512) if small else (rem > kSmallSize):
            nb = Block()
            nb.addr, nb.size, nb.req, nb.alloc, nb.pend, nb.prev, nb.next, nb.seg = b.addr + r, rem, 0, False, False, b, b.next, b.seg
            nb.fr = None
            if b.next is not None:
                b.next.prev = nb
            b.next = nb
            b.size = r
            self.blocks[nb.addr] = nb
            bisect.insort(fl, (rem, nb.addr))
        b.alloc = True
        b.req = size
        if fr is None:
            fr = self.frames_of(stack)
        b.fr = fr
        self.emit("alloc", b.addr, size, stream, fr)
        return b

    def free_(self, b, delay=0):
        """free_requested now; free_completed now, or `delay` trace entries later (record_stream)."""
        b.alloc = False
        if delay:
            b.pend = True
            self.emit("free_requested", b.addr, b.req, b.seg.stream, b.fr)
            self.pending.append((self.ti + delay, b))
        else:
            self.emit("free_requested", b.addr, b.req, b.seg.stream, b.fr)
            self._complete(b)

    def _unfree(self, b):
        fl = self.free[(b.seg.small, b.seg.stream)]
        i = bisect.bisect_left(fl, (b.size, b.addr))
        del fl[i]

    def _complete(self, b):
        b.pend = False
        self.emit("free_completed", b.addr, b.req, b.seg.stream, b.fr)
        b.fr = None
        b.req = 0
        p = b.prev
        if p is not None and not p.alloc and not p.pend:
            self._unfree(p)
            p.size += b.size
            p.next = b.next
            if b.next is not None:
                b.next.prev = p
            del self.blocks[b.addr]
            b = p
        n = b.next
        if n is not None and not n.alloc and not n.pend:
            self._unfree(n)
            b.size += n.size
            b.next = n.next
            if n.next is not None:
                n.next.prev = b
            del self.blocks[n.addr]
        bisect.insort(self.free[(b.seg.small, b.seg.stream)], (b.size, b.addr))

    def empty_cache(self):
        for addr in sorted(self.segs):
            seg = self.segs[addr]
            h = seg.head
            if not h.alloc and not h.pend and h.next is None:
                self._unfree(h)
                del self.blocks[addr]
                del self.segs[addr]
                self.va_free(addr, seg.size)
                self.reserved -= seg.size
                self.emit("segment_free", addr, seg.size, seg.stream, seg.fr)

    def flush_pending(self):
        while self.pending:
            self._complete(self.pending.pop(0)[1])

    # -- final state -------------------------------------------------------------------------
    def segment_dicts(self, empty_frames):
        out = []
        for addr in sorted(self.segs):
            seg = self.segs[addr]
            blocks = []
            alloc_sz = active_sz = req_sz = 0
            b = seg.head
            while b is not None:
                if b.alloc:
                    state = "active_allocated"
                    alloc_sz += b.size
                elif b.pend:
                    state = "active_pending_free"
                else:
                    state = "inactive"
                if b.alloc or b.pend:
                    active_sz += b.size
                    req_sz += b.req
                blocks.append({"address": b.addr, "size": b.size, "requested_size": b.req,
                               "state": state, "frames": b.fr if b.fr is not None else empty_frames})
                b = b.next
            d = {"device": self.dev, "address": seg.addr, "total_size": seg.size,
                 "allocated_size": alloc_sz, "active_size": active_sz, "requested_size": req_sz,
                 "stream": seg.stream, "segment_type": "small" if seg.small else "large",
                 "segment_pool_id": tuple([0, 0]), "is_expandable": False}
            if seg.fr is None or len(seg.fr) == 0:
                d["frames"] = empty_frames
                d["blocks"] = blocks
            else:  # Module.cpp inserts non-empty frames after symbolization -> after blocks
                d["blocks"] = blocks
                d["frames"] = seg.fr
            out.append(d)
        return out


# ----------------------------------------------------------------------------------------------
# Workload: transformer training (DDP-ish), bf16 params, fp32 AdamW state
# ----------------------------------------------------------------------------------------------


class Workload:
    def __init__(self, dev, stacks, rng, budget_fn, layers, hidden=2048, batch=1, vocab=65536):
        self.d = dev
        self.st = stacks
        self.rng = rng
        self.budget_fn = budget_fn
        self.L = layers
        self.H = hidden
        self.B = batch
        self.V = vocab
        self.grads = []

    def A(self, key, op, size, stream=0, kind=None, layer=0, k=0):
        if self.d.est >= self.budget_fn():
            raise Done()
        stack = self.st.site(key, kind or key[0], op, layer, k)
        try:
            return self.d.malloc(size, stack, stream)
        except OOM:  # the workload catches the OutOfMemoryError and carries on
            return None

    def F(self, b, delay=0):
        if b is None:
            return
        if self.d.est >= self.budget_fn():
            raise Done()
        self.d.free_(b, delay)

    def params(self):
        H = self.H
        per_layer = []
        for l in range(self.L):
            ps = [H * 2, H * 2, H * H * 2, H * 2, H * H * 2, H * 2, H * H * 2, H * 2, H * H * 2, H * 2,
                  H * 2, H * 2, 4 * H * H * 2, 4 * H * 2, 4 * H * H * 2, H * 2]
            per_layer.append(ps)
        return per_layer

    def run(self):
        rng = self.rng
        d = self.d
        H, B, V, L = self.H, self.B, self.V, self.L
        psizes = self.params()
        # setup: model.to('cuda')
        self.A(("m", "emb"), "_to_copy", V * H * 2, kind="m", k=0)
        for l in range(L):
            for j, s in enumerate(psizes[l]):
                self.A(("s", l % 4, j), "_to_copy", s, kind="m", k=1 + j)
        self.A(("m", "head"), "_to_copy", V * H * 2, kind="m", k=2)
        it = 0
        state_done = False
        while True:
            S = rng.choice((1024, 2048, 2048, 2048, 3072, 4096))
            d.annotations.append((fresh("ProfilerStep#%d" % it), "START", d.t))
            # zero_grad(set_to_none=True)
            for g in self.grads:
                self.F(g)
            self.grads = []
            x = B * S * H * 2
            tok = self.A(("m", "tok"), "_to_copy", B * S * 8, kind="m", k=3)
            h0 = self.A(("m", "embf"), "embedding", x, kind="m", k=4)
            saved = []
            for l in range(L):
                sv = []
                A = lambda k, op, size, stream=0: self.A(("f", l, k), op, size, stream, "f", l, k)
                ln = A(0, "native_layer_norm", x); sv += [ln, A(1, "native_layer_norm", B * S * 4), A(2, "native_layer_norm", B * S * 4)]
                q = A(3, "mm", x); k_ = A(4, "mm", x); v = A(5, "mm", x)
                qr = A(6, "mul", x); t = A(7, "cat", x); self.F(t); kr = A(8, "mul", x)
                self.F(q); self.F(k_)
                at = A(9, "_scaled_dot_product_flash_attention", x)
                lse = A(10, "_scaled_dot_product_flash_attention", B * 16 * S * 4)
                sv += [qr, kr, v, at, lse]
                o = A(11, "mm", x)
                res = A(12, "add", x); self.F(o)
                ln2 = A(13, "native_layer_norm", x)
                up = A(14, "addmm", 4 * x); g = A(15, "gelu", 4 * x)
                dn = A(16, "addmm", x)
                mask = A(17, "native_dropout", x // 2); do = A(18, "native_dropout", x); self.F(dn)
                s1 = A(19, "empty", 512); self.F(s1)
                h2 = A(20, "add", x)  # next layer's input, saved by its layer_norm
                sv.insert(0, h2)
                sv += [res, ln2, up, g, mask, do]
                saved.append(sv)
            lnf = self.A(("m", "lnf"), "native_layer_norm", x, kind="m", k=5)
            logits = self.A(("m", "logits"), "mm", B * S * V * 2, kind="m", k=6)
            lsm = self.A(("m", "lsm"), "_log_softmax", B * S * V * 4, kind="m", k=7)
            loss = self.A(("m", "loss"), "_log_softmax", 512, kind="m", k=8)
            if it % 97 == 5 or rng.random() < 0.002:  # rare OOM: an oversized request (e.g. a bigger vocab chunk)
                try:
                    in_use = sum(sg.size for sg in d.segs.values() if sg.head.alloc or sg.head.pend or sg.head.next is not None)
                    self.A(("m", "oom"), "mm", CAPACITY - in_use + rng.randint(1, 8) * 256 * MiB, kind="m", k=9)
                except OOM:
                    pass
            # backward (autograd engine thread)
            gl = self.A(("b", "lsm"), "_log_softmax", B * S * V * 4, kind="b", k=0)
            self.F(lsm)
            self.F(logits)
            gh = self.A(("b", "head"), "mm", x, kind="b", k=1)
            self.F(gl)
            self.grads.append(self.A(("b", "headw"), "mm", V * H * 2, kind="b", k=2))
            self.F(lnf)
            for l in reversed(range(L)):
                A = lambda k, op, size, stream=0: self.A(("b", l, k), op, size, stream, "b", l, k)
                sv = saved[l]
                ps = psizes[l]
                # MLP backward
                t1 = A(0, "native_dropout", x); t2 = A(1, "mm", 4 * x)
                self.grads.append(A(2, "mm", ps[14])); self.grads.append(A(3, "sum", ps[15]))
                t3 = A(4, "gelu", 4 * x); self.F(t2)
                t4 = A(5, "mm", x); self.grads.append(A(6, "mm", ps[12])); self.grads.append(A(7, "sum", ps[13]))
                self.F(t3)
                t5 = A(8, "native_layer_norm", x); self.grads += [A(9, "native_layer_norm", ps[10]), A(10, "native_layer_norm", ps[11])]
                self.F(t4); self.F(t1)
                for b in sv[-6:][::-1]:
                    self.F(b)
                # attention backward
                t6 = A(11, "mm", x); self.grads += [A(12, "mm", ps[8]), A(13, "sum", ps[9])]
                g_q = A(14, "_scaled_dot_product_flash_attention", x); g_k = A(15, "_scaled_dot_product_flash_attention", x)
                g_v = A(16, "_scaled_dot_product_flash_attention", x)
                sm = A(17, "_scaled_dot_product_flash_attention", B * 16 * S * 4); self.F(sm)
                self.F(t6)
                for j, gg in enumerate((g_q, g_k, g_v)):
                    tt = A(18 + j, "mul", x); self.F(tt)
                    self.grads.append(A(21 + j, "mm", ps[2 + 2 * j] if j < 2 else ps[6]))
                    self.grads.append(A(24 + j, "sum", ps[3 + 2 * j] if j < 2 else ps[7]))
                t7 = A(27, "mm", x)
                for gg in (g_q, g_k, g_v):
                    self.F(gg)
                self.F(t5)
                t8 = A(28, "native_layer_norm", x); self.grads += [A(29, "native_layer_norm", ps[0]), A(30, "native_layer_norm", ps[1])]
                self.F(t7); self.F(t8)
                for b in sv[:-6][::-1]:
                    self.F(b)
                if l % 2 == 0:  # DDP bucket all-reduce on the comm stream (record_stream)
                    bk = A(31, "empty", 25 * MiB, SIDE_STREAM)
                    self.F(bk, delay=rng.randint(20, 400))
            self.grads.append(self.A(("b", "emb"), "embedding", V * H * 2, kind="b", k=3))
            self.F(gh); self.F(h0); self.F(tok); self.F(loss)
            # optimizer: foreach AdamW
            if not state_done:
                for l in range(L):
                    for j, s in enumerate(psizes[l]):
                        for st in range(3):  # fp32 master, exp_avg, exp_avg_sq
                            self.A(("os", l % 4, st), "zeros_like", 2 * s, kind="o", k=10 + st)
                state_done = True
            for l in range(L):
                ps = psizes[l]
                A = lambda k, op, size: self.A(("o", l, k), op, size, 0, "o", l, k)
                t1 = [A(0, "_foreach_mul", 2 * s) for s in ps]
                t2 = [A(1, "_foreach_sqrt", 2 * s) for s in ps]
                t3 = [A(2, "_foreach_div", 2 * s) for s in ps]
                for b in t2:
                    self.F(b)
                t4 = [A(3, "_foreach_add", 2 * s) for s in ps]
                for b in t1 + t3 + t4:
                    self.F(b)
            d.annotations.append((fresh("ProfilerStep#%d" % it), "END", d.t))
            if it % 61 == 3 or rng.random() < 0.005:  # torch.cuda.empty_cache() now and then
                d.flush_pending()
                d.empty_cache()
            it += 1
            self.iterations = it


# ----------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--target-mb", type=float, required=True, help="approximate output size in MB (1e6 bytes)")
    ap.add_argument("--devices", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--protocol", type=int, default=4)
    ap.add_argument("--layers", type=int, default=40, help="transformer layers (more -> more segments/stacks)")
    ap.add_argument("--stack-sharing", choices=("pool", "per-alloc"), default="per-alloc")
    args = ap.parse_args()

    gc.disable()
    t0 = time.perf_counter()
    rng = random.Random(args.seed)
    stacks = Stacks(rng)
    target = int(args.target_mb * 1e6)
    per_alloc = args.stack_sharing == "per-alloc"
    stacks.pool = not per_alloc
    devs = []
    done_est = 0
    for dv in range(args.devices):
        d = Device(dv, per_alloc, random.Random(args.seed * 1000 + dv + 1))
        budget = (lambda dv=dv, d0=done_est: (target * (dv + 1)) // args.devices - d0 - stacks.est
                  - 3000 * args.devices)
        w = Workload(d, stacks, random.Random(args.seed * 7919 + dv), budget, args.layers)
        w.iterations = 0
        try:
            w.run()
        except Done:
            pass
        done_est += d.est
        devs.append(d)
        print(f"device {dv}: {len(d.trace):,} trace entries, {w.iterations} full iterations, "
              f"{len(d.segs)} segments, reserved {d.reserved / GiB:.1f} GiB", file=sys.stderr)
    t_build = time.perf_counter() - t0

    empty_frames = []
    segments = []
    for d in devs:
        segments += d.segment_dicts(empty_frames)
    annotations = []
    for d in devs:
        for (name, stage, t) in d.annotations:
            # metadata keys/values are fresh py::str (std::string) per entry; then device, time_us
            annotations.append({fresh("name"): name, fresh("stage"): fresh(stage), "device": d.dev, "time_us": t})
    annotations.sort(key=lambda a: a["time_us"])
    allocator_settings = {
        "PYTORCH_CUDA_ALLOC_CONF": "",
        "max_split_size": -1,
        "garbage_collection_threshold": 0.0,
        "expandable_segments": False,
        "pinned_num_register_threads": 1,
        "release_lock_on_cudamalloc": False,
        "pinned_use_cuda_host_register": False,
        "roundup_power2_divisions": {str(1 << i): 0 for i in range(16)},
    }
    snapshot = {
        "segments": segments,
        "device_traces": [d.trace for d in devs],
        "allocator_settings": allocator_settings,
        "external_annotations": annotations,
    }
    t1 = time.perf_counter()
    with open(args.out, "wb") as f:
        pickle.dump(snapshot, f, protocol=args.protocol)
    t_dump = time.perf_counter() - t1
    size = os.path.getsize(args.out)
    n = sum(len(d.trace) for d in devs)
    counts = {}
    for d in devs:
        for e in d.trace[:: max(1, len(d.trace) // 200000)]:
            counts[e["action"]] = counts.get(e["action"], 0) + 1
    ooms = sum(d.counts.get("oom", 0) for d in devs)
    nblocks = sum(len(s["blocks"]) for s in segments)
    states = {}
    for s in segments:
        for b in s["blocks"]:
            states[b["state"]] = states.get(b["state"], 0) + 1
    lens = stacks.stack_lens
    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"wrote {args.out}")
    print(f"trace entries: {n:,}  ({n / (size / 1e6):,.0f} per MB)")
    print(f"file size: {size:,} bytes ({size / 1e6:,.1f} MB; target {args.target_mb:g} MB)")
    print(f"segments: {len(segments):,}  blocks: {nblocks:,}  states: {states}")
    print(f"unique frames: {len(stacks.frames):,}  unique stacks (sites): {len(lens):,}  "
          f"stack depth {min(lens)}-{max(lens)} (mean {sum(lens) / len(lens):.0f})  sharing: {args.stack_sharing}")
    print(f"oom entries: {ooms}  external_annotations: {len(annotations):,}  "
          f"action mix (sampled): {dict(sorted(counts.items(), key=lambda kv: -kv[1]))}")
    print(f"time: build {t_build:.1f}s + pickle.dump {t_dump:.1f}s = {t_build + t_dump:.1f}s;  "
          f"peak RSS {rss_kib / 1024 / 1024:.2f} GiB")
    sys.stdout.flush()
    os._exit(0)  # skip tearing down millions of objects


if __name__ == "__main__":
    main()
