// Strided views of tensors (a transposed weight, a slice of an activation, an expanded bias): their dimensions merged
// into the fewest runs, the shape the statistics kernel reads them by, and their statistics on the host.
//
// Sizes and strides are in elements, outermost first, as PyTorch gives them (`tensor.size()`, `tensor.stride()`), and
// `data` is the view's first element (`data_ptr()`, its storage offset included).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "kernels/stats.h"
#include "kernels/stats_kernel_abi.h"

namespace trainscope::stats {

struct ViewDim {
  std::int64_t size;
  std::int64_t stride;
};

// The view's dimensions with those of size 1 dropped and each one contiguous with the next merged into it: the fewest
// runs to walk, in the same logical order. A view of no element gives no dimension (test its count, not this).
std::vector<ViewDim> merge_view_dims(std::int64_t ndim, const std::int64_t* sizes, const std::int64_t* strides);

// Whether merged dimensions are one dense run (or a single element): the view is its elements' contiguous range.
bool is_dense(const std::vector<ViewDim>& dims);

// The shape the statistics kernel reads a non-dense view by (stats_kernel_abi.h); nullopt when more than
// kMaxStridedDims dimensions remain after merging.
std::optional<StridedShape> strided_shape(const std::vector<ViewDim>& dims);

// The statistics of a strided host view, its elements in logical order (the first non-finite index is the view's).
// Each contiguous run is read in one pass, others gathered 16 KiB at a time; nothing the size of the view is copied.
// No checksum (the frames never print it).
TensorStats strided_host_stats(const void* data, DType dtype, std::int64_t ndim, const std::int64_t* sizes,
                               const std::int64_t* strides);

}  // namespace trainscope::stats
