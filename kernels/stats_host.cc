// Host implementation of the tensor statistics: the per-element rules of stats_elements.h over a host buffer.
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "kernels/stats.h"

namespace trainscope::stats {
namespace {

// Each type's two names, indexed by DType: written once here for every report and every parser.
struct Names {
  DType type;
  const char* short_name;  // dtype_name
  const char* torch_name;  // torch_dtype_name
};
constexpr Names kNames[] = {
    {DType::kFloat64, "fp64", "float64"},
    {DType::kFloat32, "fp32", "float32"},
    {DType::kFloat16, "fp16", "float16"},
    {DType::kBfloat16, "bf16", "bfloat16"},
    {DType::kFloat8E4M3, "e4m3", "float8_e4m3fn"},
    {DType::kFloat8E5M2, "e5m2", "float8_e5m2"},
    {DType::kInt8, "int8", "int8"},
    {DType::kUint8, "uint8", "uint8"},
    {DType::kInt32, "int32", "int32"},
    {DType::kUint32, "uint32", "uint32"},
    {DType::kInt64, "int64", "int64"},
    {DType::kUint64, "uint64", "uint64"},
};
constexpr bool names_in_enum_order() {
  for (size_t i = 0; i < std::size(kNames); ++i)
    if (static_cast<size_t>(kNames[i].type) != i) return false;
  return std::size(kNames) == static_cast<size_t>(kDTypeCount);
}
static_assert(names_in_enum_order(), "kNames is indexed by DType and names every type");

// Every spelling parse_dtype accepts, both names of each type among them (StatsHost.EveryTypesNamesParseBack).
struct Spelling {
  const char* name;
  DType type;
};

// Lower-case; "torch." is stripped before lookup.
constexpr Spelling kSpellings[] = {
    {"fp64", DType::kFloat64},
    {"float64", DType::kFloat64},
    {"double", DType::kFloat64},
    {"f64", DType::kFloat64},
    {"nccldouble", DType::kFloat64},
    {"ncclfloat64", DType::kFloat64},
    {"fp32", DType::kFloat32},
    {"float32", DType::kFloat32},
    {"float", DType::kFloat32},
    {"f32", DType::kFloat32},
    {"ncclfloat", DType::kFloat32},
    {"ncclfloat32", DType::kFloat32},
    {"fp16", DType::kFloat16},
    {"float16", DType::kFloat16},
    {"half", DType::kFloat16},
    {"f16", DType::kFloat16},
    {"ncclhalf", DType::kFloat16},
    {"ncclfloat16", DType::kFloat16},
    {"bf16", DType::kBfloat16},
    {"bfloat16", DType::kBfloat16},
    {"ncclbfloat16", DType::kBfloat16},
    {"e4m3", DType::kFloat8E4M3},
    {"e4m3fn", DType::kFloat8E4M3},
    {"fp8_e4m3", DType::kFloat8E4M3},
    {"float8_e4m3fn", DType::kFloat8E4M3},
    {"float8_e4m3", DType::kFloat8E4M3},
    {"ncclfloat8e4m3", DType::kFloat8E4M3},
    {"e5m2", DType::kFloat8E5M2},
    {"fp8_e5m2", DType::kFloat8E5M2},
    {"float8_e5m2", DType::kFloat8E5M2},
    {"ncclfloat8e5m2", DType::kFloat8E5M2},
    {"int8", DType::kInt8},
    {"char", DType::kInt8},
    {"ncclint8", DType::kInt8},
    {"ncclchar", DType::kInt8},
    {"uint8", DType::kUint8},
    {"byte", DType::kUint8},
    {"nccluint8", DType::kUint8},
    {"int32", DType::kInt32},
    {"int", DType::kInt32},
    {"ncclint32", DType::kInt32},
    {"ncclint", DType::kInt32},
    {"uint32", DType::kUint32},
    {"nccluint32", DType::kUint32},
    {"int64", DType::kInt64},
    {"long", DType::kInt64},
    {"ncclint64", DType::kInt64},
    {"uint64", DType::kUint64},
    {"nccluint64", DType::kUint64},
};

template <typename Bits>
Bits load_bits(const unsigned char* p) {
  Bits bits;
  std::memcpy(&bits, p, sizeof bits);  // any alignment
  return bits;
}

// The loop for one type. Finite elements take the short path (one compare); the rest go through add_element,
// which is the definition; both produce exactly what add_element alone would.
template <DType kType, typename Bits, bool kChecksum>
void accumulate_typed(StatsPartial& partial, const unsigned char* data, std::uint64_t count, std::uint64_t first) {
  constexpr DTypeRules kRules = dtype_rules(kType);
  static_assert(sizeof(Bits) == kRules.size);
  std::uint64_t min_key = partial.min_finite_key;
  std::uint64_t max_key = partial.max_finite_key;
  std::uint64_t checksum = 0;
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::uint64_t bits = load_bits<Bits>(data + i * sizeof(Bits));
    const std::uint64_t index = first + i;
    if (!kRules.is_float || (bits & ~kRules.sign_mask) < kRules.non_finite_key) {
      const std::uint64_t key = magnitude_key(kRules, bits);
      min_key = key < min_key ? key : min_key;
      max_key = key > max_key ? key : max_key;
      if constexpr (kChecksum) checksum += element_hash(index_salt(index), bits, kRules.size == 8);
    } else {
      add_element(partial, kRules, index, bits);
    }
  }
  partial.min_finite_key = min_key < partial.min_finite_key ? min_key : partial.min_finite_key;
  partial.max_finite_key = max_key > partial.max_finite_key ? max_key : partial.max_finite_key;
  partial.checksum += checksum;
}

// Without the checksum (what the engine takes on host buffers): blocks of kBlock elements, each first in one
// branch-free pass the compiler vectorises (kernels/CMakeLists.txt builds this file at -O3; the magnitude keys in the
// element's own width, their min and max, and whether any key is non-finite); a block with a non-finite element is
// taken again by accumulate_typed, the definition. Integers are never non-finite. Same results as accumulate_typed
// alone, several times faster.
constexpr std::uint64_t kBlock = 1024;

template <DType kType, typename Bits>
[[gnu::always_inline]] inline bool finite_block(const unsigned char* data, std::uint64_t count, Bits* min_key,
                                                Bits* max_key) {
  constexpr DTypeRules kRules = dtype_rules(kType);
  constexpr Bits kSign = static_cast<Bits>(kRules.sign_mask);
  constexpr Bits kNonFinite = static_cast<Bits>(kRules.non_finite_key);
  constexpr unsigned kShift = 8 * sizeof(Bits) - 1;
  Bits lo = static_cast<Bits>(~Bits{0});
  Bits hi = 0;
  Bits bad = 0;
  for (std::uint64_t i = 0; i < count; ++i) {
    Bits bits;
    std::memcpy(&bits, data + i * sizeof(Bits), sizeof(Bits));
    Bits key;
    if constexpr (kRules.is_float) {
      key = static_cast<Bits>(bits & static_cast<Bits>(~kSign));
      bad |= static_cast<Bits>(key >= kNonFinite);
    } else if constexpr (kRules.is_signed) {
      const Bits negative = static_cast<Bits>(0 - static_cast<Bits>(bits >> kShift));  // all ones when negative
      key = static_cast<Bits>((bits ^ negative) - negative);                           // |value|, exact
    } else {
      key = bits;
    }
    lo = key < lo ? key : lo;
    hi = key > hi ? key : hi;
  }
  *min_key = lo;
  *max_key = hi;
  return bad == 0;
}

// x86-64's baseline (SSE2) has unsigned min/max for bytes only, so for 2- and 4-byte elements the pass above runs at a
// third of a plain read; AVX2 (every x86 server CPU since 2013) has them for every width. The pass is built for both
// and chosen once, by what the CPU says it has.
#if defined(__x86_64__)
template <DType kType, typename Bits>
__attribute__((target("avx2"))) bool finite_block_avx2(const unsigned char* data, std::uint64_t count, Bits* min_key,
                                                       Bits* max_key) {
  return finite_block<kType, Bits>(data, count, min_key, max_key);
}

std::atomic<bool> g_avx2_allowed{true};

bool use_avx2() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return has && g_avx2_allowed.load(std::memory_order_relaxed);
}
#endif

template <DType kType, typename Bits>
bool finite_block_any_cpu(const unsigned char* data, std::uint64_t count, Bits* min_key, Bits* max_key) {
#if defined(__x86_64__)
  if (use_avx2()) return finite_block_avx2<kType, Bits>(data, count, min_key, max_key);
#endif
  return finite_block<kType, Bits>(data, count, min_key, max_key);
}

template <DType kType, typename Bits>
void accumulate_blocks(StatsPartial& partial, const unsigned char* data, std::uint64_t count, std::uint64_t first) {
  for (std::uint64_t done = 0; done < count; done += kBlock) {
    const std::uint64_t n = count - done < kBlock ? count - done : kBlock;
    const unsigned char* block = data + done * sizeof(Bits);
    Bits lo = 0;
    Bits hi = 0;
    if (finite_block_any_cpu<kType, Bits>(block, n, &lo, &hi)) {
      if (lo < partial.min_finite_key) partial.min_finite_key = lo;
      if (hi > partial.max_finite_key) partial.max_finite_key = hi;
    } else {
      accumulate_typed<kType, Bits, false>(partial, block, n, first + done);
    }
  }
}

// One type's loop, with or without the checksum (a template argument: the loop itself has no branch on it).
template <DType kType, typename Bits>
void accumulate_as(StatsPartial& partial, const unsigned char* data, std::uint64_t count, std::uint64_t first,
                   ChecksumMode checksum) {
  if (checksum == ChecksumMode::kCompute) {
    accumulate_typed<kType, Bits, true>(partial, data, count, first);
  } else {
    accumulate_blocks<kType, Bits>(partial, data, count, first);
  }
}

constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

const char* dtype_name(DType type) {
  const size_t index = static_cast<size_t>(type);
  return index < std::size(kNames) ? kNames[index].short_name : "unknown";
}

const char* torch_dtype_name(DType type) {
  const size_t index = static_cast<size_t>(type);
  return index < std::size(kNames) ? kNames[index].torch_name : "unknown";
}

std::optional<DType> parse_dtype(std::string_view name) {
  std::string lower;
  for (char c : name) lower.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  if (lower.starts_with("torch.")) lower.erase(0, 6);
  for (const Spelling& spelling : kSpellings) {
    if (lower == spelling.name) return spelling.type;
  }
  return std::nullopt;
}

const char* dtype_spellings() {
  return "fp64 fp32 fp16 bf16 e4m3 e5m2 int8 uint8 int32 uint32 int64 uint64 (also float64 double float32 float "
         "float16 half bfloat16 float8_e4m3fn float8_e5m2 int long, a torch. prefix, and the NCCL names such as "
         "ncclFloat16)";
}

std::optional<DType> dtype_from_nccl(int nccl_datatype) {
  switch (nccl_datatype) {
    case 0:
      return DType::kInt8;
    case 1:
      return DType::kUint8;
    case 2:
      return DType::kInt32;
    case 3:
      return DType::kUint32;
    case 4:
      return DType::kInt64;
    case 5:
      return DType::kUint64;
    case 6:
      return DType::kFloat16;
    case 7:
      return DType::kFloat32;
    case 8:
      return DType::kFloat64;
    case 9:
      return DType::kBfloat16;
    case 10:
      return DType::kFloat8E4M3;
    case 11:
      return DType::kFloat8E5M2;
    default:
      return std::nullopt;
  }
}

void accumulate_stats_host(StatsPartial& partial, const void* data, std::uint64_t count, DType type,
                           std::uint64_t first_index, ChecksumMode checksum) {
  if (count == 0) return;
  const auto* bytes = static_cast<const unsigned char*>(data);
  switch (type) {
    case DType::kFloat64:
      return accumulate_as<DType::kFloat64, std::uint64_t>(partial, bytes, count, first_index, checksum);
    case DType::kFloat32:
      return accumulate_as<DType::kFloat32, std::uint32_t>(partial, bytes, count, first_index, checksum);
    case DType::kFloat16:
      return accumulate_as<DType::kFloat16, std::uint16_t>(partial, bytes, count, first_index, checksum);
    case DType::kBfloat16:
      return accumulate_as<DType::kBfloat16, std::uint16_t>(partial, bytes, count, first_index, checksum);
    case DType::kFloat8E4M3:
      return accumulate_as<DType::kFloat8E4M3, std::uint8_t>(partial, bytes, count, first_index, checksum);
    case DType::kFloat8E5M2:
      return accumulate_as<DType::kFloat8E5M2, std::uint8_t>(partial, bytes, count, first_index, checksum);
    case DType::kInt8:
      return accumulate_as<DType::kInt8, std::uint8_t>(partial, bytes, count, first_index, checksum);
    case DType::kUint8:
      return accumulate_as<DType::kUint8, std::uint8_t>(partial, bytes, count, first_index, checksum);
    case DType::kInt32:
      return accumulate_as<DType::kInt32, std::uint32_t>(partial, bytes, count, first_index, checksum);
    case DType::kUint32:
      return accumulate_as<DType::kUint32, std::uint32_t>(partial, bytes, count, first_index, checksum);
    case DType::kInt64:
      return accumulate_as<DType::kInt64, std::uint64_t>(partial, bytes, count, first_index, checksum);
    case DType::kUint64:
      return accumulate_as<DType::kUint64, std::uint64_t>(partial, bytes, count, first_index, checksum);
  }
}

void allow_host_stats_avx2([[maybe_unused]] bool allowed) {
#if defined(__x86_64__)
  g_avx2_allowed.store(allowed, std::memory_order_relaxed);
#endif
}

TensorStats compute_stats_host(const void* data, std::uint64_t count, DType type, ChecksumMode checksum) {
  StatsPartial partial = empty_partial();
  accumulate_stats_host(partial, data, count, type, 0, checksum);
  TensorStats stats = finalize_stats(type, count, partial);
  if (checksum == ChecksumMode::kSkip) stats.checksum = 0;  // the non-finite elements' share alone means nothing
  return stats;
}

TensorStats finalize_stats(DType type, std::uint64_t count, const StatsPartial& partial) {
  TensorStats stats;
  stats.dtype = type;
  stats.count = count;
  stats.nan_count = partial.nan_count;
  stats.pos_inf_count = partial.pos_inf_count;
  stats.neg_inf_count = partial.neg_inf_count;
  stats.first_nonfinite = partial.first_nonfinite == kNoIndex ? -1 : static_cast<std::int64_t>(partial.first_nonfinite);
  stats.checksum = partial.checksum;

  // Not partial.min_finite_key != kNoKey: that is also the key of the uint64 value 2^64-1.
  const bool has_finite = stats.finite_count() != 0;
  stats.finite_abs_min = has_finite ? key_to_double(type, partial.min_finite_key) : kInf;
  stats.finite_abs_max = has_finite ? key_to_double(type, partial.max_finite_key) : -kInf;

  if (stats.nan_count != 0) {
    stats.abs_min = std::numeric_limits<double>::quiet_NaN();
    stats.abs_max = std::numeric_limits<double>::quiet_NaN();
  } else if (count == 0) {
    stats.abs_min = kInf;
    stats.abs_max = -kInf;
  } else {
    const bool has_inf = stats.pos_inf_count + stats.neg_inf_count != 0;
    stats.abs_min = has_finite ? stats.finite_abs_min : kInf;
    stats.abs_max = has_inf ? kInf : stats.finite_abs_max;
  }
  return stats;
}

std::string format_abs_value(double value) {
  // glibc prints "inf"/"nan" right-aligned in the width for %e, which is exactly the report's "     inf"; spell
  // it out anyway so the format does not depend on the C library.
  char buffer[64];
  if (std::isnan(value)) return std::signbit(value) ? "    -nan" : "     nan";
  if (std::isinf(value)) return value > 0 ? "     inf" : "    -inf";
  std::snprintf(buffer, sizeof buffer, "%8.2e", value);
  return buffer;
}

std::string format_stats_row(const TensorStats& stats, std::string_view label) {
  std::string row = format_abs_value(stats.abs_min);
  row += ' ';
  row += format_abs_value(stats.abs_max);
  row += ' ';
  row += label;
  return row;
}

}  // namespace trainscope::stats
