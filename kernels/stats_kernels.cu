// The fused statistics kernel: abs-min/max, NaN/inf counts, first non-finite index and checksum of a batch of tensors.
//
// One launch takes any mix of types and sizes. Tensors are cut into chunks (stats_kernel_abi.h); blocks take chunks
// from a shared counter, so big and small tensors balance without a second launch. Inside a chunk each thread issues
// all its 16-byte loads first (streaming, so the job's data in L2 is not evicted), then applies the per-element rules
// of stats_elements.h. Vectors whose largest magnitude key is finite — nearly all of them — take a short path; any
// other vector goes element by element through add_element, the definition. A block reduces its partial and merges
// it into the tensor's scratch entry with atomics; the last block to finish copies every entry to the caller's pinned
// host memory and resets the scratch and counters, so the next launch needs no memset. A strided view is read one
// element per thread in logical order, each at the offset its index gives (the checksum and the first non-finite
// index are then those of the view's elements, as the host computes them on a copy).
#include <cstdint>

#include "kernels/stats_kernel_abi.h"

namespace trainscope::stats {
namespace {

template <std::uint32_t kSize>
struct BitsOf;
template <>
struct BitsOf<1> {
  using type = std::uint8_t;
};
template <>
struct BitsOf<2> {
  using type = std::uint16_t;
};
template <>
struct BitsOf<4> {
  using type = std::uint32_t;
};
template <>
struct BitsOf<8> {
  using type = std::uint64_t;
};

// Element j of a 16-byte vector, zero-extended (little-endian, as the GPU stores it).
template <std::uint32_t kSize>
__device__ __forceinline__ std::uint64_t vector_element(const uint4& v, std::uint32_t j) {
  const std::uint32_t words[4] = {v.x, v.y, v.z, v.w};
  if constexpr (kSize == 8) {
    return static_cast<std::uint64_t>(words[2 * j]) | (static_cast<std::uint64_t>(words[2 * j + 1]) << 32);
  } else if constexpr (kSize == 4) {
    return words[j];
  } else {
    constexpr std::uint32_t kPerWord = 4 / kSize;
    constexpr std::uint32_t kMask = (1u << (8 * kSize)) - 1u;
    return (words[j / kPerWord] >> (8 * kSize * (j % kPerWord))) & kMask;
  }
}

// Narrow per-thread state for the short path; 32-bit keys for types up to 4 bytes keep min/max one instruction.
template <DType kType>
struct FastState {
  static constexpr DTypeRules kRules = dtype_rules(kType);
  using Key = typename BitsOf<(kRules.size == 8 ? 8 : 4)>::type;
  Key min_key = static_cast<Key>(~Key{0});  // the largest key of the type's range: an identity for min
  Key max_key = 0;
  std::uint64_t checksum = 0;
};

template <DType kType>
__device__ __forceinline__ void process_element(FastState<kType>& fast, StatsPartial& rare, std::uint64_t index,
                                                std::uint64_t bits) {
  constexpr DTypeRules kRules = dtype_rules(kType);
  using Key = typename FastState<kType>::Key;
  if (!kRules.is_float || (bits & ~kRules.sign_mask) < kRules.non_finite_key) {
    const Key key = static_cast<Key>(magnitude_key(kRules, bits));
    fast.min_key = key < fast.min_key ? key : fast.min_key;
    fast.max_key = key > fast.max_key ? key : fast.max_key;
    fast.checksum += element_hash(index_salt(index), bits, kRules.size == 8);
  } else {
    add_element(rare, kRules, index, bits);
  }
}

template <DType kType>
__device__ __forceinline__ void process_vector(FastState<kType>& fast, StatsPartial& rare, const uint4& v,
                                               std::uint64_t index0) {
  constexpr DTypeRules kRules = dtype_rules(kType);
  constexpr std::uint32_t kCount = 16 / kRules.size;
  using Key = typename FastState<kType>::Key;
  Key vmin = static_cast<Key>(~Key{0});
  Key vmax = 0;
  std::uint64_t hashes = 0;
  // index_salt(index0 + j) == index_salt(index0) + j * kIndexSalt modulo 2^32.
  const std::uint32_t salt0 = index_salt(index0);
#pragma unroll
  for (std::uint32_t j = 0; j < kCount; ++j) {
    const std::uint64_t bits = vector_element<kRules.size>(v, j);
    const Key key = static_cast<Key>(magnitude_key(kRules, bits));
    vmin = key < vmin ? key : vmin;
    vmax = key > vmax ? key : vmax;
    hashes += element_hash(salt0 + j * kIndexSalt, bits, kRules.size == 8);
  }
  if constexpr (kRules.is_float) {
    if (vmax >= kRules.non_finite_key) {
#pragma unroll 1
      for (std::uint32_t j = 0; j < kCount; ++j) {
        add_element(rare, kRules, index0 + j, vector_element<kRules.size>(v, j));
      }
      return;
    }
  }
  fast.min_key = vmin < fast.min_key ? vmin : fast.min_key;
  fast.max_key = vmax > fast.max_key ? vmax : fast.max_key;
  fast.checksum += hashes;
}

template <DType kType>
__device__ void process_chunk(const StatsDescriptor& tensor, const DescriptorLayout& layout, const StridedShape* shape,
                              std::uint64_t chunk, StatsPartial& partial) {
  constexpr DTypeRules kRules = dtype_rules(kType);
  constexpr std::uint32_t kPerVector = 16 / kRules.size;
  using Bits = typename BitsOf<kRules.size>::type;
  FastState<kType> fast;
  StatsPartial& rare = partial;
  const auto* bytes = reinterpret_cast<const unsigned char*>(tensor.address);

  if (layout.scalar || layout.strided) {
    // Element by element: a start that is not element-aligned (read byte by byte), or a strided view (each element
    // where its index says; every element of a view whose start is aligned is aligned too).
    const bool bytewise = tensor.address % kRules.size != 0;
    const std::uint64_t first = chunk * kStatsScalarChunkElements;
    const std::uint64_t end =
        first + kStatsScalarChunkElements < tensor.count ? first + kStatsScalarChunkElements : tensor.count;
    for (std::uint64_t i = first + threadIdx.x; i < end; i += blockDim.x) {
      const std::int64_t offset = layout.strided ? strided_element_offset(*shape, i) : static_cast<std::int64_t>(i);
      const unsigned char* element = bytes + offset * static_cast<std::int64_t>(kRules.size);
      std::uint64_t bits = 0;
      if (bytewise) {
        for (std::uint32_t b = 0; b < kRules.size; ++b) bits |= static_cast<std::uint64_t>(element[b]) << (8 * b);
      } else {
        bits = *reinterpret_cast<const Bits*>(element);
      }
      process_element(fast, rare, i, bits);
    }
  } else {
    if (chunk == 0) {
      const std::uint64_t scalars = layout.head_elements + layout.tail_elements;
      for (std::uint64_t i = threadIdx.x; i < scalars; i += blockDim.x) {
        const std::uint64_t index =
            i < layout.head_elements ? i : i + layout.body_vectors * kPerVector;  // tail follows the body
        process_element(fast, rare, index, *reinterpret_cast<const Bits*>(bytes + index * kRules.size));
      }
    }
    const auto* body = reinterpret_cast<const uint4*>(bytes + layout.head_elements * kRules.size);
    const std::uint64_t first = chunk * kStatsVectorsPerChunk + threadIdx.x;
    if ((chunk + 1) * kStatsVectorsPerChunk <= layout.body_vectors) {
      uint4 v[kStatsVectorsPerThread];
#pragma unroll
      for (std::uint32_t k = 0; k < kStatsVectorsPerThread; ++k) v[k] = __ldcs(body + first + k * kStatsBlockThreads);
#pragma unroll
      for (std::uint32_t k = 0; k < kStatsVectorsPerThread; ++k) {
        process_vector(fast, rare, v[k], layout.head_elements + (first + k * kStatsBlockThreads) * kPerVector);
      }
    } else {
#pragma unroll 1
      for (std::uint32_t k = 0; k < kStatsVectorsPerThread; ++k) {
        const std::uint64_t vector = first + k * kStatsBlockThreads;
        if (vector < layout.body_vectors) {
          process_vector(fast, rare, __ldcs(body + vector), layout.head_elements + vector * kPerVector);
        }
      }
    }
  }
  // Widening the narrow identity is still an identity within the type's keys, and finalize_stats reads the keys
  // only when some element is finite.
  const std::uint64_t min_key = fast.min_key;
  const std::uint64_t max_key = fast.max_key;
  partial.min_finite_key = min_key < partial.min_finite_key ? min_key : partial.min_finite_key;
  partial.max_finite_key = max_key > partial.max_finite_key ? max_key : partial.max_finite_key;
  partial.checksum += fast.checksum;
}

__device__ __forceinline__ void reduce_with(StatsPartial& p, const StatsPartial& o) { merge_partial(p, o); }

__device__ __forceinline__ StatsPartial shuffle_down(const StatsPartial& p, unsigned offset) {
  StatsPartial o;
  o.min_finite_key = __shfl_down_sync(0xffffffffu, p.min_finite_key, offset);
  o.max_finite_key = __shfl_down_sync(0xffffffffu, p.max_finite_key, offset);
  o.nan_count = __shfl_down_sync(0xffffffffu, p.nan_count, offset);
  o.pos_inf_count = __shfl_down_sync(0xffffffffu, p.pos_inf_count, offset);
  o.neg_inf_count = __shfl_down_sync(0xffffffffu, p.neg_inf_count, offset);
  o.first_nonfinite = __shfl_down_sync(0xffffffffu, p.first_nonfinite, offset);
  o.checksum = __shfl_down_sync(0xffffffffu, p.checksum, offset);
  return o;
}

// Reduces the block's partials and merges them into `target`; every thread of the block must call it.
__device__ void flush(StatsPartial& partial, StatsPartial* target) {
  __shared__ StatsPartial warp_partials[kStatsBlockThreads / 32];
  for (unsigned offset = 16; offset > 0; offset /= 2) reduce_with(partial, shuffle_down(partial, offset));
  const unsigned warp = threadIdx.x / 32;
  const unsigned lane = threadIdx.x % 32;
  if (lane == 0) warp_partials[warp] = partial;
  __syncthreads();
  if (warp == 0) {
    StatsPartial p = lane < blockDim.x / 32 ? warp_partials[lane] : empty_partial();
    for (unsigned offset = 16; offset > 0; offset /= 2) reduce_with(p, shuffle_down(p, offset));
    if (lane == 0) {
      // Fields still at their identity are left alone: for a healthy tensor that is three of seven atomics.
      using ull = unsigned long long;
      if (p.min_finite_key != kNoKey) atomicMin(reinterpret_cast<ull*>(&target->min_finite_key), p.min_finite_key);
      if (p.max_finite_key != 0) atomicMax(reinterpret_cast<ull*>(&target->max_finite_key), p.max_finite_key);
      if (p.nan_count != 0) atomicAdd(reinterpret_cast<ull*>(&target->nan_count), p.nan_count);
      if (p.pos_inf_count != 0) atomicAdd(reinterpret_cast<ull*>(&target->pos_inf_count), p.pos_inf_count);
      if (p.neg_inf_count != 0) atomicAdd(reinterpret_cast<ull*>(&target->neg_inf_count), p.neg_inf_count);
      if (p.first_nonfinite != kNoIndex) {
        atomicMin(reinterpret_cast<ull*>(&target->first_nonfinite), p.first_nonfinite);
      }
      atomicAdd(reinterpret_cast<ull*>(&target->checksum), p.checksum);
    }
  }
  __syncthreads();  // warp_partials is reused by the next flush
  partial = empty_partial();
}

__device__ void process_any(const StatsDescriptor& tensor, const StridedShape* shapes, std::uint64_t chunk,
                            StatsPartial& partial) {
  const auto type = static_cast<DType>(tensor.dtype);
  const DescriptorLayout layout = descriptor_layout(tensor, dtype_rules(type).size);
  const StridedShape* shape = tensor.shape != 0 ? &shapes[tensor.shape - 1] : nullptr;
  switch (type) {
    case DType::kFloat64:
      return process_chunk<DType::kFloat64>(tensor, layout, shape, chunk, partial);
    case DType::kFloat32:
      return process_chunk<DType::kFloat32>(tensor, layout, shape, chunk, partial);
    case DType::kFloat16:
      return process_chunk<DType::kFloat16>(tensor, layout, shape, chunk, partial);
    case DType::kBfloat16:
      return process_chunk<DType::kBfloat16>(tensor, layout, shape, chunk, partial);
    case DType::kFloat8E4M3:
      return process_chunk<DType::kFloat8E4M3>(tensor, layout, shape, chunk, partial);
    case DType::kFloat8E5M2:
      return process_chunk<DType::kFloat8E5M2>(tensor, layout, shape, chunk, partial);
    case DType::kInt8:
      return process_chunk<DType::kInt8>(tensor, layout, shape, chunk, partial);
    case DType::kUint8:
      return process_chunk<DType::kUint8>(tensor, layout, shape, chunk, partial);
    case DType::kInt32:
      return process_chunk<DType::kInt32>(tensor, layout, shape, chunk, partial);
    case DType::kUint32:
      return process_chunk<DType::kUint32>(tensor, layout, shape, chunk, partial);
    case DType::kInt64:
      return process_chunk<DType::kInt64>(tensor, layout, shape, chunk, partial);
    case DType::kUint64:
      return process_chunk<DType::kUint64>(tensor, layout, shape, chunk, partial);
  }
}

}  // namespace
}  // namespace trainscope::stats

using trainscope::stats::StatsKernelParams;
using trainscope::stats::StatsPartial;

extern "C" __global__ void __launch_bounds__(trainscope::stats::kStatsBlockThreads)
    trainscope_stats_kernel(StatsKernelParams params) {
  namespace ts = trainscope::stats;
  __shared__ std::uint64_t shared_chunk;
  __shared__ std::uint64_t shared_descriptor;
  __shared__ bool shared_last;
  constexpr std::uint64_t kNone = ~0ull;

  StatsPartial partial = ts::empty_partial();
  std::uint64_t current = kNone;
  for (;;) {
    if (threadIdx.x == 0) {
      const std::uint64_t chunk = atomicAdd(params.counters, 1ull);
      shared_chunk = chunk;
      shared_descriptor =
          chunk < params.total_chunks ? ts::find_descriptor(params.descriptors, params.descriptor_count, chunk) : kNone;
    }
    __syncthreads();
    const std::uint64_t chunk = shared_chunk;
    const std::uint64_t descriptor = shared_descriptor;
    __syncthreads();  // thread 0 may overwrite the shared values in the next round
    if (chunk >= params.total_chunks) break;
    if (descriptor != current) {
      if (current != kNone) ts::flush(partial, &params.scratch[current]);
      current = descriptor;
    }
    const ts::StatsDescriptor tensor = params.descriptors[descriptor];
    ts::process_any(tensor, params.shapes, chunk - tensor.first_chunk, partial);
  }
  if (current != kNone) ts::flush(partial, &params.scratch[current]);

  // The last block to finish publishes the batch (threadFenceReduction: fence, then count).
  __threadfence();
  if (threadIdx.x == 0) shared_last = atomicAdd(params.counters + 1, 1ull) == gridDim.x - 1;
  __syncthreads();
  if (!shared_last) return;
  __threadfence();
  for (std::uint64_t i = threadIdx.x; i < params.descriptor_count; i += blockDim.x) {
    // volatile: read what the other blocks' atomics left in L2, not a stale L1 line.
    const volatile StatsPartial* source = &params.scratch[i];
    StatsPartial* result = &params.results[i];
    result->min_finite_key = source->min_finite_key;
    result->max_finite_key = source->max_finite_key;
    result->nan_count = source->nan_count;
    result->pos_inf_count = source->pos_inf_count;
    result->neg_inf_count = source->neg_inf_count;
    result->first_nonfinite = source->first_nonfinite;
    result->checksum = source->checksum;
    params.scratch[i] = ts::empty_partial();
  }
  if (threadIdx.x == 0) {
    params.counters[0] = 0;
    params.counters[1] = 0;
  }
  __threadfence_system();  // the results are in host memory: make them visible before the kernel counts as done
}
