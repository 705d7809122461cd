// Bit-exact float16 / bfloat16 / fp8 (e4m3fn, e5m2) <-> float conversions shared by host code and CUDA kernels.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define TRAINSCOPE_ELEMENTS_FN __host__ __device__ constexpr inline
#else
#define TRAINSCOPE_ELEMENTS_FN constexpr inline
#endif

namespace trainscope::elements {

// Describes a small binary floating-point format so one rounding routine serves every narrow type.
struct NarrowFormat {
  int exponent_bits;
  int mantissa_bits;
  // e4m3fn spends the all-ones exponent on finite values and has a single NaN encoding per sign (mantissa all ones).
  bool ieee_specials;
};

inline constexpr NarrowFormat kFloat16{5, 10, true};
inline constexpr NarrowFormat kBfloat16{8, 7, true};
inline constexpr NarrowFormat kFloat8E4M3{4, 3, false};
inline constexpr NarrowFormat kFloat8E5M2{5, 2, true};

TRAINSCOPE_ELEMENTS_FN std::uint32_t float_bits(float value) { return __builtin_bit_cast(std::uint32_t, value); }
TRAINSCOPE_ELEMENTS_FN float float_from_bits(std::uint32_t bits) { return __builtin_bit_cast(float, bits); }

// Round-to-nearest-even from float to the narrow format; the result occupies the low 1+E+M bits.
template <NarrowFormat F>
TRAINSCOPE_ELEMENTS_FN std::uint32_t narrow_from_float(float value) {
  constexpr int kE = F.exponent_bits;
  constexpr int kM = F.mantissa_bits;
  constexpr int kBias = (1 << (kE - 1)) - 1;
  constexpr int kMinNormalExponent = 1 - kBias;
  constexpr std::uint32_t kSignBit = 1u << (kE + kM);
  constexpr std::uint32_t kAllOnesExponent = ((1u << kE) - 1u) << kM;
  // e4m3fn keeps exponent 15 for finite values, so only mantissa 111 there is NaN.
  constexpr std::uint32_t kFirstNonFinite = F.ieee_specials ? kAllOnesExponent : (kAllOnesExponent | ((1u << kM) - 1u));
  constexpr std::uint32_t kOverflow = F.ieee_specials ? kAllOnesExponent : kFirstNonFinite;
  constexpr std::uint32_t kQuietNan = F.ieee_specials ? (kAllOnesExponent | (1u << (kM - 1))) : kFirstNonFinite;

  const std::uint32_t bits = float_bits(value);
  const std::uint32_t sign = (bits >> 31) != 0 ? kSignBit : 0u;
  const std::uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) {
    // Keep the leading payload bits where the format has room for them; the quiet bit guarantees it stays a NaN.
    return sign | kQuietNan | (F.ieee_specials ? ((magnitude & 0x7fffffu) >> (23 - kM)) : 0u);
  }
  if (magnitude == 0x7f800000u) return sign | kOverflow;

  const std::uint32_t exponent_field = magnitude >> 23;
  const std::uint32_t significand = (magnitude & 0x7fffffu) | (exponent_field != 0 ? 0x800000u : 0u);
  const int exponent = exponent_field != 0 ? static_cast<int>(exponent_field) - 127 : -126;
  if (exponent > kMinNormalExponent + (1 << kE)) return sign | kOverflow;  // far beyond range, avoids big shifts

  int shift = 23 - kM;
  if (exponent < kMinNormalExponent) shift += kMinNormalExponent - exponent;
  if (shift > 25) return sign;  // below half of the smallest subnormal
  std::uint32_t quotient = significand >> shift;
  const std::uint32_t remainder = significand & ((1u << shift) - 1u);
  const std::uint32_t halfway = 1u << (shift - 1);
  if (remainder > halfway || (remainder == halfway && (quotient & 1u) != 0)) ++quotient;

  // The implicit bit of a normal value carries into the exponent field, so a mantissa overflow bumps the exponent.
  std::uint32_t encoded = quotient;
  if (exponent >= kMinNormalExponent) {
    encoded = (static_cast<std::uint32_t>(exponent - kMinNormalExponent) << kM) + quotient;
  }
  if (encoded >= kFirstNonFinite) return sign | kOverflow;
  return sign | encoded;
}

// Exact widening from the narrow format to float (every narrow value is representable).
template <NarrowFormat F>
TRAINSCOPE_ELEMENTS_FN float narrow_to_float(std::uint32_t encoded) {
  constexpr int kE = F.exponent_bits;
  constexpr int kM = F.mantissa_bits;
  constexpr int kBias = (1 << (kE - 1)) - 1;
  constexpr std::uint32_t kMantissaMask = (1u << kM) - 1u;
  constexpr std::uint32_t kExponentMask = (1u << kE) - 1u;

  const std::uint32_t sign = ((encoded >> (kE + kM)) & 1u) << 31;
  const std::uint32_t exponent_field = (encoded >> kM) & kExponentMask;
  std::uint32_t mantissa = encoded & kMantissaMask;
  if (exponent_field == kExponentMask) {
    if (F.ieee_specials) return float_from_bits(sign | 0x7f800000u | (mantissa << (23 - kM)));
    if (mantissa == kMantissaMask) return float_from_bits(sign | 0x7fc00000u);
  }
  if (exponent_field == 0) {
    if (mantissa == 0) return float_from_bits(sign);
    // Normalise the subnormal by hand so device code does not depend on denormal-flushing arithmetic.
    int exponent = 1 - kBias;
    while ((mantissa & (1u << kM)) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    mantissa &= kMantissaMask;
    return float_from_bits(sign | (static_cast<std::uint32_t>(exponent + 127) << 23) | (mantissa << (23 - kM)));
  }
  const int exponent = static_cast<int>(exponent_field) - kBias;
  return float_from_bits(sign | (static_cast<std::uint32_t>(exponent + 127) << 23) | (mantissa << (23 - kM)));
}

TRAINSCOPE_ELEMENTS_FN float half_to_float(std::uint16_t bits) { return narrow_to_float<kFloat16>(bits); }
TRAINSCOPE_ELEMENTS_FN std::uint16_t float_to_half(float value) {
  return static_cast<std::uint16_t>(narrow_from_float<kFloat16>(value));
}
// bfloat16 is the top half of a float, so widening is a shift; it also keeps subnormals and NaN payloads intact.
TRAINSCOPE_ELEMENTS_FN float bfloat16_to_float(std::uint16_t bits) {
  return float_from_bits(static_cast<std::uint32_t>(bits) << 16);
}
TRAINSCOPE_ELEMENTS_FN std::uint16_t float_to_bfloat16(float value) {
  return static_cast<std::uint16_t>(narrow_from_float<kBfloat16>(value));
}
TRAINSCOPE_ELEMENTS_FN float fp8_e4m3_to_float(std::uint8_t bits) { return narrow_to_float<kFloat8E4M3>(bits); }
TRAINSCOPE_ELEMENTS_FN std::uint8_t float_to_fp8_e4m3(float value) {
  return static_cast<std::uint8_t>(narrow_from_float<kFloat8E4M3>(value));
}
TRAINSCOPE_ELEMENTS_FN float fp8_e5m2_to_float(std::uint8_t bits) { return narrow_to_float<kFloat8E5M2>(bits); }
TRAINSCOPE_ELEMENTS_FN std::uint8_t float_to_fp8_e5m2(float value) {
  return static_cast<std::uint8_t>(narrow_from_float<kFloat8E5M2>(value));
}

}  // namespace trainscope::elements

#undef TRAINSCOPE_ELEMENTS_FN
