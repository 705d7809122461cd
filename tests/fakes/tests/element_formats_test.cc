// Exhaustive checks of kernels/element_formats.h against an independent, arithmetic (not bit-twiddling) reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kernels/element_formats.h"

namespace {

namespace el = trainscope::elements;

static_assert(el::float_to_half(1.0f) == 0x3c00);
static_assert(el::half_to_float(0xc000) == -2.0f);
static_assert(el::float_to_bfloat16(1.0f) == 0x3f80);
static_assert(el::float_to_fp8_e4m3(448.0f) == 0x7e);
static_assert(el::float_to_fp8_e5m2(57344.0f) == 0x7b);

struct Format {
  const char* name;
  int exponent_bits;
  int mantissa_bits;
  bool ieee_specials;  // false: e4m3fn, whose only non-finite encodings are S.1111.111
  float (*to_float)(std::uint32_t);
  std::uint32_t (*from_float)(float);
};

const Format kFormats[] = {
    {"float16", 5, 10, true, [](std::uint32_t b) { return el::half_to_float(static_cast<std::uint16_t>(b)); },
     [](float f) -> std::uint32_t { return el::float_to_half(f); }},
    {"bfloat16", 8, 7, true, [](std::uint32_t b) { return el::bfloat16_to_float(static_cast<std::uint16_t>(b)); },
     [](float f) -> std::uint32_t { return el::float_to_bfloat16(f); }},
    {"float8e4m3", 4, 3, false, [](std::uint32_t b) { return el::fp8_e4m3_to_float(static_cast<std::uint8_t>(b)); },
     [](float f) -> std::uint32_t { return el::float_to_fp8_e4m3(f); }},
    {"float8e5m2", 5, 2, true, [](std::uint32_t b) { return el::fp8_e5m2_to_float(static_cast<std::uint8_t>(b)); },
     [](float f) -> std::uint32_t { return el::float_to_fp8_e5m2(f); }},
};

std::uint32_t pattern_count(const Format& f) { return 1u << (1 + f.exponent_bits + f.mantissa_bits); }
std::uint32_t sign_bit(const Format& f) { return 1u << (f.exponent_bits + f.mantissa_bits); }

// Reference decoding from the textbook definition of a binary floating-point value.
double reference_value(const Format& f, std::uint32_t bits) {
  const int bias = (1 << (f.exponent_bits - 1)) - 1;
  const std::uint32_t mantissa = bits & ((1u << f.mantissa_bits) - 1);
  const std::uint32_t exponent = (bits >> f.mantissa_bits) & ((1u << f.exponent_bits) - 1);
  const double sign = (bits & sign_bit(f)) != 0 ? -1.0 : 1.0;
  const bool all_ones = exponent == (1u << f.exponent_bits) - 1;
  if (f.ieee_specials && all_ones) {
    return mantissa == 0 ? sign * std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  }
  if (!f.ieee_specials && all_ones && mantissa == (1u << f.mantissa_bits) - 1) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  if (exponent == 0) return sign * std::ldexp(static_cast<double>(mantissa), 1 - bias - f.mantissa_bits);
  return sign * std::ldexp(static_cast<double>((1u << f.mantissa_bits) + mantissa),
                           static_cast<int>(exponent) - bias - f.mantissa_bits);
}

// Every non-negative finite encoding in increasing order (encodings of one sign are monotonic in value).
std::vector<std::uint32_t> positive_finite(const Format& f) {
  std::vector<std::uint32_t> out;
  for (std::uint32_t b = 0; b < sign_bit(f); ++b) {
    if (std::isfinite(reference_value(f, b))) out.push_back(b);
  }
  return out;
}

// Reference rounding: nearest representable by search, ties to the even encoding, past the top to overflow.
std::uint32_t reference_round(const Format& f, const std::vector<std::uint32_t>& encodings, float x) {
  const std::uint32_t sign = std::signbit(x) ? sign_bit(f) : 0u;
  const std::uint32_t overflow =
      f.ieee_specials ? (((1u << f.exponent_bits) - 1) << f.mantissa_bits) : (sign_bit(f) - 1);  // e4m3fn: NaN
  const double magnitude = std::fabs(static_cast<double>(x));
  if (std::isinf(x)) return sign | overflow;
  const std::uint32_t top = encodings.back();
  const double top_value = reference_value(f, top);
  const double virtual_next = top_value + (top_value - reference_value(f, top - 1));  // one more step of the top ulp
  std::uint32_t lo = 0;
  double lo_value = 0;
  std::uint32_t hi = 0;
  double hi_value = 0;
  if (magnitude >= top_value) {
    lo = top;
    lo_value = top_value;
    hi = top + 1;  // stands for the overflow result
    hi_value = virtual_next;
  } else {
    auto it = std::upper_bound(encodings.begin(), encodings.end(), magnitude,
                               [&](double v, std::uint32_t e) { return v < reference_value(f, e); });
    hi = *it;
    hi_value = reference_value(f, hi);
    lo = *(it - 1);
    lo_value = reference_value(f, lo);
  }
  std::uint32_t chosen = 0;
  if (magnitude - lo_value < hi_value - magnitude)
    chosen = lo;
  else if (magnitude - lo_value > hi_value - magnitude)
    chosen = hi;
  else
    chosen = (lo % 2 == 0) ? lo : hi;
  if (chosen == top + 1) return sign | overflow;
  return sign | chosen;
}

bool is_nan_encoding(const Format& f, std::uint32_t bits) { return std::isnan(reference_value(f, bits)); }

class ElementFormatTest : public ::testing::TestWithParam<Format> {};

TEST_P(ElementFormatTest, EveryBitPatternWidensExactly) {
  const Format& f = GetParam();
  for (std::uint32_t bits = 0; bits < pattern_count(f); ++bits) {
    const float widened = f.to_float(bits);
    const double expected = reference_value(f, bits);
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(widened)) << f.name << " bits " << bits;
      ASSERT_EQ(std::signbit(widened), (bits & sign_bit(f)) != 0) << f.name << " NaN sign, bits " << bits;
    } else {
      ASSERT_EQ(static_cast<double>(widened), expected) << f.name << " bits " << bits;
      ASSERT_EQ(std::signbit(widened), (bits & sign_bit(f)) != 0) << f.name << " sign of zero, bits " << bits;
    }
  }
}

TEST_P(ElementFormatTest, EveryBitPatternRoundTrips) {
  const Format& f = GetParam();
  for (std::uint32_t bits = 0; bits < pattern_count(f); ++bits) {
    const std::uint32_t back = f.from_float(f.to_float(bits));
    if (is_nan_encoding(f, bits)) {
      ASSERT_TRUE(is_nan_encoding(f, back)) << f.name << " NaN stays NaN, bits " << bits;
      ASSERT_EQ(back & sign_bit(f), bits & sign_bit(f)) << f.name << " NaN keeps its sign, bits " << bits;
    } else {
      ASSERT_EQ(back, bits) << f.name;
    }
  }
}

TEST_P(ElementFormatTest, RoundsToNearestEvenBetweenEveryPairOfNeighbours) {
  const Format& f = GetParam();
  const std::vector<std::uint32_t> encodings = positive_finite(f);
  std::vector<float> probes;
  for (std::size_t i = 0; i + 1 < encodings.size(); ++i) {
    const auto a = static_cast<float>(reference_value(f, encodings[i]));
    const auto b = static_cast<float>(reference_value(f, encodings[i + 1]));
    const float tie = static_cast<float>((static_cast<double>(a) + static_cast<double>(b)) / 2);  // exact in float
    probes.insert(probes.end(), {tie, std::nextafter(tie, 0.0f), std::nextafter(tie, b)});
  }
  // Around and beyond the largest finite value, and far outside the range in both directions.
  const auto top = static_cast<float>(reference_value(f, encodings.back()));
  const auto below_top = static_cast<float>(reference_value(f, encodings[encodings.size() - 2]));
  const float overflow_tie = top + (top - below_top) / 2;
  probes.insert(probes.end(), {overflow_tie, std::nextafter(overflow_tie, 0.0f),
                               std::nextafter(overflow_tie, std::numeric_limits<float>::infinity()), top * 4,
                               std::numeric_limits<float>::max(), std::numeric_limits<float>::denorm_min(),
                               std::numeric_limits<float>::min(), 1e-30f, 0.0f});
  for (float probe : probes) {
    for (float x : {probe, -probe}) {
      if (std::isinf(x) && !std::isinf(probe)) continue;
      ASSERT_EQ(f.from_float(x), reference_round(f, encodings, x)) << f.name << " rounding " << x;
    }
  }
}

TEST_P(ElementFormatTest, InfinityAndNanFollowTheFormat) {
  const Format& f = GetParam();
  const std::vector<std::uint32_t> encodings = positive_finite(f);
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(f.from_float(inf), reference_round(f, encodings, inf));
  EXPECT_EQ(f.from_float(-inf), reference_round(f, encodings, -inf));
  for (std::uint32_t payload : {0x400000u, 0x000001u, 0x3fffffu, 0x7fffffu}) {
    for (std::uint32_t sign : {0u, 0x80000000u}) {
      const float nan = el::float_from_bits(sign | 0x7f800000u | payload);
      const std::uint32_t narrowed = f.from_float(nan);
      EXPECT_TRUE(is_nan_encoding(f, narrowed)) << f.name << " payload " << payload;
      EXPECT_EQ((narrowed & sign_bit(f)) != 0, sign != 0) << f.name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllNarrowFormats, ElementFormatTest, ::testing::ValuesIn(kFormats),
                         [](const ::testing::TestParamInfo<Format>& format_info) {
                           return std::string(format_info.param.name);
                         });

TEST(ElementFormats, DocumentedLimits) {
  EXPECT_EQ(el::fp8_e4m3_to_float(0x7e), 448.0f);
  EXPECT_TRUE(std::isnan(el::fp8_e4m3_to_float(0x7f)));
  EXPECT_TRUE(std::isnan(el::fp8_e4m3_to_float(0xff)));
  EXPECT_EQ(el::float_to_fp8_e4m3(464.0f), 0x7e);  // tie with the NaN slot goes to the even 448
  EXPECT_EQ(el::float_to_fp8_e4m3(465.0f), 0x7f);  // past it: overflow is NaN in e4m3fn
  EXPECT_EQ(el::fp8_e5m2_to_float(0x7b), 57344.0f);
  EXPECT_EQ(el::float_to_fp8_e5m2(61440.0f), 0x7c);  // tie at the top rounds to even = infinity
  EXPECT_EQ(el::float_to_half(65520.0f), 0x7c00);
  EXPECT_EQ(el::float_to_half(65519.0f), 0x7bff);
  EXPECT_EQ(el::float_to_half(5.9604645e-08f), 0x0001);                        // smallest subnormal
  EXPECT_EQ(el::float_to_half(2.9802322e-08f), 0x0000);                        // exactly half of it: ties to even zero
  EXPECT_EQ(el::float_to_half(2.9802326e-08f), 0x0001);                        // just above half
  EXPECT_EQ(el::float_to_bfloat16(el::float_from_bits(0x3f808000u)), 0x3f80);  // tie, even stays
  EXPECT_EQ(el::float_to_bfloat16(el::float_from_bits(0x3f818000u)), 0x3f82);  // tie, odd rounds up
}

}  // namespace
