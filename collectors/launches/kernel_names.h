// What a CUDA kernel's symbol says about it: the demangled name, the short name frames are headed with, the parameter
// types of its signature (which parameters are pointers, to const or not, and to which element type), and whether it
// is an optimizer step. Text only: no CUDA, no allocation beyond the strings returned.
//
//   demangle("_Z6scalePfPKfi")        -> "scale(float*, float const*, int)"
//   kernel_short_name("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
//                     "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, "
//                     "at::detail::Array<char*, 3>)")   -> "vectorized_elementwise_kernel"
//   kernel_parameter_types(...)      -> {"int", "at::native::CUDAFunctor_add<float>", "at::detail::Array<char*, 3>"}
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kernels/stats_elements.h"

namespace trainscope::launches {

// The demangled symbol (abi::__cxa_demangle), or the symbol as it is when it is no mangled C++ name (extern "C"
// kernels such as Triton's "triton_poi_fused_add_0", cuBLAS's "ampere_sgemm_128x64_nn").
std::string demangle(std::string_view symbol);

// The function's unqualified name without its return type, template arguments or parameters. A name that cannot be
// taken apart (unbalanced brackets) is returned as it is, cut before its first '(' or '<'.
std::string kernel_short_name(std::string_view demangled);

// The parameter types of the signature, split at the commas outside <> () {} [] nesting, each trimmed; empty for a
// name without a parameter list (extern "C") or with an empty one.
std::vector<std::string> kernel_parameter_types(std::string_view demangled);

// The text of the function's own template arguments (between the outermost <> right before the parameter list),
// without the brackets; empty when it has none.
std::string_view kernel_template_arguments(std::string_view demangled);

// The element type a C++ type spelled as in a demangled name stands for: float, double, c10::Half, c10::BFloat16,
// __half, __nv_bfloat16, __nv_fp8_e4m3, c10::Float8_e4m3fn, cutlass::half_t, half, int, unsigned int, long, signed
// char, unsigned char ... (cv-qualifiers ignored; two-element vector types such as __half2 are their element). False
// for anything else, plain char included (raw bytes).
bool element_type_of(std::string_view type, stats::DType* out);

// The first floating element type named anywhere in `text` (the template arguments: "4, at::native::
// CUDAFunctor_add<c10::Half>, ..." -> float16). False when none is.
bool first_floating_type(std::string_view text, stats::DType* out);

// One parameter's type, as far as buffers go.
struct ParameterType {
  bool pointer = false;           // a pointer (to anything)
  bool to_const = false;          // the pointee is const: the kernel only reads it (an input)
  bool to_pointer = false;        // the pointee is itself a pointer (an array of pointers: no element type)
  bool has_element_type = false;  // the pointee is an element type ...
  stats::DType element_type = stats::DType::kFloat32;  // ... this one
};
ParameterType describe_parameter(std::string_view type);

// Whether the kernel is an optimizer step (the end of a training batch): PyTorch's and apex's multi_tensor_apply
// kernels (foreach and fused optimizers), fused Adam/AdamW/SGD/Adagrad, apex's Adam and LAMB kernels.
bool is_optimizer_kernel_name(std::string_view demangled);

}  // namespace trainscope::launches
