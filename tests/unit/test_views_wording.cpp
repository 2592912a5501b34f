// The wording of the views (issue 11): the "what" of a site is never C++ plumbing, and the
// budget headline reads as an expert would say it.
//
// What: TensorIterator's set-up, structured kernels' shape checks, storage resizing, backward
// formulas' helpers, c10:: and std:: frames are passed over for the aten op (at::native::relu) or,
// when the op has no frame of its own, the op its dispatch stub names (at::_ops::mul_Tensor). One
// case per kind of plumbing, with the stacks' shapes from the real corpus (Constructor-Sun,
// HugePandaCoder, JasperSolt).
//
// Budget sentence (memory_budget.h budget_sentence): kinds named as an expert names them, "all"
// instead of 100%, no before-recording clause under 1% (never "0% was allocated before
// recording"), one kind said once, the rest after five kinds counted unless it is one kind.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "analysis/attribution.h"
#include "analysis/frame_filter.h"
#include "analysis/memory_budget.h"
#include "analysis/analyze.h"
#include "analysis/site_what.h"
#include "model/load.h"
#include "report/text_report.h"
#include "test_support.h"

namespace memsnap {
namespace views_wording_tests {

// A native frame ("??:0") of a C++ function.
struct Cxx {
  std::string name;
};

// One stack: the C++ frames innermost first, then the user's line.
Snapshot stack_with_user_line(const std::vector<Cxx>& native) {
  std::vector<test::StackFrame> frames;
  for (const Cxx& c : native) frames.push_back({"??", c.name, 0});
  frames.push_back({"/home/me/model.py", "forward", 42});
  return test::one_stack(frames);
}

constexpr StackId kStack = 1;

// The site's what_op (and the what, which falls back to it: no library frame in these stacks).
std::string what_op_of(const std::vector<Cxx>& native) {
  const Snapshot s = stack_with_user_line(native);
  const SiteChoice choice = choose_site(s, kStack);
  EXPECT_TRUE(choice.found);
  const Site site = describe_site(s, kStack, choice);
  EXPECT_EQ(site.site, "/home/me/model.py:42");
  EXPECT_EQ(site.what, site.what_op);
  return site.what_op;
}

const std::vector<Cxx> kMalloc = {
    {"c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long)"},
    {"at::TensorBase at::detail::_empty_generic<long>(c10::ArrayRef<long>, c10::Allocator*, c10::DispatchKeySet, c10::ScalarType)"},
    {"at::detail::empty_cuda(c10::ArrayRef<long>, c10::TensorOptions const&)"},
    {"at::(anonymous namespace)::create_out(c10::ArrayRef<long>, c10::ArrayRef<long>, c10::TensorOptions const&)"},
};

std::vector<Cxx> after_malloc(std::vector<Cxx> frames) {
  std::vector<Cxx> out = kMalloc;
  out.insert(out.end(), frames.begin(), frames.end());
  return out;
}

TEST(SiteWhatPlumbing, TensorIteratorBuildOfAnElementwiseOpNamesTheOpsStub) {
  // a * b: TensorIterator allocates the output; no at::native frame names mul.
  EXPECT_EQ(what_op_of(after_malloc({
                {"at::TensorIteratorBase::allocate_or_resize_outputs()"},
                {"at::TensorIteratorBase::build(at::TensorIteratorConfig&)"},
                {"at::TensorIteratorBase::build_borrowing_binary_op(at::TensorBase const&, at::TensorBase const&, at::TensorBase const&)"},
                {"at::(anonymous namespace)::wrapper_CUDA_mul_Tensor(at::Tensor const&, at::Tensor const&)"},
                {"c10::impl::wrap_kernel_functor_unboxed_<...>::call(c10::OperatorKernel*, c10::DispatchKeySet, at::Tensor const&)"},
                {"at::_ops::mul_Tensor::redispatch(c10::DispatchKeySet, at::Tensor const&, at::Tensor const&)"},
                {"torch::autograd::VariableType::(anonymous namespace)::mul_Tensor(c10::DispatchKeySet, at::Tensor const&)"},
                {"at::_ops::mul_Tensor::call(at::Tensor const&, at::Tensor const&)"},
                {"torch::autograd::THPVariable_mul(_object*, _object*, _object*)"},
                {"_object* torch::autograd::TypeError_to_NotImplemented_<&torch::autograd::THPVariable_mul>(_object*, _object*, _object*)"},
            })),
            "at::_ops::mul_Tensor");
}

TEST(SiteWhatPlumbing, TensorIteratorFastSetUpUnderReluNamesRelu) {
  EXPECT_EQ(what_op_of(after_malloc({
                {"at::TensorIteratorBase::fast_set_up(at::TensorIteratorConfig const&)"},
                {"at::TensorIteratorBase::build(at::TensorIteratorConfig&)"},
                {"at::meta::structured_clamp_min::meta(at::Tensor const&, c10::Scalar const&)"},
                {"at::(anonymous namespace)::wrapper_CUDA_clamp_min(at::Tensor const&, c10::Scalar const&)"},
                {"at::_ops::clamp_min::call(at::Tensor const&, c10::Scalar const&)"},
                {"at::native::relu(at::Tensor const&)"},
            })),
            "at::native::relu");
}

TEST(SiteWhatPlumbing, StructuredKernelShapeChecksWithAReturnTypeArePassedOver) {
  // "void at::meta::..." starts with its return type; the op is the einsum that called bmm.
  EXPECT_EQ(what_op_of(after_malloc({
                {"void at::meta::common_checks_baddbmm_bmm<at::meta::structured_bmm>(at::meta::structured_bmm&, at::Tensor const&)"},
                {"at::meta::structured_bmm::meta(at::Tensor const&, at::Tensor const&)"},
                {"at::(anonymous namespace)::wrapper_CUDA_bmm(at::Tensor const&, at::Tensor const&)"},
                {"at::_ops::bmm::call(at::Tensor const&, at::Tensor const&)"},
                {"at::native::einsum(c10::basic_string_view<char>, c10::ArrayRef<at::Tensor>, std::optional<c10::ArrayRef<long> >)"},
            })),
            "at::native::einsum");
}

TEST(SiteWhatPlumbing, StorageResizingNamesTheOpThatResized) {
  EXPECT_EQ(what_op_of({
                {"c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long)"},
                {"at::native::resize_bytes_cuda(c10::StorageImpl*, unsigned long)"},
                {"at::native::resize_cuda_(at::Tensor const&, c10::ArrayRef<long>, std::optional<c10::MemoryFormat>)"},
                {"at::_ops::resize_::call(at::Tensor const&, c10::ArrayRef<c10::SymInt>, std::optional<c10::MemoryFormat>)"},
                {"void at::native::nonzero_cuda_out_impl<bool>(at::Tensor const&, at::Tensor&)"},
                {"at::native::nonzero_out_cuda(at::Tensor const&, at::Tensor&)"},
            }),
            "at::native::nonzero_cuda_out_impl<bool>");
}

TEST(SiteWhatPlumbing, BackwardFormulaHelpersGiveWayToTheirNode) {
  EXPECT_EQ(what_op_of(after_malloc({
                {"at::native::mm(at::Tensor const&, at::Tensor const&)"},
                {"torch::autograd::generated::details::mm_mat2_backward(at::Tensor const&, at::Tensor const&, c10::ArrayRef<c10::SymInt>)"},
            })),
            "at::native::mm");
  EXPECT_EQ(what_op_of({
                {"c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long)"},
                {"torch::autograd::generated::details::mm_mat2_backward(at::Tensor const&, at::Tensor const&, c10::ArrayRef<c10::SymInt>)"},
                {"torch::autograd::generated::MmBackward0::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)"},
            }),
            "MmBackward0::apply");
}

// Kernels' helpers in at::native's anonymous namespace name their op (the corpus holds
// addmm_out_cuda_impl, index_put_with_sort_kernel, ...): they stay, without the namespace.
TEST(SiteWhatPlumbing, KernelsAnonymousHelpersNameTheirOp) {
  for (const char* helper : {"void at::native::(anonymous namespace)::addmm_out_cuda_impl(at::Tensor&, at::Tensor const&)",
                             "at::native::{anonymous}::addmm_out_cuda_impl(at::Tensor&, at::Tensor const&)"}) {
    EXPECT_EQ(what_op_of({
                  {"c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long)"},
                  {helper},
                  {"at::native::structured_mm_out_cuda::impl(at::Tensor const&, at::Tensor const&, at::Tensor const&)"},
              }),
              "at::native::addmm_out_cuda_impl")
        << helper;
  }
}

TEST(SiteWhatPlumbing, C10AndStandardLibraryFramesArePassedOver) {
  EXPECT_EQ(what_op_of({
                {"c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long)"},
                {"c10::StorageImpl::StorageImpl(c10::StorageImpl::use_byte_size_t, c10::SymInt const&, c10::Allocator*, bool)"},
                {"std::_Function_handler<void (), at::native::copy_kernel_cuda(at::TensorIterator&, bool)::{lambda()#1}>::_M_invoke(std::_Any_data const&)"},
                {"__gnu_cxx::__normal_iterator<at::Tensor*, std::vector<at::Tensor> >::operator++()"},
                {"at::native::_to_copy(at::Tensor const&, std::optional<c10::ScalarType>, bool)"},
            }),
            "at::native::_to_copy");
}

TEST(SiteWhatPlumbing, AnOpsAllocationFactoryIsNotItsWhat) {
  // x.clone(): empty_strided's stub is inner, clone is the op (and no thread start-up frame).
  EXPECT_EQ(what_op_of({
                {"c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long)"},
                {"at::detail::empty_strided_cuda(c10::ArrayRef<long>, c10::ArrayRef<long>, c10::ScalarType)"},
                {"at::_ops::empty_strided::redispatch(c10::DispatchKeySet, c10::ArrayRef<c10::SymInt>, c10::ArrayRef<c10::SymInt>)"},
                {"at::_ops::empty_strided::call(c10::ArrayRef<c10::SymInt>, c10::ArrayRef<c10::SymInt>)"},
                {"at::native::clone(at::Tensor const&, std::optional<c10::MemoryFormat>)"},
                {"at::_ops::clone::call(at::Tensor const&, std::optional<c10::MemoryFormat>)"},
            }),
            "at::native::clone");
  // Only factories' stubs: nothing names the op.
  EXPECT_EQ(what_op_of({
                {"c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long)"},
                {"at::_ops::empty_memory_format::call(c10::ArrayRef<c10::SymInt>, std::optional<c10::ScalarType>)"},
            }),
            "");
}

TEST(SiteWhatPlumbing, OutputResizingNamesTheOp) {
  EXPECT_EQ(what_op_of({
                {"c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long)"},
                {"bool at::native::_resize_output<long>(at::Tensor const&, c10::ArrayRef<long>)"},
                {"at::native::resize_output(at::Tensor const&, c10::ArrayRef<long>)"},
                {"at::native::index_select_out_cuda(at::Tensor const&, long, at::Tensor const&, at::Tensor&)"},
            }),
            "at::native::index_select_out_cuda");
}

TEST(SiteWhatPlumbing, NoInformativeFrameAndNoStubLeavesTheWhatEmpty) {
  EXPECT_EQ(what_op_of({
                {"c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long)"},
                {"at::TensorIteratorBase::build(at::TensorIteratorConfig&)"},
            }),
            "");
}

TEST(SiteWhatPlumbing, ShortNamesLoseReturnTypesAndAnonymousNamespaces) {
  EXPECT_EQ(short_cxx_name("void at::meta::common_checks_baddbmm_bmm<at::meta::structured_bmm>(at::meta::structured_bmm&)"),
            "at::meta::common_checks_baddbmm_bmm<at::meta::structured_bmm>");
  EXPECT_EQ(short_cxx_name("at::Tensor& at::native::add_out(at::Tensor const&, at::Tensor&)"), "at::native::add_out");
  EXPECT_EQ(short_cxx_name("std::vector<at::Tensor, std::allocator<at::Tensor> > at::native::split(at::Tensor const&, long)"),
            "at::native::split");
  EXPECT_EQ(short_cxx_name("at::native::{anonymous}::upsample_kernel(at::Tensor&)"), "at::native::upsample_kernel");
  EXPECT_EQ(short_cxx_name("torch::autograd::generated::MmBackward0::apply(std::vector<at::Tensor>&&)"), "MmBackward0::apply");
  EXPECT_EQ(short_cxx_name("c10::operator<<(std::ostream&, c10::Device const&)"), "c10::operator<<");
}


// ---- the budget sentence ----

constexpr std::uint64_t MiB = 1ull << 20;

BudgetRow row(Category kind, std::uint64_t bytes, Provenance provenance = Provenance::InWindow,
              KindSource source = KindSource::StackRule) {
  return {kind, provenance, source, bytes, 1, 0};
}

MemoryBudget budget(BudgetMoment moment, std::vector<BudgetRow> rows) {
  MemoryBudget b;
  b.moment = moment;
  b.rows = std::move(rows);
  for (const BudgetRow& r : b.rows) b.live_bytes += r.bytes;
  return b;
}

TEST(BudgetSentence, NoBeforeRecordingClauseUnderOnePercent) {
  // 1 MiB of 200 MiB (0.5%) came from before the recording: no "0% was allocated before recording".
  const MemoryBudget b = budget(BudgetMoment::Peak, {row(Category::Activation, 120 * MiB), row(Category::Unknown, 79 * MiB),
                                                     row(Category::Unknown, 1 * MiB, Provenance::BeforeWindow, KindSource::NoEvidence)});
  EXPECT_EQ(budget_sentence(b), "At the peak 200.00 MiB is live on device 0: activations 120.00 MiB, unknown kind 80.00 MiB.");
}

TEST(BudgetSentence, OnePercentOrMoreIsSaid) {
  const MemoryBudget b = budget(BudgetMoment::Peak, {row(Category::Activation, 97 * MiB),
                                                     row(Category::Parameter, 3 * MiB, Provenance::BeforeWindow, KindSource::SizeMatch)});
  EXPECT_EQ(budget_sentence(b),
            "At the peak 100.00 MiB is live on device 0: activations 97.00 MiB, parameters 3.00 MiB; 3% was allocated before recording.");
}

TEST(BudgetSentence, EverythingBeforeRecordingIsAllOfIt) {
  const MemoryBudget b = budget(BudgetMoment::End, {row(Category::OptimizerState, 64 * MiB, Provenance::BeforeWindow),
                                                    row(Category::Parameter, 32 * MiB, Provenance::BeforeWindow),
                                                    row(Category::Gradient, 32 * MiB, Provenance::BeforeWindow)});
  EXPECT_EQ(budget_sentence(b),
            "At the end 128.00 MiB is live on device 0: optimizer state 64.00 MiB, parameters 32.00 MiB, gradients 32.00 MiB (16 bytes "
            "a parameter: fp32 weights, gradients and two AdamW moments); all of it was allocated before recording.");
}

TEST(BudgetSentence, AShareThatOnlyRoundsToAHundredIsAlmostAll) {
  // 999 MiB of 1000 MiB has no stack and no evidence; 1 MiB of unknown kind has a stack.
  MemoryBudget b = budget(BudgetMoment::End, {row(Category::Unknown, 999 * MiB, Provenance::BeforeWindow, KindSource::NoEvidence),
                                              row(Category::Unknown, 1 * MiB, Provenance::InWindow, KindSource::StackRule)});
  b.stackless_sizes = {{999 * MiB, 1}};
  EXPECT_EQ(budget_sentence(b),
            "At the end 1000.00 MiB is live on device 0, all of unknown kind; almost all of it was allocated before recording; almost "
            "all of it has no stack and matches no known set (1 x 999.00 MiB).");
}

TEST(BudgetSentence, OneKindIsSaidOnce) {
  MemoryBudget b = budget(BudgetMoment::End, {row(Category::Unknown, 3 * MiB, Provenance::NoTrace, KindSource::NoEvidence)});
  b.stackless_sizes = {{1 * MiB, 2}, {1 * MiB / 2, 2}};
  EXPECT_EQ(budget_sentence(b),
            "At the end 3.00 MiB is live on device 0, all of unknown kind; all of it has no stack and matches no known set "
            "(2 x 1.00 MiB, 2 x 512.00 KiB).");
  EXPECT_EQ(budget_sentence(budget(BudgetMoment::Peak, {row(Category::Activation, 5 * MiB)})),
            "At the peak 5.00 MiB is live on device 0, all activations.");
}

TEST(BudgetSentence, KindsAreNamedAsAnExpertNamesThem) {
  const MemoryBudget b = budget(BudgetMoment::End, {row(Category::KvCache, 60 * MiB), row(Category::AutocastCopy, 20 * MiB),
                                                    row(Category::Communication, 10 * MiB), row(Category::Workspace, 6 * MiB),
                                                    row(Category::Temporary, 4 * MiB), row(Category::UserContainer, 2 * MiB)});
  // Six kinds: the sixth is named rather than called "other".
  EXPECT_EQ(budget_sentence(b),
            "At the end 102.00 MiB is live on device 0: KV cache 60.00 MiB, autocast weight copies 20.00 MiB, communication buffers "
            "10.00 MiB, workspaces 6.00 MiB, temporaries 4.00 MiB, user containers 2.00 MiB.");
}

TEST(BudgetSentence, SevenKindsCountTheLastTwo) {
  const MemoryBudget b = budget(BudgetMoment::Peak, {row(Category::Activation, 70 * MiB), row(Category::Parameter, 60 * MiB),
                                                     row(Category::Gradient, 50 * MiB), row(Category::OptimizerState, 40 * MiB),
                                                     row(Category::Workspace, 30 * MiB), row(Category::Temporary, 2 * MiB),
                                                     row(Category::Unknown, 1 * MiB)});
  EXPECT_EQ(budget_sentence(b),
            "At the peak 253.00 MiB is live on device 0: activations 70.00 MiB, parameters 60.00 MiB, gradients 50.00 MiB, optimizer "
            "state 40.00 MiB, workspaces 30.00 MiB, 2 other kinds 3.00 MiB.");
}

// Counts of one read in the singular in the text report's prose: a one-event trace (Yiyi-philosophy),
// a single stack-less block (nishi951). The tables' "blocks" column keeps its plural.
TEST(ReportWording, CountsOfOneAreSingular) {
  const auto render = [](const char* name) {
    const auto file = test::corpus_dir() / name;
    const LoadedSnapshot loaded = load_snapshot(file.string());
    return text_report({loaded, analyze(loaded)});
  };
  if (!std::filesystem::exists(test::corpus_dir() / "nishi951_triton-unfold_memory.pkl")) GTEST_SKIP() << "real corpus not found";
  const std::string one_event = render("Yiyi-philosophy_LLM-inference_1.3b_snapshot.pickle");
  EXPECT_NE(one_event.find("  1 event analyzed (1 in the file, 0 dropped)\n"), std::string::npos) << one_event;
  EXPECT_NE(one_event.find("device 0: 0 alloc/free pairs completed, 1 free of memory allocated before the"), std::string::npos);
  const std::string one_block = render("nishi951_triton-unfold_memory.pkl");
  EXPECT_NE(one_block.find("  at the end: 22.00 MiB live in 1 block\n"), std::string::npos) << one_block;
  EXPECT_NE(one_block.find("  - 1 stack-less block: 1 x 21.96 MiB\n"), std::string::npos);
  EXPECT_NE(one_block.find("22.00 MiB of live memory (100%) in 1 block has no stack"), std::string::npos);
  EXPECT_EQ(one_block.find(" 1 blocks has"), std::string::npos);
  // No count of zero: a trace that only starts mid-run by its live blocks says just those.
  const std::string no_free = render("JasperSolt_EoR_NN_snapshot.pickle");
  EXPECT_NE(no_free.find("(or history was enabled late): 31 live blocks refer\n    to allocations made before the window"),
            std::string::npos)
      << no_free;
  EXPECT_NE(one_event.find("541 live blocks and\n    1 free refer to allocations"), std::string::npos) << one_event;
}

// A device whose trace is only the snapshot marker (Muduard's 7bced59: device 0 has one 'snapshot'
// entry, no segment) gets one line in the totals, not a section of zeros; and with one device left
// holding memory, its section would repeat the totals: none.
TEST(ReportWording, ADeviceThatHoldsNothingIsOneLine) {
  const auto file = test::corpus_dir() / "Muduard_LayoutEditing_dump_snapshot_7bced59.pickle";
  if (!std::filesystem::exists(file)) GTEST_SKIP() << "real corpus not found";
  const LoadedSnapshot loaded = load_snapshot(file.string());
  const std::string text = text_report({loaded, analyze(loaded)});
  EXPECT_NE(text.find("  device 0 holds nothing: no segment, and no byte live in its trace\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("\nDevice 0\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("\nDevice 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  reserved (segments)           10.50 GiB\n"), std::string::npos) << text;
}

}  // namespace views_wording_tests
}  // namespace memsnap
