// The multi-pass baseline for the GPU benchmark: separate NaN, inf, abs-min and abs-max passes over fp32, as a
// framework would launch them one check at a time (vectorised, grid-stride, one atomic per block).
#include <cstdint>

namespace {

template <typename Op>
__device__ void reduce_pass(const float4* data, std::uint64_t vectors, unsigned long long* out, Op op,
                            unsigned long long identity, bool is_min) {
  unsigned long long local = identity;
  for (std::uint64_t i = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x; i < vectors;
       i += static_cast<std::uint64_t>(gridDim.x) * blockDim.x) {
    const float4 v = __ldcs(data + i);
    local = op(local, v.x);
    local = op(local, v.y);
    local = op(local, v.z);
    local = op(local, v.w);
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    const unsigned long long other = __shfl_down_sync(0xffffffffu, local, offset);
    local = op.combine(local, other);
  }
  if (threadIdx.x % 32 == 0) {
    if (is_min) {
      atomicMin(out, local);
    } else if (local != identity) {
      atomicAdd(out, local);  // counts; max uses atomicMax below through combine semantics
    }
  }
}

struct CountNan {
  __device__ unsigned long long operator()(unsigned long long acc, float x) const { return acc + (x != x ? 1 : 0); }
  __device__ unsigned long long combine(unsigned long long a, unsigned long long b) const { return a + b; }
};
struct CountInf {
  __device__ unsigned long long operator()(unsigned long long acc, float x) const {
    return acc + (fabsf(x) == __int_as_float(0x7f800000) ? 1 : 0);
  }
  __device__ unsigned long long combine(unsigned long long a, unsigned long long b) const { return a + b; }
};
struct AbsMin {
  __device__ unsigned long long operator()(unsigned long long acc, float x) const {
    const unsigned long long key = __float_as_uint(x) & 0x7fffffffu;
    return key < acc ? key : acc;
  }
  __device__ unsigned long long combine(unsigned long long a, unsigned long long b) const { return a < b ? a : b; }
};

}  // namespace

extern "C" __global__ void baseline_count_nan(const float4* data, std::uint64_t vectors, unsigned long long* out) {
  reduce_pass(data, vectors, out, CountNan{}, 0, false);
}
extern "C" __global__ void baseline_count_inf(const float4* data, std::uint64_t vectors, unsigned long long* out) {
  reduce_pass(data, vectors, out, CountInf{}, 0, false);
}
extern "C" __global__ void baseline_abs_min(const float4* data, std::uint64_t vectors, unsigned long long* out) {
  reduce_pass(data, vectors, out, AbsMin{}, ~0ull, true);
}
extern "C" __global__ void baseline_abs_max(const float4* data, std::uint64_t vectors, unsigned long long* out) {
  unsigned long long local = 0;
  for (std::uint64_t i = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x; i < vectors;
       i += static_cast<std::uint64_t>(gridDim.x) * blockDim.x) {
    const float4 v = __ldcs(data + i);
    const unsigned int m0 = max(__float_as_uint(v.x) & 0x7fffffffu, __float_as_uint(v.y) & 0x7fffffffu);
    const unsigned int m1 = max(__float_as_uint(v.z) & 0x7fffffffu, __float_as_uint(v.w) & 0x7fffffffu);
    local = max(local, static_cast<unsigned long long>(max(m0, m1)));
  }
  for (int offset = 16; offset > 0; offset /= 2) local = max(local, __shfl_down_sync(0xffffffffu, local, offset));
  if (threadIdx.x % 32 == 0) atomicMax(out, local);
}
