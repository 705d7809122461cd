// Kernel names taken apart (collectors/launches/kernel_names.h) on names as PyTorch, cuBLAS, CUTLASS, apex and Triton
// kernels really demangle.
#include "collectors/launches/kernel_names.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace trainscope::launches {
namespace {

using stats::DType;

constexpr const char* kVectorizedAdd =
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> "
    ">(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)";
constexpr const char* kSoftmax =
    "void (anonymous namespace)::softmax_warp_forward<c10::Half, c10::Half, float, 8, false, false>(c10::Half*, "
    "c10::Half const*, int, int, int, bool const*, int, bool)";
constexpr const char* kCopyLambda =
    "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_"
    "cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)"
    "#1}>(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::"
    "operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1} const&)::{lambda(int)#1}>(int, "
    "at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::"
    "operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}>(at::TensorIteratorBase&, at::native::"
    "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() "
    "const::{lambda(float)#1} const&)::{lambda(int)#1})";
constexpr const char* kCutlassKernel2 =
    "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align8>(cutlass_80_wmma_"
    "tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align8::Params)";
constexpr const char* kCutlassDevice =
    "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cutlass::gemm::GemmShape<128, 128, 32>, "
    "cutlass::half_t, cutlass::layout::RowMajor, float> >(cutlass::gemm::kernel::GemmUniversal<cutlass::gemm::"
    "GemmShape<128, 128, 32>, cutlass::half_t, cutlass::layout::RowMajor, float>::Params)";
constexpr const char* kFusedAdam =
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
    "FusedOptimizerTensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<c10::BFloat16, 4, "
    "(at::native::ADAM_MODE)1, false>, double const*, double, double, double, double, double, bool, float const*, "
    "float const*>(at::native::(anonymous namespace)::FusedOptimizerTensorListMetadata<4>, at::native::(anonymous "
    "namespace)::FusedAdamMathFunctor<c10::BFloat16, 4, (at::native::ADAM_MODE)1, false>, double const*, double, "
    "double, double, double, double, bool, float const*, float const*)";
constexpr const char* kApexAdam =
    "void multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor<float, float>, float, float, float, float, "
    "float, float, adamMode_t, float>(long, int volatile*, TensorListMetadata<4>, AdamFunctor<float, float>, float, "
    "float, float, float, float, float, adamMode_t, float)";
constexpr const char* kFp8Gemm =
    "void fp8_gemm_kernel<__nv_fp8_e4m3, __nv_bfloat16>(__nv_fp8_e4m3 const*, __nv_bfloat16* __restrict__, int)";

TEST(KernelNames, DemanglesCxxNamesAndKeepsExternC) {
  EXPECT_EQ(demangle("_Z5scalePfPKfi"), "scale(float*, float const*, int)");
  EXPECT_EQ(demangle("_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_15CUDAFunctor_addIfEENS_6detail5ArrayIPcLi3"
                     "EEEEEviT0_T1_"),
            kVectorizedAdd);
  EXPECT_EQ(demangle("_ZN12_GLOBAL__N_120softmax_warp_forwardIN3c104HalfES2_fLi8ELb0ELb0EEEvPT0_PKT_iiiPKbib"),
            kSoftmax);
  // extern "C" kernels (Triton, cuBLAS) and what the demangler refuses stay as they are.
  EXPECT_EQ(demangle("triton_poi_fused_add_mul_0"), "triton_poi_fused_add_mul_0");
  EXPECT_EQ(demangle("ampere_sgemm_128x64_nn"), "ampere_sgemm_128x64_nn");
  EXPECT_EQ(demangle("_Znot_a_name("), "_Znot_a_name(");
  EXPECT_EQ(demangle(""), "");
}

TEST(KernelNames, ShortNameIsTheUnqualifiedFunctionName) {
  EXPECT_EQ(kernel_short_name(kVectorizedAdd), "vectorized_elementwise_kernel");
  EXPECT_EQ(kernel_short_name(kSoftmax), "softmax_warp_forward");
  EXPECT_EQ(kernel_short_name(kCopyLambda), "elementwise_kernel");
  EXPECT_EQ(kernel_short_name(kCutlassKernel2), "Kernel2");
  EXPECT_EQ(kernel_short_name(kCutlassDevice), "device_kernel");
  EXPECT_EQ(kernel_short_name(kFusedAdam), "multi_tensor_apply_kernel");
  EXPECT_EQ(kernel_short_name(kApexAdam), "multi_tensor_apply_kernel");
  EXPECT_EQ(kernel_short_name("scale(float*, float const*, int)"), "scale");
  EXPECT_EQ(kernel_short_name("ampere_sgemm_128x64_nn"), "ampere_sgemm_128x64_nn");
  EXPECT_EQ(kernel_short_name("triton_poi_fused_add_mul_0"), "triton_poi_fused_add_mul_0");
  EXPECT_EQ(kernel_short_name("void ns::Outer<float>::inner_kernel(float*)"), "inner_kernel");
  // Unbalanced brackets (a cut name): whatever comes before the first bracket.
  EXPECT_EQ(kernel_short_name("void broken_kernel<float, (int"), "void broken_kernel");
}

TEST(KernelNames, ParameterTypesSplitOnlyAtTopLevelCommas) {
  EXPECT_EQ(kernel_parameter_types(kVectorizedAdd),
            (std::vector<std::string>{"int", "at::native::CUDAFunctor_add<float>", "at::detail::Array<char*, 3>"}));
  EXPECT_EQ(kernel_parameter_types(kSoftmax), (std::vector<std::string>{"c10::Half*", "c10::Half const*", "int", "int",
                                                                        "int", "bool const*", "int", "bool"}));
  const std::vector<std::string> lambda = kernel_parameter_types(kCopyLambda);
  ASSERT_EQ(lambda.size(), 2u);
  EXPECT_EQ(lambda[0], "int");
  EXPECT_EQ(lambda[1].substr(0, 39), "at::native::gpu_kernel_impl_nocast<at::");
  EXPECT_EQ(lambda[1].substr(lambda[1].size() - 17), "::{lambda(int)#1}");
  EXPECT_EQ(kernel_parameter_types(kApexAdam).size(), 12u);
  EXPECT_TRUE(kernel_parameter_types("triton_poi_fused_add_mul_0").empty());
  EXPECT_TRUE(kernel_parameter_types("void empty_kernel()").empty());
  EXPECT_TRUE(kernel_parameter_types("void empty_kernel(void)").empty());
  EXPECT_EQ(kernel_template_arguments(kVectorizedAdd),
            "4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> ");
  EXPECT_EQ(kernel_template_arguments("scale(float*, float const*, int)"), "");
}

TEST(KernelNames, ElementTypesAsTheDemanglerSpellsThem) {
  struct Case {
    const char* type;
    DType expected;
  };
  const Case cases[] = {
      {"float", DType::kFloat32},
      {"double", DType::kFloat64},
      {"c10::Half", DType::kFloat16},
      {"__half", DType::kFloat16},
      {"half", DType::kFloat16},
      {"cutlass::half_t", DType::kFloat16},
      {"__half2", DType::kFloat16},
      {"c10::BFloat16", DType::kBfloat16},
      {"__nv_bfloat16", DType::kBfloat16},
      {"__nv_bfloat162", DType::kBfloat16},
      {"__nv_fp8_e4m3", DType::kFloat8E4M3},
      {"c10::Float8_e4m3fn", DType::kFloat8E4M3},
      {"__nv_fp8_e5m2", DType::kFloat8E5M2},
      {"c10::Float8_e5m2", DType::kFloat8E5M2},
      {"signed char", DType::kInt8},
      {"unsigned char", DType::kUint8},
      {"int", DType::kInt32},
      {"unsigned int", DType::kUint32},
      {"long", DType::kInt64},
      {"unsigned long", DType::kUint64},
      {"float const", DType::kFloat32},
      {"const double", DType::kFloat64},
      {"c10::complex<float>", DType::kFloat32},
  };
  for (const Case& c : cases) {
    DType type = DType::kUint64;
    EXPECT_TRUE(element_type_of(c.type, &type)) << c.type;
    EXPECT_EQ(type, c.expected) << c.type;
  }
  DType type;
  for (const char* other : {"char", "void", "bool", "short", "at::native::Params", "float*", "Half_t", ""})
    EXPECT_FALSE(element_type_of(other, &type)) << other;
}

TEST(KernelNames, PointerParametersSayConstAndPointee) {
  ParameterType p = describe_parameter("float*");
  EXPECT_TRUE(p.pointer);
  EXPECT_FALSE(p.to_const);
  ASSERT_TRUE(p.has_element_type);
  EXPECT_EQ(p.element_type, DType::kFloat32);

  p = describe_parameter("c10::Half const*");
  EXPECT_TRUE(p.pointer && p.to_const && p.has_element_type);
  EXPECT_EQ(p.element_type, DType::kFloat16);

  p = describe_parameter("float const* __restrict__");
  EXPECT_TRUE(p.pointer && p.to_const);
  p = describe_parameter("__nv_bfloat16* __restrict__");
  EXPECT_TRUE(p.pointer && !p.to_const);
  EXPECT_EQ(p.element_type, DType::kBfloat16);
  p = describe_parameter("float* const");  // a const pointer to writable floats: an output
  EXPECT_TRUE(p.pointer && !p.to_const);
  p = describe_parameter("const float*");
  EXPECT_TRUE(p.pointer && p.to_const);
  p = describe_parameter("int volatile*");
  EXPECT_TRUE(p.pointer && !p.to_const && p.has_element_type);
  EXPECT_EQ(p.element_type, DType::kInt32);
  p = describe_parameter("c10::Float8_e5m2 const* const");
  EXPECT_TRUE(p.pointer && p.to_const);
  EXPECT_EQ(p.element_type, DType::kFloat8E5M2);

  p = describe_parameter("float**");
  EXPECT_TRUE(p.pointer && p.to_pointer && !p.has_element_type);
  p = describe_parameter("char*");  // raw bytes: no element type of its own
  EXPECT_TRUE(p.pointer && !p.has_element_type);
  p = describe_parameter("void*");
  EXPECT_TRUE(p.pointer && !p.has_element_type);
  p = describe_parameter("bool const*");
  EXPECT_TRUE(p.pointer && p.to_const && !p.has_element_type);

  EXPECT_FALSE(describe_parameter("int").pointer);
  EXPECT_FALSE(describe_parameter("at::detail::Array<char*, 3>").pointer);
  EXPECT_FALSE(describe_parameter("at::TensorIteratorBase&").pointer);
}

TEST(KernelNames, FirstFloatingTemplateArgument) {
  DType type = DType::kUint64;
  ASSERT_TRUE(first_floating_type(kernel_template_arguments(kVectorizedAdd), &type));
  EXPECT_EQ(type, DType::kFloat32);
  ASSERT_TRUE(first_floating_type(kernel_template_arguments(kSoftmax), &type));
  EXPECT_EQ(type, DType::kFloat16);
  ASSERT_TRUE(first_floating_type(kernel_template_arguments(kFusedAdam), &type));
  EXPECT_EQ(type, DType::kBfloat16);  // before the double const* of the learning rate
  ASSERT_TRUE(first_floating_type(kernel_template_arguments(kCutlassDevice), &type));
  EXPECT_EQ(type, DType::kFloat16);
  ASSERT_TRUE(first_floating_type(kernel_template_arguments(kFp8Gemm), &type));
  EXPECT_EQ(type, DType::kFloat8E4M3);
  EXPECT_FALSE(first_floating_type(kernel_template_arguments(kCutlassKernel2), &type));
  EXPECT_FALSE(first_floating_type("128, 2, int, unsigned char", &type));
  // A name that merely contains a type's spelling is not that type.
  EXPECT_FALSE(first_floating_type("floater<3>, halfway_t, doubled", &type));
}

TEST(KernelNames, OptimizerKernels) {
  EXPECT_TRUE(is_optimizer_kernel_name(kFusedAdam));
  EXPECT_TRUE(is_optimizer_kernel_name(kApexAdam));
  // A foreach op (here torch._foreach_mul_, as gradient clipping and GradScaler run several times a step) is not.
  EXPECT_FALSE(is_optimizer_kernel_name(
      "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
      "TensorListMetadata<2>, at::native::(anonymous namespace)::BinaryOpScalarFunctor<float, 2, 1, 1>, "
      "std::multiplies<float>, float>(at::native::(anonymous namespace)::TensorListMetadata<2>, at::native::"
      "(anonymous namespace)::BinaryOpScalarFunctor<float, 2, 1, 1>, std::multiplies<float>, float)"));
  EXPECT_TRUE(
      is_optimizer_kernel_name("void multi_tensor_apply_kernel<TensorListMetadata<5>, LAMBStage1Functor<float>, "
                               "float>(long, int volatile*, TensorListMetadata<5>, LAMBStage1Functor<float>, "
                               "float)"));
  EXPECT_TRUE(
      is_optimizer_kernel_name("void adam_cuda_kernel<float, float>(float*, float*, float*, float*, c10::Half "
                               "const*, float, float, float, float, float, float, unsigned long, adamMode_t, "
                               "float)"));
  EXPECT_FALSE(is_optimizer_kernel_name(kVectorizedAdd));
  EXPECT_FALSE(is_optimizer_kernel_name(kCopyLambda));  // "lambda" is no LAMB
  EXPECT_FALSE(is_optimizer_kernel_name(kSoftmax));
  EXPECT_FALSE(is_optimizer_kernel_name("triton_poi_fused_add_mul_0"));
}

}  // namespace
}  // namespace trainscope::launches
