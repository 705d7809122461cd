// The contract between the statistics kernel and its launcher: descriptors, parameters and how tensors are cut up.
#pragma once

#include <cstdint>

#include "kernels/stats_elements.h"

#ifdef __CUDACC__
#define TRAINSCOPE_ABI_FN __host__ __device__ constexpr inline
#else
#define TRAINSCOPE_ABI_FN constexpr inline
#endif

namespace trainscope::stats {

// The kernel's name in the fatbin (extern "C", so no mangling to keep in sync).
inline constexpr const char* kStatsKernelName = "trainscope_stats_kernel";

inline constexpr std::uint32_t kStatsBlockThreads = 256;
// Each thread keeps this many 16-byte loads in flight per chunk: enough bytes in flight to reach memory speed.
inline constexpr std::uint32_t kStatsVectorsPerThread = 8;
inline constexpr std::uint64_t kStatsVectorsPerChunk = kStatsBlockThreads * kStatsVectorsPerThread;  // 32 KiB
// Tensors whose start is not even element-aligned are read one byte at a time, in chunks of this many elements.
inline constexpr std::uint64_t kStatsScalarChunkElements = kStatsBlockThreads * 8;

// One tensor of a batch, as the kernel reads it (32 bytes, in device memory).
struct StatsDescriptor {
  std::uint64_t address;      // device address of element 0
  std::uint64_t count;        // elements
  std::uint64_t first_chunk;  // index of this tensor's first chunk in the batch (a prefix sum of chunk counts)
  std::uint32_t dtype;        // DType
  std::uint32_t reserved;
};

// The kernel's single parameter.
struct StatsKernelParams {
  const StatsDescriptor* descriptors;  // device memory
  StatsPartial* scratch;               // device memory, one per tensor; empty_partial() on entry and on exit
  unsigned long long* counters;  // device memory: [0] next chunk to hand out, [1] blocks finished; 0 on entry/exit
  StatsPartial* results;         // host-mapped pinned memory: written by the last block to finish
  std::uint64_t descriptor_count;
  std::uint64_t total_chunks;
};

// How a tensor is cut: a scalar head up to the first 16-byte boundary, a body of aligned 16-byte vectors split into
// chunks of kStatsVectorsPerChunk, and a scalar tail. Chunk 0 also does head and tail. A tensor whose address is not a
// multiple of its element size cannot use vector loads at all: it is read byte by byte (`scalar`), in element chunks.
struct DescriptorLayout {
  std::uint64_t head_elements = 0;
  std::uint64_t body_vectors = 0;
  std::uint64_t tail_elements = 0;
  std::uint64_t chunk_count = 0;  // 0 only for an empty tensor
  bool scalar = false;
};

TRAINSCOPE_ABI_FN DescriptorLayout descriptor_layout(std::uint64_t address, std::uint64_t count, std::uint32_t size) {
  DescriptorLayout layout;
  if (count == 0 || size == 0) return layout;
  if (address % size != 0) {
    layout.scalar = true;
    layout.chunk_count = (count + kStatsScalarChunkElements - 1) / kStatsScalarChunkElements;
    return layout;
  }
  const std::uint64_t bytes = count * size;
  const std::uint64_t to_boundary = (16 - address % 16) % 16;
  const std::uint64_t head_bytes = to_boundary < bytes ? to_boundary : bytes;
  const std::uint64_t rest = bytes - head_bytes;
  layout.head_elements = head_bytes / size;
  layout.body_vectors = rest / 16;
  layout.tail_elements = (rest % 16) / size;
  const std::uint64_t body_chunks = (layout.body_vectors + kStatsVectorsPerChunk - 1) / kStatsVectorsPerChunk;
  layout.chunk_count = body_chunks > 0 ? body_chunks : 1;
  return layout;
}

}  // namespace trainscope::stats

#undef TRAINSCOPE_ABI_FN
