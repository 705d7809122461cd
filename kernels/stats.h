// Tensor statistics for the frame reports: types, results and the host implementation (the kernel's reference).
//
// Per tensor (see TensorStats): abs-min and abs-max with NaN propagating, the same over finite elements only,
// counts of NaN / +inf / -inf, the index of the first non-finite element and a 64-bit content checksum.
// The per-element rules live in kernels/stats_elements.h and are shared with the CUDA kernel (kernels/gpu_stats.h),
// so the host implementation here gives bit-identical results; it serves host buffers (the CPU stand-in NCCL),
// `trainscope stats` on dumps, and the tests as the reference.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "kernels/stats_elements.h"

namespace trainscope::stats {

// Statistics of one tensor.
//
// - abs_min / abs_max: min and max of |x| over all elements. Any NaN makes both NaN (a positive quiet NaN; sign and
//   payload are not kept) — the report prints `nan`, as PyTorch's abs().min() would. Infinities count: a tensor
//   holding -inf has abs_max = +inf.
// - finite_abs_min / finite_abs_max: the same over finite elements only.
// - An empty set gives the empty interval min = +inf, max = -inf (no element can give abs_max = -inf, so this
//   cannot be mistaken for data): abs_* of an empty tensor, finite_abs_* of a tensor with no finite element.
//   Test count == 0 or finite_count() == 0 rather than the values.
// - Integer types: abs_min/abs_max as double (exact up to 2^53), finite_abs_* equal to them (every integer is
//   finite), no NaN or inf, first_nonfinite = -1, and the checksum.
// - checksum: defined in kernels/stats_elements.h (sum of mixed (index, bits) hashes mod 2^64; 0 when empty).
struct TensorStats {
  DType dtype = DType::kFloat32;
  std::uint64_t count = 0;
  double abs_min = 0;
  double abs_max = 0;
  double finite_abs_min = 0;
  double finite_abs_max = 0;
  std::uint64_t nan_count = 0;
  std::uint64_t pos_inf_count = 0;
  std::uint64_t neg_inf_count = 0;
  std::int64_t first_nonfinite = -1;  // -1: every element is finite
  std::uint64_t checksum = 0;

  std::uint64_t nonfinite_count() const { return nan_count + pos_inf_count + neg_inf_count; }
  std::uint64_t finite_count() const { return count - nonfinite_count(); }
  bool has_nonfinite() const { return nonfinite_count() != 0; }
};

// ---- Types -----------------------------------------------------------------------------------------------------
inline std::uint32_t dtype_size(DType type) { return dtype_rules(type).size; }
inline bool dtype_is_float(DType type) { return dtype_rules(type).is_float; }
// Canonical short name: fp64 fp32 fp16 bf16 e4m3 e5m2 int8 uint8 int32 uint32 int64 uint64.
const char* dtype_name(DType type);
// PyTorch's name, as the frame reports' warnings say it: float64 float32 float16 bfloat16 float8_e4m3fn float8_e5m2,
// int8 ... uint64. Both names come from one table (stats_host.cc), which parse_dtype accepts too.
const char* torch_dtype_name(DType type);
// Accepts the canonical names and the usual PyTorch and NCCL spellings (float32, float, torch.half, bfloat16,
// float8_e4m3fn, ncclFloat16, ncclBfloat16, ...), case-insensitively.
std::optional<DType> parse_dtype(std::string_view name);
// Every accepted spelling, for error messages.
const char* dtype_spellings();
// From an ncclDataType_t value (ncclInt8 = 0 ... ncclFloat8e5m2 = 11); nullopt for values this build does not know.
std::optional<DType> dtype_from_nccl(int nccl_datatype);

// ---- Host implementation ---------------------------------------------------------------------------------------
// kSkip leaves the checksum out (it is then 0): the frame reports never print it, and its per-element hash is
// most of the work, so watched host buffers are read about twice as fast without it.
enum class ChecksumMode { kCompute, kSkip };

// Statistics of `count` elements of `type` at `data` (any alignment; data may be null when count is 0).
TensorStats compute_stats_host(const void* data, std::uint64_t count, DType type,
                               ChecksumMode checksum = ChecksumMode::kCompute);

// Adds elements [first_index, first_index + count) of a tensor, stored at `data`, to `partial`; for tensors
// processed in pieces (a dump read in parts). Finish with finalize_stats.
void accumulate_stats_host(StatsPartial& partial, const void* data, std::uint64_t count, DType type,
                           std::uint64_t first_index, ChecksumMode checksum = ChecksumMode::kCompute);

// Whether the pass without the checksum may use the CPU's AVX2 (the default, where it has it); false keeps it on
// x86-64's baseline. For tests of both builds of the pass on one machine.
void allow_host_stats_avx2(bool allowed);

// Turns the partial of a whole tensor of `count` elements into its statistics (the kernel's results too).
TensorStats finalize_stats(DType type, std::uint64_t count, const StatsPartial& partial);

// ---- Formatting ------------------------------------------------------------------------------------------------
// printf("%8.2e") of an abs value, as the frame report prints it: "1.00e+00", "     inf", "     nan", "    -inf".
std::string format_abs_value(double value);
// One frame-report tensor row: "%8.2e %8.2e label".
std::string format_stats_row(const TensorStats& stats, std::string_view label);

}  // namespace trainscope::stats
