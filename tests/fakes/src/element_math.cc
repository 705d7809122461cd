// Element-wise reduction arithmetic for every ncclDataType_t, rounding to the data type after each step.
#include "element_math.h"

#include <cstring>
#include <type_traits>

#include "kernels/element_formats.h"

namespace tsfake {
namespace {

namespace el = trainscope::elements;

// Narrow float formats compute in float: float keeps >= 2p+2 bits for every one of them, so rounding the float
// result once more to the format equals rounding the exact result (no double-rounding error).
template <typename Storage, float (*ToFloat)(Storage), Storage (*FromFloat)(float)>
struct NarrowFloat {
  using storage = Storage;
  using compute = float;
  static float load(Storage s) { return ToFloat(s); }
  static Storage store(float f) { return FromFloat(f); }
};

template <typename T>
struct Native {
  using storage = T;
  using compute = T;
  static T load(T v) { return v; }
  static T store(T v) { return v; }
};

// Integer sums and products wrap like the GPU does; doing them unsigned keeps signed overflow defined.
template <typename T>
T wrap_add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return a + b;
  }
}
template <typename T>
T wrap_mul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    // Promote to a wide unsigned type first: uint16-ish promotion to int could overflow.
    using U = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
  } else {
    return a * b;
  }
}

template <typename Format>
void reduce_typed(void* accumulator, const void* input, std::size_t count, OpKind kind) {
  using S = typename Format::storage;
  using C = typename Format::compute;
  for (std::size_t i = 0; i < count; ++i) {
    S a;
    S b;
    std::memcpy(&a, static_cast<const char*>(accumulator) + i * sizeof(S), sizeof(S));
    std::memcpy(&b, static_cast<const char*>(input) + i * sizeof(S), sizeof(S));
    const C x = Format::load(a);
    const C y = Format::load(b);
    C r = x;
    switch (kind) {
      case OpKind::kSum:
      case OpKind::kAvg:
      case OpKind::kPreMulSum:
        r = wrap_add(x, y);
        break;
      case OpKind::kProd:
        r = wrap_mul(x, y);
        break;
      // NaN wins, as it does in NCCL's device max/min on floating types.
      case OpKind::kMax:
        r = (x != x) ? x : ((y != y) ? y : (y > x ? y : x));
        break;
      case OpKind::kMin:
        r = (x != x) ? x : ((y != y) ? y : (y < x ? y : x));
        break;
      case OpKind::kNone:
        break;
    }
    const S stored = Format::store(r);
    std::memcpy(static_cast<char*>(accumulator) + i * sizeof(S), &stored, sizeof(S));
  }
}

template <typename Format>
void premultiply_typed(void* output, const void* input, std::size_t count, const void* scalar) {
  using S = typename Format::storage;
  using C = typename Format::compute;
  S scalar_storage;
  std::memcpy(&scalar_storage, scalar, sizeof(S));
  const C factor = Format::load(scalar_storage);
  for (std::size_t i = 0; i < count; ++i) {
    S v;
    std::memcpy(&v, static_cast<const char*>(input) + i * sizeof(S), sizeof(S));
    const S stored = Format::store(wrap_mul(Format::load(v), factor));
    std::memcpy(static_cast<char*>(output) + i * sizeof(S), &stored, sizeof(S));
  }
}

template <typename Format>
void divide_typed(void* values, std::size_t count, int divisor) {
  using S = typename Format::storage;
  using C = typename Format::compute;
  for (std::size_t i = 0; i < count; ++i) {
    S v;
    std::memcpy(&v, static_cast<char*>(values) + i * sizeof(S), sizeof(S));
    const S stored = Format::store(static_cast<C>(Format::load(v) / static_cast<C>(divisor)));
    std::memcpy(static_cast<char*>(values) + i * sizeof(S), &stored, sizeof(S));
  }
}

using Half = NarrowFloat<std::uint16_t, el::half_to_float, el::float_to_half>;
using Bfloat16 = NarrowFloat<std::uint16_t, el::bfloat16_to_float, el::float_to_bfloat16>;
using E4M3 = NarrowFloat<std::uint8_t, el::fp8_e4m3_to_float, el::float_to_fp8_e4m3>;
using E5M2 = NarrowFloat<std::uint8_t, el::fp8_e5m2_to_float, el::float_to_fp8_e5m2>;

template <typename Visitor>
void dispatch(ncclDataType_t datatype, Visitor&& visit) {
  switch (datatype) {
    case ncclInt8:
      visit(Native<std::int8_t>{});
      break;
    case ncclUint8:
      visit(Native<std::uint8_t>{});
      break;
    case ncclInt32:
      visit(Native<std::int32_t>{});
      break;
    case ncclUint32:
      visit(Native<std::uint32_t>{});
      break;
    case ncclInt64:
      visit(Native<std::int64_t>{});
      break;
    case ncclUint64:
      visit(Native<std::uint64_t>{});
      break;
    case ncclFloat16:
      visit(Half{});
      break;
    case ncclFloat32:
      visit(Native<float>{});
      break;
    case ncclFloat64:
      visit(Native<double>{});
      break;
    case ncclBfloat16:
      visit(Bfloat16{});
      break;
    case ncclFloat8e4m3:
      visit(E4M3{});
      break;
    case ncclFloat8e5m2:
      visit(E5M2{});
      break;
    default:
      break;
  }
}

}  // namespace

bool is_valid_datatype(ncclDataType_t datatype) { return datatype >= ncclInt8 && datatype < ncclNumTypes; }

std::size_t datatype_size(ncclDataType_t datatype) {
  switch (datatype) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
    default:
      return 0;
  }
}

const char* datatype_name(ncclDataType_t datatype) {
  static const char* const kNames[] = {"int8",    "uint8",   "int32",   "uint32",   "int64",      "uint64",
                                       "float16", "float32", "float64", "bfloat16", "float8e4m3", "float8e5m2"};
  return is_valid_datatype(datatype) ? kNames[datatype] : "invalid";
}

const char* op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::kSum:
      return "sum";
    case OpKind::kProd:
      return "prod";
    case OpKind::kMax:
      return "max";
    case OpKind::kMin:
      return "min";
    case OpKind::kAvg:
      return "avg";
    case OpKind::kPreMulSum:
      return "premulsum";
    case OpKind::kNone:
      return "none";
  }
  return "invalid";
}

void reduce_into(void* accumulator, const void* input, std::size_t count, ncclDataType_t datatype, OpKind kind) {
  dispatch(datatype, [&](auto format) { reduce_typed<decltype(format)>(accumulator, input, count, kind); });
}

void premultiply(void* output, const void* input, std::size_t count, ncclDataType_t datatype, const void* scalar) {
  dispatch(datatype, [&](auto format) { premultiply_typed<decltype(format)>(output, input, count, scalar); });
}

void divide_by(void* values, std::size_t count, ncclDataType_t datatype, int divisor) {
  dispatch(datatype, [&](auto format) { divide_typed<decltype(format)>(values, count, divisor); });
}

}  // namespace tsfake
