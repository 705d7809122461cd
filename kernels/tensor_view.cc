// Strided views (see tensor_view.h).
#include "kernels/tensor_view.h"

#include <algorithm>
#include <cstring>

namespace trainscope::stats {

std::vector<ViewDim> merge_view_dims(std::int64_t ndim, const std::int64_t* sizes, const std::int64_t* strides) {
  std::vector<ViewDim> dims;
  for (std::int64_t i = 0; i < ndim; ++i) {
    if (sizes[i] == 1) continue;
    if (!dims.empty() && dims.back().stride == strides[i] * sizes[i]) {
      dims.back() = {dims.back().size * sizes[i], strides[i]};
    } else {
      dims.push_back({sizes[i], strides[i]});
    }
  }
  return dims;
}

bool is_dense(const std::vector<ViewDim>& dims) { return dims.empty() || (dims.size() == 1 && dims[0].stride == 1); }

std::optional<StridedShape> strided_shape(const std::vector<ViewDim>& dims) {
  if (dims.size() > kMaxStridedDims) return std::nullopt;
  StridedShape shape{};
  shape.ndim = dims.size();
  for (std::size_t d = 0; d < dims.size(); ++d) {
    shape.sizes[d] = dims[d].size;
    shape.strides[d] = dims[d].stride;
  }
  return shape;
}

TensorStats strided_host_stats(const void* data, DType dtype, std::int64_t ndim, const std::int64_t* sizes,
                               const std::int64_t* strides) {
  std::uint64_t count = 1;
  for (std::int64_t i = 0; i < ndim; ++i) count *= static_cast<std::uint64_t>(sizes[i] > 0 ? sizes[i] : 0);
  if (count == 0) return compute_stats_host(nullptr, 0, dtype, ChecksumMode::kSkip);
  const std::vector<ViewDim> dims = merge_view_dims(ndim, sizes, strides);
  if (is_dense(dims)) return compute_stats_host(data, count, dtype, ChecksumMode::kSkip);
  const std::size_t element = dtype_size(dtype);
  const auto* base = static_cast<const unsigned char*>(data);
  StatsPartial partial = empty_partial();
  // The innermost dimension is a run: read in place when its elements are adjacent, else gathered into a small
  // buffer (a transposed or expanded view) so that the pass still sees blocks.
  const ViewDim inner = dims.back();
  const std::size_t outer_dims = dims.size() - 1;
  std::vector<std::int64_t> at(outer_dims, 0);
  alignas(64) unsigned char gathered[16384];
  const std::uint64_t per_gather = sizeof(gathered) / element;
  std::uint64_t index = 0;
  while (true) {
    std::int64_t offset = 0;
    for (std::size_t d = 0; d < outer_dims; ++d) offset += at[d] * dims[d].stride;
    const unsigned char* run = base + offset * static_cast<std::int64_t>(element);
    if (inner.stride == 1) {
      accumulate_stats_host(partial, run, static_cast<std::uint64_t>(inner.size), dtype, index, ChecksumMode::kSkip);
    } else {
      for (std::uint64_t done = 0; done < static_cast<std::uint64_t>(inner.size);) {
        const std::uint64_t n = std::min<std::uint64_t>(per_gather, static_cast<std::uint64_t>(inner.size) - done);
        for (std::uint64_t k = 0; k < n; ++k)
          std::memcpy(gathered + k * element,
                      run + static_cast<std::int64_t>(done + k) * inner.stride * static_cast<std::int64_t>(element),
                      element);
        accumulate_stats_host(partial, gathered, n, dtype, index + done, ChecksumMode::kSkip);
        done += n;
      }
    }
    index += static_cast<std::uint64_t>(inner.size);
    bool done = true;  // the outer indices, as an odometer: done once every one wrapped
    for (std::size_t d = outer_dims; d > 0; --d) {
      if (++at[d - 1] < dims[d - 1].size) {
        done = false;
        break;
      }
      at[d - 1] = 0;
    }
    if (done) break;
  }
  TensorStats result = finalize_stats(dtype, count, partial);
  result.checksum = 0;
  return result;
}

}  // namespace trainscope::stats
