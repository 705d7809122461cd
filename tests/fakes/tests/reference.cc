// Test-side reference arithmetic: deterministic inputs and the results NCCL semantics say collectives must produce.
#include "reference.h"

#include <cmath>
#include <cstring>

#include "kernels/element_formats.h"

namespace tsfake_test {
namespace {

namespace el = trainscope::elements;

bool is_float(ncclDataType_t t) {
  return t == ncclFloat16 || t == ncclFloat32 || t == ncclFloat64 || t == ncclBfloat16 || t == ncclFloat8e4m3 ||
         t == ncclFloat8e5m2;
}
bool is_signed_int(ncclDataType_t t) { return t == ncclInt8 || t == ncclInt32 || t == ncclInt64; }

double load_float(ncclDataType_t t, const unsigned char* p) {
  std::uint16_t h = 0;
  switch (t) {
    case ncclFloat16:
      std::memcpy(&h, p, 2);
      return static_cast<double>(el::half_to_float(h));
    case ncclBfloat16:
      std::memcpy(&h, p, 2);
      return static_cast<double>(el::bfloat16_to_float(h));
    case ncclFloat8e4m3:
      return static_cast<double>(el::fp8_e4m3_to_float(*p));
    case ncclFloat8e5m2:
      return static_cast<double>(el::fp8_e5m2_to_float(*p));
    case ncclFloat32: {
      float f = 0;
      std::memcpy(&f, p, 4);
      return static_cast<double>(f);
    }
    default: {
      double d = 0;
      std::memcpy(&d, p, 8);
      return d;
    }
  }
}

// Rounds to the type through float; for values that are exact results of one operation on the type's values
// this equals direct rounding, because float and double each carry more than twice the narrower precision + 2.
void store_float(ncclDataType_t t, unsigned char* p, double value) {
  const auto f = static_cast<float>(value);
  std::uint16_t h = 0;
  switch (t) {
    case ncclFloat16:
      h = el::float_to_half(f);
      std::memcpy(p, &h, 2);
      break;
    case ncclBfloat16:
      h = el::float_to_bfloat16(f);
      std::memcpy(p, &h, 2);
      break;
    case ncclFloat8e4m3:
      *p = el::float_to_fp8_e4m3(f);
      break;
    case ncclFloat8e5m2:
      *p = el::float_to_fp8_e5m2(f);
      break;
    case ncclFloat32:
      std::memcpy(p, &f, 4);
      break;
    default:
      std::memcpy(p, &value, 8);
      break;
  }
}

// Integers travel as uint64: wrapping arithmetic modulo 2^64 truncates to the same result as the narrow type's.
std::uint64_t load_int(ncclDataType_t t, const unsigned char* p) {
  switch (t) {
    case ncclInt8:
      return static_cast<std::uint64_t>(static_cast<std::int64_t>(static_cast<std::int8_t>(*p)));
    case ncclUint8:
      return *p;
    case ncclInt32: {
      std::int32_t v = 0;
      std::memcpy(&v, p, 4);
      return static_cast<std::uint64_t>(static_cast<std::int64_t>(v));
    }
    case ncclUint32: {
      std::uint32_t v = 0;
      std::memcpy(&v, p, 4);
      return v;
    }
    default: {
      std::uint64_t v = 0;
      std::memcpy(&v, p, 8);
      return v;
    }
  }
}

void store_int(ncclDataType_t t, unsigned char* p, std::uint64_t v) { std::memcpy(p, &v, element_size(t)); }

double apply_float(TestOp op, double a, double b) {
  switch (op) {
    case TestOp::kProd:
      return a * b;
    case TestOp::kMax:
      return std::isnan(a) ? a : (std::isnan(b) ? b : (b > a ? b : a));
    case TestOp::kMin:
      return std::isnan(a) ? a : (std::isnan(b) ? b : (b < a ? b : a));
    default:
      return a + b;
  }
}

std::uint64_t apply_int(ncclDataType_t t, TestOp op, std::uint64_t a, std::uint64_t b) {
  switch (op) {
    case TestOp::kProd:
      return a * b;
    case TestOp::kMax:
    case TestOp::kMin: {
      const bool b_greater = is_signed_int(t) ? static_cast<std::int64_t>(b) > static_cast<std::int64_t>(a) : b > a;
      return (op == TestOp::kMax) == b_greater ? b : a;
    }
    default:
      return a + b;
  }
}

}  // namespace

std::size_t element_size(ncclDataType_t t) {
  switch (t) {
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
    default:
      return 8;
  }
}

const char* type_name(ncclDataType_t t) {
  static const char* const kNames[] = {"int8",    "uint8",   "int32",   "uint32",   "int64",      "uint64",
                                       "float16", "float32", "float64", "bfloat16", "float8e4m3", "float8e5m2"};
  return kNames[t];
}

const char* op_name(TestOp op) {
  static const char* const kNames[] = {"sum", "prod", "max", "min", "avg", "premulsum"};
  return kNames[static_cast<int>(op)];
}

Bytes make_input(ncclDataType_t t, std::size_t count, int rank, int salt) {
  const std::size_t size = element_size(t);
  Bytes out(count * size);
  for (std::size_t i = 0; i < count; ++i) {
    const long k =
        static_cast<long>((static_cast<std::size_t>(rank + 1) * 31 + i * 17 + static_cast<std::size_t>(salt) * 7) % 61);
    if (is_float(t)) {
      store_float(t, &out[i * size], static_cast<double>(k - 30) / 8.0);  // off-grid for fp8, so inputs round too
    } else if (is_signed_int(t)) {
      store_int(t, &out[i * size], static_cast<std::uint64_t>(k - 30));
    } else {
      store_int(t, &out[i * size], static_cast<std::uint64_t>(k));
    }
  }
  return out;
}

Bytes premul_scalar(ncclDataType_t t, int rank) {
  Bytes out(element_size(t));
  if (is_float(t))
    store_float(t, out.data(), 0.75 * (rank + 1));
  else
    store_int(t, out.data(), static_cast<std::uint64_t>(rank + 2));
  return out;
}

Bytes reference_reduce(ncclDataType_t t, TestOp op, const std::vector<Bytes>& inputs, std::size_t count) {
  const std::size_t size = element_size(t);
  const auto nranks = static_cast<int>(inputs.size());
  Bytes result(count * size);
  Bytes scaled(size);
  std::vector<Bytes> scalars;
  for (int r = 0; r < nranks; ++r) scalars.push_back(premul_scalar(t, r));
  for (std::size_t i = 0; i < count; ++i) {
    unsigned char* acc = &result[i * size];
    for (int r = 0; r < nranks; ++r) {
      const unsigned char* in = &inputs[static_cast<std::size_t>(r)][i * size];
      if (op == TestOp::kPreMulSum) {
        const Bytes& scalar = scalars[static_cast<std::size_t>(r)];
        if (is_float(t))
          store_float(t, scaled.data(), load_float(t, in) * load_float(t, scalar.data()));
        else
          store_int(t, scaled.data(), load_int(t, in) * load_int(t, scalar.data()));
        in = scaled.data();
      }
      if (r == 0) {
        std::memcpy(acc, in, size);
      } else if (is_float(t)) {
        store_float(t, acc, apply_float(op, load_float(t, acc), load_float(t, in)));
      } else {
        store_int(t, acc, apply_int(t, op, load_int(t, acc), load_int(t, in)));
      }
    }
    if (op == TestOp::kAvg) {
      if (is_float(t)) {
        store_float(t, acc, load_float(t, acc) / nranks);
      } else if (is_signed_int(t)) {
        std::int64_t v = static_cast<std::int64_t>(load_int(t, acc));
        store_int(t, acc, static_cast<std::uint64_t>(v / nranks));
      } else {
        store_int(t, acc, load_int(t, acc) / static_cast<std::uint64_t>(nranks));
      }
    }
  }
  return result;
}

std::string compare(ncclDataType_t t, const unsigned char* actual, const unsigned char* expected, std::size_t count) {
  const std::size_t size = element_size(t);
  for (std::size_t i = 0; i < count; ++i) {
    if (std::memcmp(actual + i * size, expected + i * size, size) == 0) continue;
    if (is_float(t) && std::isnan(load_float(t, actual + i * size)) && std::isnan(load_float(t, expected + i * size))) {
      continue;
    }
    char text[160];
    if (is_float(t)) {
      std::snprintf(text, sizeof(text), "element %zu: got %g, expected %g", i, load_float(t, actual + i * size),
                    load_float(t, expected + i * size));
    } else {
      std::snprintf(text, sizeof(text), "element %zu: got %llu, expected %llu", i,
                    static_cast<unsigned long long>(load_int(t, actual + i * size)),
                    static_cast<unsigned long long>(load_int(t, expected + i * size)));
    }
    return text;
  }
  return "";
}

}  // namespace tsfake_test
