// Per-element rules of the tensor statistics (magnitude keys, classes, checksum), shared by host code and the kernel.
//
// Everything that decides what one element contributes lives here, so the CUDA kernel and the host implementation
// cannot drift apart. The kernel schedules these functions differently (vector loads, a fast path for vectors
// without non-finite elements) but never computes anything they do not define.
//
// Magnitude keys: for every float type here, |x| orders like its bit pattern with the sign bit cleared, read as an
// unsigned integer (+0 < subnormals < normals < inf < NaNs). Reducing keys instead of values makes min/max exact,
// branch-free and identical on host and device; values are decoded once, at the end (key_to_double).
#pragma once

#include <cstdint>

#include "kernels/element_formats.h"

#ifdef __CUDACC__
#define TRAINSCOPE_STATS_FN __host__ __device__ constexpr inline
#else
#define TRAINSCOPE_STATS_FN constexpr inline
#endif

namespace trainscope::stats {

// Element types. The numeric values travel in kernel descriptors, so they are fixed.
enum class DType : std::uint8_t {
  kFloat64 = 0,
  kFloat32 = 1,
  kFloat16 = 2,
  kBfloat16 = 3,
  kFloat8E4M3 = 4,  // float8_e4m3fn: no infinities, one NaN encoding per sign (0x7f / 0xff)
  kFloat8E5M2 = 5,
  kInt8 = 6,
  kUint8 = 7,
  kInt32 = 8,
  kUint32 = 9,
  kInt64 = 10,
  kUint64 = 11,
};
inline constexpr int kDTypeCount = 12;

// What the statistics need to know about one element type.
struct DTypeRules {
  std::uint32_t size = 0;  // bytes per element
  bool is_float = false;
  bool is_signed = false;  // integers only; floats always carry a sign bit
  bool has_inf = false;
  std::uint64_t sign_mask = 0;       // floats: the sign bit of the element's bit pattern
  std::uint64_t non_finite_key = 0;  // floats: the smallest magnitude key that is inf or NaN
  std::uint64_t inf_key = 0;         // floats with has_inf: the magnitude key of +-inf (larger keys are NaN)
};

TRAINSCOPE_STATS_FN DTypeRules dtype_rules(DType type) {
  switch (type) {
    case DType::kFloat64:
      return {8, true, true, true, 0x8000000000000000ull, 0x7ff0000000000000ull, 0x7ff0000000000000ull};
    case DType::kFloat32:
      return {4, true, true, true, 0x80000000u, 0x7f800000u, 0x7f800000u};
    case DType::kFloat16:
      return {2, true, true, true, 0x8000u, 0x7c00u, 0x7c00u};
    case DType::kBfloat16:
      return {2, true, true, true, 0x8000u, 0x7f80u, 0x7f80u};
    case DType::kFloat8E4M3:
      return {1, true, true, false, 0x80u, 0x7fu, 0};
    case DType::kFloat8E5M2:
      return {1, true, true, true, 0x80u, 0x7cu, 0x7cu};
    case DType::kInt8:
      return {1, false, true};
    case DType::kUint8:
      return {1, false, false};
    case DType::kInt32:
      return {4, false, true};
    case DType::kUint32:
      return {4, false, false};
    case DType::kInt64:
      return {8, false, true};
    case DType::kUint64:
      return {8, false, false};
  }
  return {};
}

TRAINSCOPE_STATS_FN bool dtype_valid(std::uint32_t value) { return value < static_cast<std::uint32_t>(kDTypeCount); }

// The element's magnitude as an ordered unsigned key. `bits` is the element's bit pattern, zero-extended.
// Integers: |value| exactly (|INT64_MIN| = 2^63 fits in the unsigned key).
TRAINSCOPE_STATS_FN std::uint64_t magnitude_key(const DTypeRules& rules, std::uint64_t bits) {
  if (rules.is_float) return bits & ~rules.sign_mask;
  if (!rules.is_signed) return bits;
  const unsigned shift = 64u - 8u * rules.size;
  const std::uint64_t sign_extended =
      static_cast<std::uint64_t>(static_cast<std::int64_t>(bits << shift) >> shift);  // arithmetic shift
  return (sign_extended >> 63) != 0 ? 0 - sign_extended : sign_extended;
}

enum class ElementClass : std::uint8_t { kFinite, kNan, kPosInf, kNegInf };

TRAINSCOPE_STATS_FN ElementClass classify(const DTypeRules& rules, std::uint64_t bits) {
  if (!rules.is_float) return ElementClass::kFinite;
  const std::uint64_t key = bits & ~rules.sign_mask;
  if (key < rules.non_finite_key) return ElementClass::kFinite;
  if (rules.has_inf && key == rules.inf_key) {
    return (bits & rules.sign_mask) != 0 ? ElementClass::kNegInf : ElementClass::kPosInf;
  }
  return ElementClass::kNan;
}

// ---- Checksum -------------------------------------------------------------------------------------------------
// checksum = sum over elements i of element_hash(index_salt(i), bits_i), modulo 2^64; an empty tensor gives 0.
//   index_salt(i)          = (uint32)(i mod 2^32) * 0x9E3779B9
//   mix64(x), x 32 bits    = y = x * 0x85EBCA6B;  y ^= y >> 15;  y *= 0xC2B2AE35     (y: 32 bits, mod 2^32)
//                            result (uint64)y * (uint64)(y | 1)                       (exact: < 2^64)
//   element_hash(s, bits)  = mix64(low32(bits) ^ s)
//                            + (8-byte types only) mix64(high32(bits) ^ s ^ 0x6A09E667)
// A sum is order-independent, so any split of the tensor over threads gives the same value; mixing the index in
// catches moved elements. mix64 is injective (y is a bijection of x, and y * (y | 1) grows strictly with y), so
// changing any single element of a type up to 4 bytes always changes the checksum. The final product spreads every
// element over all 64 bits at the cost of one wide multiply. It detects changes; it is not a cryptographic hash. It
// depends only on the elements' bits and indices, not on the buffer's address, so buffers that should be equal on
// different ranks can be compared.
inline constexpr std::uint32_t kIndexSalt = 0x9E3779B9u;
inline constexpr std::uint32_t kMixMultiplier1 = 0x85EBCA6Bu;
inline constexpr std::uint32_t kMixMultiplier2 = 0xC2B2AE35u;
inline constexpr std::uint32_t kHighWordSalt = 0x6A09E667u;

TRAINSCOPE_STATS_FN std::uint32_t index_salt(std::uint64_t index) {
  return static_cast<std::uint32_t>(index) * kIndexSalt;
}

TRAINSCOPE_STATS_FN std::uint64_t mix64(std::uint32_t x) {
  std::uint32_t y = x * kMixMultiplier1;
  y ^= y >> 15;
  y *= kMixMultiplier2;
  return static_cast<std::uint64_t>(y) * static_cast<std::uint64_t>(y | 1u);
}

TRAINSCOPE_STATS_FN std::uint64_t element_hash(std::uint32_t salt, std::uint64_t bits, bool eight_bytes) {
  std::uint64_t hash = mix64(static_cast<std::uint32_t>(bits) ^ salt);
  if (eight_bytes) hash += mix64(static_cast<std::uint32_t>(bits >> 32) ^ salt ^ kHighWordSalt);
  return hash;
}

// ---- Partial results -------------------------------------------------------------------------------------------
// What any part of a tensor contributes; partials of disjoint parts merge into the partial of their union. The same
// plain layout is the kernel's per-tensor result in memory, so keep it trivially copyable and 64-bit only.
struct StatsPartial {
  std::uint64_t min_finite_key;  // over finite elements; kNoKey when there is none
  std::uint64_t max_finite_key;  // over finite elements; 0 when there is none (the counts tell)
  std::uint64_t nan_count;
  std::uint64_t pos_inf_count;
  std::uint64_t neg_inf_count;
  std::uint64_t first_nonfinite;  // smallest index of a NaN or inf; kNoIndex when there is none
  std::uint64_t checksum;
};
inline constexpr std::uint64_t kNoKey = ~0ull;
inline constexpr std::uint64_t kNoIndex = ~0ull;

TRAINSCOPE_STATS_FN StatsPartial empty_partial() { return {kNoKey, 0, 0, 0, 0, kNoIndex, 0}; }

// The one definition of what element `index` with bit pattern `bits` contributes.
TRAINSCOPE_STATS_FN void add_element(StatsPartial& partial, const DTypeRules& rules, std::uint64_t index,
                                     std::uint64_t bits) {
  partial.checksum += element_hash(index_salt(index), bits, rules.size == 8);
  switch (classify(rules, bits)) {
    case ElementClass::kFinite: {
      const std::uint64_t key = magnitude_key(rules, bits);
      if (key < partial.min_finite_key) partial.min_finite_key = key;
      if (key > partial.max_finite_key) partial.max_finite_key = key;
      return;
    }
    case ElementClass::kNan:
      ++partial.nan_count;
      break;
    case ElementClass::kPosInf:
      ++partial.pos_inf_count;
      break;
    case ElementClass::kNegInf:
      ++partial.neg_inf_count;
      break;
  }
  if (index < partial.first_nonfinite) partial.first_nonfinite = index;
}

TRAINSCOPE_STATS_FN void merge_partial(StatsPartial& into, const StatsPartial& from) {
  if (from.min_finite_key < into.min_finite_key) into.min_finite_key = from.min_finite_key;
  if (from.max_finite_key > into.max_finite_key) into.max_finite_key = from.max_finite_key;
  into.nan_count += from.nan_count;
  into.pos_inf_count += from.pos_inf_count;
  into.neg_inf_count += from.neg_inf_count;
  if (from.first_nonfinite < into.first_nonfinite) into.first_nonfinite = from.first_nonfinite;
  into.checksum += from.checksum;
}

// The magnitude that `key` stands for (exact: every value of these types is a double, except integers beyond
// 2^53, which round to the nearest double).
TRAINSCOPE_STATS_FN double key_to_double(DType type, std::uint64_t key) {
  switch (type) {
    case DType::kFloat64:
      return __builtin_bit_cast(double, key);
    case DType::kFloat32:
      return static_cast<double>(elements::float_from_bits(static_cast<std::uint32_t>(key)));
    case DType::kFloat16:
      return static_cast<double>(elements::half_to_float(static_cast<std::uint16_t>(key)));
    case DType::kBfloat16:
      return static_cast<double>(elements::bfloat16_to_float(static_cast<std::uint16_t>(key)));
    case DType::kFloat8E4M3:
      return static_cast<double>(elements::fp8_e4m3_to_float(static_cast<std::uint8_t>(key)));
    case DType::kFloat8E5M2:
      return static_cast<double>(elements::fp8_e5m2_to_float(static_cast<std::uint8_t>(key)));
    default:
      return static_cast<double>(key);
  }
}

}  // namespace trainscope::stats

#undef TRAINSCOPE_STATS_FN
