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

// Strided views (a transposed weight's gradient, a slice of an activation) are read element by element in logical
// order, each element's address computed from its index: after merging dimensions (kernels/tensor_view.h) nearly every
// view has two or three, and views that keep more than this many are not read on the GPU.
inline constexpr std::uint32_t kMaxStridedDims = 8;

// A strided view's dimensions, outermost first, in elements (136 bytes, in device memory). Sizes are at least 2 once
// merged; a stride may be 0 (an expanded view).
struct StridedShape {
  std::uint64_t ndim;
  std::int64_t sizes[kMaxStridedDims];
  std::int64_t strides[kMaxStridedDims];
};

// One tensor of a batch, as the kernel reads it (32 bytes, in device memory).
struct StatsDescriptor {
  std::uint64_t address;      // device address of element 0
  std::uint64_t count;        // elements
  std::uint64_t first_chunk;  // index of this tensor's first chunk in the batch (a prefix sum of chunk counts)
  std::uint32_t dtype;        // DType
  std::uint32_t shape;  // 0: the elements are contiguous; k: a strided view, its shape is the batch's shapes[k - 1]
};

static_assert(sizeof(StridedShape) == 8 + 16 * kMaxStridedDims, "StridedShape is copied to the device as is");
static_assert(sizeof(StatsDescriptor) == 32, "StatsDescriptor is copied to the device as is");

// The kernel's single parameter.
struct StatsKernelParams {
  const StatsDescriptor* descriptors;  // device memory
  const StridedShape* shapes;          // device memory: the strided views' shapes (descriptor.shape - 1 indexes it)
  StatsPartial* scratch;               // device memory, one per tensor; empty_partial() on entry and on exit
  unsigned long long* counters;  // device memory: [0] next chunk to hand out, [1] blocks finished; 0 on entry/exit
  StatsPartial* results;         // host-mapped pinned memory: written by the last block to finish
  std::uint64_t descriptor_count;
  std::uint64_t total_chunks;
};

// How a tensor is cut: a scalar head up to the first 16-byte boundary, a body of aligned 16-byte vectors split into
// chunks of kStatsVectorsPerChunk, and a scalar tail. Chunk 0 also does head and tail. A tensor whose address is not a
// multiple of its element size cannot use vector loads at all: it is read byte by byte (`scalar`), in element chunks.
// A strided view (`strided`) is read one element at a time too, in the same element chunks, each element at the
// offset strided_element_offset gives.
struct DescriptorLayout {
  std::uint64_t head_elements = 0;
  std::uint64_t body_vectors = 0;
  std::uint64_t tail_elements = 0;
  std::uint64_t chunk_count = 0;  // 0 only for an empty tensor
  bool scalar = false;
  bool strided = false;
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

TRAINSCOPE_ABI_FN DescriptorLayout strided_layout(std::uint64_t count) {
  DescriptorLayout layout;
  layout.strided = true;
  layout.chunk_count = (count + kStatsScalarChunkElements - 1) / kStatsScalarChunkElements;
  return layout;
}

// The layout of a descriptor, as the launcher counts its chunks and the kernel walks them.
TRAINSCOPE_ABI_FN DescriptorLayout descriptor_layout(const StatsDescriptor& tensor, std::uint32_t size) {
  return tensor.shape != 0 ? strided_layout(tensor.count) : descriptor_layout(tensor.address, tensor.count, size);
}

// Where element `index` (in logical, row-major order) of a strided view lies, in elements from its first element.
TRAINSCOPE_ABI_FN std::int64_t strided_element_offset(const StridedShape& shape, std::uint64_t index) {
  std::int64_t offset = 0;
  for (std::uint64_t d = shape.ndim; d > 0; --d) {
    const auto size = static_cast<std::uint64_t>(shape.sizes[d - 1]);
    const std::uint64_t outer = index / size;
    offset += static_cast<std::int64_t>(index - outer * size) * shape.strides[d - 1];
    index = outer;
  }
  return offset;
}

// The tensor that owns `chunk`: the last descriptor whose first_chunk is <= chunk (empty tensors own no chunk and
// share their first_chunk with the next tensor, so the last match is never an empty one).
TRAINSCOPE_ABI_FN std::uint64_t find_descriptor(const StatsDescriptor* descriptors, std::uint64_t count,
                                                std::uint64_t chunk) {
  std::uint64_t low = 0;
  std::uint64_t high = count;  // invariant: descriptors[low].first_chunk <= chunk < descriptors[high].first_chunk
  while (high - low > 1) {
    const std::uint64_t middle = low + (high - low) / 2;
    if (descriptors[middle].first_chunk <= chunk) {
      low = middle;
    } else {
      high = middle;
    }
  }
  return low;
}

}  // namespace trainscope::stats

#undef TRAINSCOPE_ABI_FN
