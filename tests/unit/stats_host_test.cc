// Host tensor statistics against values computed independently here: every type, special values, alignment.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/stats.h"
#include "support/tensor_stats.h"

namespace {

using trainscope::stats::DType;
using trainscope::stats::TensorStats;

constexpr double kInf = std::numeric_limits<double>::infinity();

// An independent decoder written from the format definitions (not from element_formats.h): value of the bit
// pattern `bits` of a binary format with E exponent and M mantissa bits.
double decode_binary(std::uint64_t bits, int exponent_bits, int mantissa_bits, bool ieee_specials) {
  const int bias = (1 << (exponent_bits - 1)) - 1;
  const bool negative = ((bits >> (exponent_bits + mantissa_bits)) & 1) != 0;
  const std::uint64_t exponent = (bits >> mantissa_bits) & ((1u << exponent_bits) - 1);
  const std::uint64_t mantissa = bits & ((1ull << mantissa_bits) - 1);
  double magnitude;
  if (exponent == (1u << exponent_bits) - 1 && ieee_specials) {
    magnitude = mantissa == 0 ? kInf : std::numeric_limits<double>::quiet_NaN();
  } else if (exponent == (1u << exponent_bits) - 1 && mantissa == (1ull << mantissa_bits) - 1) {
    magnitude = std::numeric_limits<double>::quiet_NaN();  // e4m3fn: S.1111.111 is the only NaN
  } else if (exponent == 0) {
    magnitude = std::ldexp(static_cast<double>(mantissa), 1 - bias - mantissa_bits);
  } else {
    magnitude = std::ldexp(static_cast<double>(mantissa | (1ull << mantissa_bits)),
                           static_cast<int>(exponent) - bias - mantissa_bits);
  }
  return negative ? -magnitude : magnitude;
}

std::uint32_t size_of(DType type) {
  switch (type) {
    case DType::kFloat64:
    case DType::kInt64:
    case DType::kUint64:
      return 8;
    case DType::kFloat32:
    case DType::kInt32:
    case DType::kUint32:
      return 4;
    case DType::kFloat16:
    case DType::kBfloat16:
      return 2;
    default:
      return 1;
  }
}

bool is_float(DType type) { return static_cast<int>(type) <= static_cast<int>(DType::kFloat8E5M2); }

// The value an element stands for, as a double (integers: exactly, for the test values used here).
double value_of(DType type, std::uint64_t bits) {
  switch (type) {
    case DType::kFloat64: {
      double d;
      std::memcpy(&d, &bits, 8);
      return d;
    }
    case DType::kFloat32: {
      const auto narrow = static_cast<std::uint32_t>(bits);
      float f;
      std::memcpy(&f, &narrow, 4);
      return f;
    }
    case DType::kFloat16:
      return decode_binary(bits, 5, 10, true);
    case DType::kBfloat16:
      return decode_binary(bits, 8, 7, true);
    case DType::kFloat8E4M3:
      return decode_binary(bits, 4, 3, false);
    case DType::kFloat8E5M2:
      return decode_binary(bits, 5, 2, true);
    case DType::kInt8:
      return static_cast<std::int8_t>(bits);
    case DType::kUint8:
      return static_cast<std::uint8_t>(bits);
    case DType::kInt32:
      return static_cast<std::int32_t>(bits);
    case DType::kUint32:
      return static_cast<std::uint32_t>(bits);
    case DType::kInt64:
      return static_cast<double>(static_cast<std::int64_t>(bits));
    case DType::kUint64:
      return static_cast<double>(bits);
  }
  return 0;
}

// The checksum, written again from its documentation in stats_elements.h.
std::uint64_t reference_checksum(const std::vector<std::uint64_t>& elements, std::uint32_t size) {
  auto mix = [](std::uint32_t x) {
    std::uint32_t y = x * 0x85EBCA6Bu;
    y ^= y >> 15;
    y *= 0xC2B2AE35u;
    return static_cast<std::uint64_t>(y) * (y | 1u);
  };
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < elements.size(); ++i) {
    const std::uint32_t salt = static_cast<std::uint32_t>(i) * 0x9E3779B9u;
    sum += mix(static_cast<std::uint32_t>(elements[i]) ^ salt);
    if (size == 8) sum += mix(static_cast<std::uint32_t>(elements[i] >> 32) ^ salt ^ 0x6A09E667u);
  }
  return sum;
}

TensorStats reference_stats(DType type, const std::vector<std::uint64_t>& elements) {
  TensorStats expected;
  expected.dtype = type;
  expected.count = elements.size();
  double min_all = kInf, max_all = -kInf, min_finite = kInf, max_finite = -kInf;
  bool any_nan = false;
  for (std::size_t i = 0; i < elements.size(); ++i) {
    const double value = value_of(type, elements[i]);
    if (std::isnan(value)) {
      any_nan = true;
      ++expected.nan_count;
    } else if (std::isinf(value)) {
      ++(value > 0 ? expected.pos_inf_count : expected.neg_inf_count);
    } else {
      min_finite = std::min(min_finite, std::fabs(value));
      max_finite = std::max(max_finite, std::fabs(value));
    }
    if (!std::isnan(value)) {
      min_all = std::min(min_all, std::fabs(value));
      max_all = std::max(max_all, std::fabs(value));
    }
    if (!std::isfinite(value) && expected.first_nonfinite < 0) expected.first_nonfinite = static_cast<std::int64_t>(i);
  }
  expected.abs_min = any_nan ? std::nan("") : min_all;
  expected.abs_max = any_nan ? std::nan("") : max_all;
  expected.finite_abs_min = min_finite;
  expected.finite_abs_max = max_finite;
  expected.checksum = reference_checksum(elements, size_of(type));
  return expected;
}

// Stores the elements little-endian at `offset` bytes into a fresh buffer (an unaligned start for offset != 0).
std::vector<unsigned char> pack(DType type, const std::vector<std::uint64_t>& elements, std::size_t offset) {
  const std::uint32_t size = size_of(type);
  std::vector<unsigned char> buffer(offset + elements.size() * size + 8, 0xAB);
  for (std::size_t i = 0; i < elements.size(); ++i) std::memcpy(&buffer[offset + i * size], &elements[i], size);
  return buffer;
}

void expect_same_double(double expected, double actual, const char* what) {
  if (std::isnan(expected)) {
    EXPECT_TRUE(std::isnan(actual)) << what << ": " << actual;
  } else {
    EXPECT_EQ(expected, actual) << what;
  }
}

void expect_stats(const TensorStats& expected, const TensorStats& actual, const std::string& context) {
  SCOPED_TRACE(context);
  EXPECT_EQ(expected.count, actual.count);
  expect_same_double(expected.abs_min, actual.abs_min, "abs_min");
  expect_same_double(expected.abs_max, actual.abs_max, "abs_max");
  expect_same_double(expected.finite_abs_min, actual.finite_abs_min, "finite_abs_min");
  expect_same_double(expected.finite_abs_max, actual.finite_abs_max, "finite_abs_max");
  EXPECT_EQ(expected.nan_count, actual.nan_count);
  EXPECT_EQ(expected.pos_inf_count, actual.pos_inf_count);
  EXPECT_EQ(expected.neg_inf_count, actual.neg_inf_count);
  EXPECT_EQ(expected.first_nonfinite, actual.first_nonfinite);
  EXPECT_EQ(expected.checksum, actual.checksum);
}

void check(DType type, const std::vector<std::uint64_t>& elements, const std::string& context) {
  const TensorStats expected = reference_stats(type, elements);
  for (std::size_t offset : {0, 1, 3, 5}) {
    const auto buffer = pack(type, elements, offset);
    const TensorStats actual = trainscope::stats::compute_stats_host(buffer.data() + offset, elements.size(), type);
    expect_stats(expected, actual, context + " offset " + std::to_string(offset));
  }
}

constexpr DType kAllTypes[] = {DType::kFloat64,    DType::kFloat32,    DType::kFloat16, DType::kBfloat16,
                               DType::kFloat8E4M3, DType::kFloat8E5M2, DType::kInt8,    DType::kUint8,
                               DType::kInt32,      DType::kUint32,     DType::kInt64,   DType::kUint64};

// Interesting bit patterns of each float type: +-0, subnormals, 1, the largest finite, +-inf, NaNs.
struct Specials {
  std::vector<std::uint64_t> finite;
  std::vector<std::uint64_t> infinities;  // +inf, -inf
  std::vector<std::uint64_t> nans;        // different payloads and signs
  std::uint64_t largest_finite;
  std::uint64_t smallest_subnormal;
};

Specials specials(DType type) {
  switch (type) {
    case DType::kFloat64:
      return {{0, 0x8000000000000000ull, 1, 0x000fffffffffffffull, 0x3ff0000000000000ull, 0xbff0000000000000ull,
               0x7fefffffffffffffull},
              {0x7ff0000000000000ull, 0xfff0000000000000ull},
              {0x7ff8000000000000ull, 0x7ff0000000000001ull, 0xfff8000000000123ull, 0x7fffffffffffffffull},
              0x7fefffffffffffffull,
              1};
    case DType::kFloat32:
      return {{0, 0x80000000u, 1, 0x007fffffu, 0x3f800000u, 0xbf800000u, 0x7f7fffffu},
              {0x7f800000u, 0xff800000u},
              {0x7fc00000u, 0x7f800001u, 0xffc01234u, 0x7fffffffu},
              0x7f7fffffu,
              1};
    case DType::kFloat16:
      return {{0, 0x8000u, 1, 0x03ffu, 0x3c00u, 0xbc00u, 0x7bffu},
              {0x7c00u, 0xfc00u},
              {0x7e00u, 0x7c01u, 0xfe55u, 0x7fffu},
              0x7bffu,
              1};
    case DType::kBfloat16:
      return {{0, 0x8000u, 1, 0x007fu, 0x3f80u, 0xbf80u, 0x7f7fu},
              {0x7f80u, 0xff80u},
              {0x7fc0u, 0x7f81u, 0xffc5u, 0x7fffu},
              0x7f7fu,
              1};
    case DType::kFloat8E4M3:
      return {{0, 0x80u, 1, 0x07u, 0x38u, 0xb8u, 0x7eu, 0x7cu, 0xfeu}, {}, {0x7fu, 0xffu}, 0x7eu, 1};
    case DType::kFloat8E5M2:
      return {{0, 0x80u, 1, 0x03u, 0x3cu, 0xbcu, 0x7bu}, {0x7cu, 0xfcu}, {0x7eu, 0x7du, 0xffu, 0x7fu}, 0x7bu, 1};
    default:
      return {};
  }
}

TEST(StatsHost, SkippingTheChecksumChangesNothingElse) {
  using trainscope::stats::ChecksumMode;
  using trainscope::stats::compute_stats_host;
  std::vector<float> values(1001);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.37f - 100.0f;
  values[17] = std::numeric_limits<float>::infinity();
  values[400] = -std::numeric_limits<float>::infinity();
  values[999] = std::numeric_limits<float>::quiet_NaN();
  for (size_t count : {size_t{0}, size_t{16}, size_t{500}, values.size()}) {
    const auto full = compute_stats_host(values.data(), count, DType::kFloat32);
    const auto quick = compute_stats_host(values.data(), count, DType::kFloat32, ChecksumMode::kSkip);
    EXPECT_EQ(quick.checksum, 0u) << count;
    EXPECT_EQ(quick.count, full.count);
    EXPECT_EQ(std::isnan(quick.abs_min), std::isnan(full.abs_min));
    if (!std::isnan(full.abs_min)) {
      EXPECT_EQ(quick.abs_min, full.abs_min);
      EXPECT_EQ(quick.abs_max, full.abs_max);
    }
    EXPECT_EQ(quick.finite_abs_min, full.finite_abs_min);
    EXPECT_EQ(quick.finite_abs_max, full.finite_abs_max);
    EXPECT_EQ(quick.nan_count, full.nan_count);
    EXPECT_EQ(quick.pos_inf_count, full.pos_inf_count);
    EXPECT_EQ(quick.neg_inf_count, full.neg_inf_count);
    EXPECT_EQ(quick.first_nonfinite, full.first_nonfinite);
  }
}

TEST(StatsHost, LargestFiniteAndSmallestSubnormalDecodeToKnownValues) {
  EXPECT_EQ(65504.0, trainscope::stats::key_to_double(DType::kFloat16, specials(DType::kFloat16).largest_finite));
  EXPECT_EQ(448.0, trainscope::stats::key_to_double(DType::kFloat8E4M3, 0x7e));
  EXPECT_EQ(57344.0, trainscope::stats::key_to_double(DType::kFloat8E5M2, 0x7b));
  EXPECT_EQ(std::ldexp(1.0, -24), trainscope::stats::key_to_double(DType::kFloat16, 1));
  EXPECT_EQ(std::ldexp(1.0, -9), trainscope::stats::key_to_double(DType::kFloat8E4M3, 1));
  EXPECT_EQ(std::ldexp(1.0, -16), trainscope::stats::key_to_double(DType::kFloat8E5M2, 1));
  EXPECT_EQ(std::ldexp(1.0, -133), trainscope::stats::key_to_double(DType::kBfloat16, 1));
  EXPECT_EQ(static_cast<double>(std::numeric_limits<float>::max()),
            trainscope::stats::key_to_double(DType::kFloat32, 0x7f7fffffu));
  EXPECT_EQ(std::numeric_limits<double>::max(),
            trainscope::stats::key_to_double(DType::kFloat64, 0x7fefffffffffffffull));
}

TEST(StatsHost, FiniteSpecialsEveryFloatType) {
  for (DType type : kAllTypes) {
    if (!is_float(type)) continue;
    const Specials s = specials(type);
    check(type, s.finite, std::string("finite specials ") + trainscope::stats::dtype_name(type));
    const TensorStats stats =
        trainscope::stats::compute_stats_host(pack(type, s.finite, 0).data(), s.finite.size(), type);
    EXPECT_EQ(0.0, stats.abs_min) << trainscope::stats::dtype_name(type);
    EXPECT_EQ(value_of(type, s.largest_finite), stats.abs_max) << trainscope::stats::dtype_name(type);
    EXPECT_FALSE(stats.has_nonfinite());
    // Only subnormals: the smallest one is the abs-min.
    const std::vector<std::uint64_t> subnormals = {s.smallest_subnormal, s.smallest_subnormal + 1};
    const TensorStats sub = trainscope::stats::compute_stats_host(pack(type, subnormals, 0).data(), 2, type);
    EXPECT_EQ(value_of(type, s.smallest_subnormal), sub.abs_min);
    EXPECT_GT(sub.abs_min, 0.0);
  }
}

TEST(StatsHost, InfinitiesCountBySignAndMakeAbsMaxInf) {
  for (DType type : kAllTypes) {
    if (!is_float(type) || type == DType::kFloat8E4M3) continue;
    const Specials s = specials(type);
    std::vector<std::uint64_t> elements = {s.finite[4], s.infinities[1], s.finite[3], s.infinities[0], s.infinities[1]};
    check(type, elements, std::string("infinities ") + trainscope::stats::dtype_name(type));
    const TensorStats stats =
        trainscope::stats::compute_stats_host(pack(type, elements, 0).data(), elements.size(), type);
    EXPECT_EQ(1u, stats.pos_inf_count);
    EXPECT_EQ(2u, stats.neg_inf_count);
    EXPECT_EQ(1, stats.first_nonfinite);
    EXPECT_EQ(kInf, stats.abs_max);
    EXPECT_EQ(value_of(type, s.finite[3]), stats.abs_min);
    EXPECT_EQ(1.0, stats.finite_abs_max);
    // Only infinities: abs-min is inf too, and the finite figures are the empty interval.
    const TensorStats only = trainscope::stats::compute_stats_host(pack(type, s.infinities, 0).data(), 2, type);
    EXPECT_EQ(kInf, only.abs_min);
    EXPECT_EQ(kInf, only.abs_max);
    EXPECT_EQ(kInf, only.finite_abs_min);
    EXPECT_EQ(-kInf, only.finite_abs_max);
  }
}

TEST(StatsHost, AnyNanPropagatesToBothAbsValuesWhateverItsPayload) {
  for (DType type : kAllTypes) {
    if (!is_float(type)) continue;
    const Specials s = specials(type);
    for (std::uint64_t nan : s.nans) {
      std::vector<std::uint64_t> elements;
      for (std::size_t i = 0; i < s.finite.size(); ++i) {
        if (i == 2) elements.push_back(nan);
        elements.push_back(s.finite[i]);
      }
      elements.push_back(nan);
      check(type, elements, std::string("nan ") + trainscope::stats::dtype_name(type) + " " + std::to_string(nan));
      const TensorStats stats =
          trainscope::stats::compute_stats_host(pack(type, elements, 0).data(), elements.size(), type);
      EXPECT_TRUE(std::isnan(stats.abs_min));
      EXPECT_TRUE(std::isnan(stats.abs_max));
      EXPECT_FALSE(std::signbit(stats.abs_max));
      EXPECT_EQ(2u, stats.nan_count);
      EXPECT_EQ(2, stats.first_nonfinite);
      EXPECT_EQ(value_of(type, s.largest_finite), stats.finite_abs_max);
      EXPECT_EQ("     nan      nan x", trainscope::stats::format_stats_row(stats, "x"));
    }
  }
}

TEST(StatsHost, E4m3HasNoInfinityItsAllOnesExponentIsFinite) {
  const std::vector<std::uint64_t> elements = {0x78, 0x7e, 0xfe, 0x7f};
  const TensorStats stats =
      trainscope::stats::compute_stats_host(pack(DType::kFloat8E4M3, elements, 0).data(), 4, DType::kFloat8E4M3);
  EXPECT_EQ(0u, stats.pos_inf_count + stats.neg_inf_count);
  EXPECT_EQ(1u, stats.nan_count);
  EXPECT_EQ(3, stats.first_nonfinite);
  EXPECT_EQ(256.0, stats.finite_abs_min);
  EXPECT_EQ(448.0, stats.finite_abs_max);
}

TEST(StatsHost, EmptyTensorIsTheEmptyIntervalForEveryType) {
  for (DType type : kAllTypes) {
    const TensorStats stats = trainscope::stats::compute_stats_host(nullptr, 0, type);
    EXPECT_EQ(0u, stats.count);
    EXPECT_EQ(kInf, stats.abs_min);
    EXPECT_EQ(-kInf, stats.abs_max);
    EXPECT_EQ(kInf, stats.finite_abs_min);
    EXPECT_EQ(-kInf, stats.finite_abs_max);
    EXPECT_EQ(0u, stats.nonfinite_count());
    EXPECT_EQ(-1, stats.first_nonfinite);
    EXPECT_EQ(0u, stats.checksum);
  }
}

TEST(StatsHost, IntegersGiveExactMagnitudesAndChecksumOnly) {
  struct Case {
    DType type;
    std::vector<std::uint64_t> elements;
    double abs_min, abs_max;
  };
  const Case cases[] = {
      {DType::kInt8, {0x80, 0x7f, 0xff, 0x05}, 1, 128},
      {DType::kUint8, {0xff, 0x00, 0x10}, 0, 255},
      {DType::kInt32, {0x80000000u, 0xfffffffdu, 0x7fffffffu}, 3, 2147483648.0},
      {DType::kUint32, {0xffffffffu, 7}, 7, 4294967295.0},
      {DType::kInt64, {0x8000000000000000ull, 0xffffffffffffffffull, 42}, 1, 9223372036854775808.0},
      {DType::kUint64, {0xffffffffffffffffull, 0xffffffffffffffffull}, 18446744073709551616.0, 18446744073709551616.0},
  };
  for (const Case& c : cases) {
    check(c.type, c.elements, std::string("integers ") + trainscope::stats::dtype_name(c.type));
    const TensorStats stats =
        trainscope::stats::compute_stats_host(pack(c.type, c.elements, 0).data(), c.elements.size(), c.type);
    EXPECT_EQ(c.abs_min, stats.abs_min) << trainscope::stats::dtype_name(c.type);
    EXPECT_EQ(c.abs_max, stats.abs_max) << trainscope::stats::dtype_name(c.type);
    EXPECT_EQ(stats.abs_min, stats.finite_abs_min);
    EXPECT_EQ(stats.abs_max, stats.finite_abs_max);
    EXPECT_EQ(0u, stats.nonfinite_count());
    EXPECT_EQ(-1, stats.first_nonfinite);
  }
}

TEST(StatsHost, RandomBitsEveryTypeOddLengthsUnalignedStarts) {
  std::mt19937_64 rng(12345);
  for (DType type : kAllTypes) {
    const std::uint32_t size = size_of(type);
    const std::uint64_t mask = size == 8 ? ~0ull : (1ull << (8 * size)) - 1;
    for (std::size_t length : {1u, 2u, 3u, 7u, 15u, 17u, 33u, 255u, 1001u}) {
      std::vector<std::uint64_t> elements(length);
      for (auto& e : elements) e = rng() & mask;
      check(type, elements,
            std::string("random ") + trainscope::stats::dtype_name(type) + " n=" + std::to_string(length));
    }
  }
}

TEST(StatsHost, RandomFiniteValuesHaveNoNonFinite) {
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.0f, 100.0f);
  std::vector<std::uint64_t> elements(4097);
  for (auto& e : elements) {
    const float value = normal(rng);
    std::uint32_t bits;
    std::memcpy(&bits, &value, 4);
    e = bits;
  }
  check(DType::kFloat32, elements, "normal floats");
  const TensorStats stats = trainscope::stats::compute_stats_host(pack(DType::kFloat32, elements, 0).data(),
                                                                  elements.size(), DType::kFloat32);
  EXPECT_EQ(stats.abs_min, stats.finite_abs_min);
  EXPECT_EQ(stats.abs_max, stats.finite_abs_max);
  EXPECT_EQ(-1, stats.first_nonfinite);
}

TEST(StatsHost, ChecksumSeesEverySingleChangeAndSwapsAndIsSplitIndependent) {
  std::mt19937_64 rng(99);
  for (DType type : kAllTypes) {
    const std::uint32_t size = size_of(type);
    const std::uint64_t mask = size == 8 ? ~0ull : (1ull << (8 * size)) - 1;
    std::vector<std::uint64_t> elements(301);
    for (auto& e : elements) e = rng() & mask;
    const auto buffer = pack(type, elements, 0);
    const std::uint64_t base = trainscope::stats::compute_stats_host(buffer.data(), elements.size(), type).checksum;

    auto changed = elements;
    changed[150] ^= 1;  // one bit of one element
    EXPECT_NE(base,
              trainscope::stats::compute_stats_host(pack(type, changed, 0).data(), changed.size(), type).checksum);
    auto swapped = elements;
    swapped[3] = elements[4] == elements[3] ? elements[3] ^ 1 : elements[4];
    swapped[4] = elements[3];
    EXPECT_NE(base,
              trainscope::stats::compute_stats_host(pack(type, swapped, 0).data(), swapped.size(), type).checksum);

    // The same tensor in three pieces, merged in another order, gives the same partial as in one.
    trainscope::stats::StatsPartial a = trainscope::stats::empty_partial();
    trainscope::stats::StatsPartial b = trainscope::stats::empty_partial();
    trainscope::stats::accumulate_stats_host(a, buffer.data() + 200 * size, 101, type, 200);
    trainscope::stats::accumulate_stats_host(b, buffer.data(), 77, type, 0);
    trainscope::stats::accumulate_stats_host(a, buffer.data() + 77 * size, 123, type, 77);
    trainscope::stats::merge_partial(a, b);
    const TensorStats merged = trainscope::stats::finalize_stats(type, elements.size(), a);
    expect_stats(reference_stats(type, elements), merged, std::string("split ") + trainscope::stats::dtype_name(type));
  }
}

TEST(StatsHost, ParsesCanonicalPyTorchAndNcclSpellings) {
  using trainscope::stats::parse_dtype;
  EXPECT_EQ(DType::kFloat32, parse_dtype("fp32"));
  EXPECT_EQ(DType::kFloat32, parse_dtype("torch.float32"));
  EXPECT_EQ(DType::kFloat32, parse_dtype("float"));
  EXPECT_EQ(DType::kFloat16, parse_dtype("half"));
  EXPECT_EQ(DType::kFloat16, parse_dtype("ncclFloat16"));
  EXPECT_EQ(DType::kBfloat16, parse_dtype("BFloat16"));
  EXPECT_EQ(DType::kFloat8E4M3, parse_dtype("float8_e4m3fn"));
  EXPECT_EQ(DType::kFloat8E5M2, parse_dtype("torch.float8_e5m2"));
  EXPECT_EQ(DType::kFloat64, parse_dtype("double"));
  EXPECT_EQ(DType::kInt64, parse_dtype("long"));
  EXPECT_EQ(DType::kUint8, parse_dtype("uint8"));
  EXPECT_FALSE(parse_dtype("float128").has_value());
  EXPECT_FALSE(parse_dtype("").has_value());
  for (DType type : kAllTypes) {
    EXPECT_EQ(type, parse_dtype(trainscope::stats::dtype_name(type)));
    EXPECT_EQ(size_of(type), trainscope::stats::dtype_size(type));
  }
  EXPECT_EQ(DType::kInt8, trainscope::stats::dtype_from_nccl(0));
  EXPECT_EQ(DType::kFloat32, trainscope::stats::dtype_from_nccl(7));
  EXPECT_EQ(DType::kBfloat16, trainscope::stats::dtype_from_nccl(9));
  EXPECT_EQ(DType::kFloat8E5M2, trainscope::stats::dtype_from_nccl(11));
  EXPECT_FALSE(trainscope::stats::dtype_from_nccl(12).has_value());
}

TEST(StatsHost, FormatsLikePrintfInTheFrameReport) {
  using trainscope::stats::format_abs_value;
  EXPECT_EQ("1.00e+00", format_abs_value(1.0));
  EXPECT_EQ("6.55e+04", format_abs_value(65504.0));
  EXPECT_EQ("0.00e+00", format_abs_value(0.0));
  EXPECT_EQ("1.40e-45", format_abs_value(1.401298464324817e-45));
  EXPECT_EQ("     inf", format_abs_value(kInf));
  EXPECT_EQ("    -inf", format_abs_value(-kInf));
  EXPECT_EQ("     nan", format_abs_value(std::nan("")));
  char glibc[32];
  std::snprintf(glibc, sizeof glibc, "%8.2e", kInf);
  EXPECT_EQ(std::string(glibc), format_abs_value(kInf));
}

}  // namespace

// Without the checksum the host statistics take finite blocks in a vectorised pass and redo a block with a
// non-finite element by the definition: every field but the checksum must be what the definition gives, whatever
// the block boundaries, the specials' places and the start's alignment.
// Both builds of the pass: AVX2's (where the CPU has it) and the baseline's.
class StatsHostFastPass : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { trainscope::stats::allow_host_stats_avx2(GetParam()); }
  void TearDown() override { trainscope::stats::allow_host_stats_avx2(true); }
};
INSTANTIATE_TEST_SUITE_P(Builds, StatsHostFastPass, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& build) {
                           return build.param ? "Avx2WhereTheCpuHasIt" : "Baseline";
                         });

TEST_P(StatsHostFastPass, AgreesWithTheDefinitionAcrossBlocks) {
  using trainscope::stats::ChecksumMode;
  using trainscope::stats::compute_stats_host;
  std::mt19937_64 rng(777);
  for (DType type : kAllTypes) {
    const std::uint32_t size = trainscope::stats::dtype_size(type);
    const std::uint64_t mask = size == 8 ? ~0ull : (1ull << (8 * size)) - 1;
    const Specials special = specials(type);
    const auto rules = trainscope::stats::dtype_rules(type);
    for (std::size_t length : {1u, 1023u, 1024u, 1025u, 2049u, 5000u}) {
      for (int variant = 0; variant < 4; ++variant) {
        std::vector<std::uint64_t> elements(length);
        for (auto& e : elements) {
          e = rng() & mask;
          if (rules.is_float) e &= ~(rules.sign_mask >> 1);  // an exponent bit cleared: finite
        }
        // 0: all finite; 1: one special at the end of a block; 2: a few anywhere; 3: the extremes of the type.
        std::vector<std::uint64_t> extra = special.infinities;
        extra.insert(extra.end(), special.nans.begin(), special.nans.end());
        if (!rules.is_float) extra = {0, mask, mask >> 1, (mask >> 1) + 1, 1};
        if (variant == 1 && !extra.empty()) elements[std::min<std::size_t>(length - 1, 1023)] = extra[0];
        if (variant == 2 && !extra.empty()) {
          for (int k = 0; k < 3; ++k) elements[rng() % length] = extra[rng() % extra.size()];
        }
        if (variant == 3) {
          std::vector<std::uint64_t> extremes = special.finite;
          if (!rules.is_float) extremes = extra;
          for (std::size_t k = 0; k < extremes.size() && k < length; ++k) elements[rng() % length] = extremes[k];
        }
        const std::size_t offset = static_cast<std::size_t>(variant) % 3;
        const auto bytes = pack(type, elements, offset);
        const auto full = compute_stats_host(bytes.data() + offset, length, type);
        const auto quick = compute_stats_host(bytes.data() + offset, length, type, ChecksumMode::kSkip);
        const std::string what = std::string(trainscope::stats::dtype_name(type)) + " n=" + std::to_string(length) +
                                 " variant " + std::to_string(variant);
        trainscope::testing::expect_same_statistics(quick, full, what);
      }
    }
  }
}

// Each type's two names (the short one of the statistics, PyTorch's of the warnings) come from one table and parse
// back to the type.
TEST(StatsHost, EveryTypesNamesParseBack) {
  for (int i = 0; i < trainscope::stats::kDTypeCount; ++i) {
    const auto type = static_cast<DType>(i);
    EXPECT_EQ(trainscope::stats::parse_dtype(trainscope::stats::dtype_name(type)), type) << i;
    EXPECT_EQ(trainscope::stats::parse_dtype(trainscope::stats::torch_dtype_name(type)), type) << i;
  }
  EXPECT_STREQ(trainscope::stats::torch_dtype_name(DType::kFloat8E4M3), "float8_e4m3fn");
  EXPECT_STREQ(trainscope::stats::dtype_name(DType::kBfloat16), "bf16");
}
