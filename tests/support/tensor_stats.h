// Statistics of a made-up tensor for the report tests: 1024 elements, abs min 1e-3, the given abs max; an infinite
// abs max is one +inf element (the third), the finite ones reaching `finite_max`.
#pragma once

#include <cmath>

#include "kernels/stats.h"

namespace trainscope::testing {

inline stats::TensorStats tensor_stats(double abs_max, stats::DType dtype = stats::DType::kFloat16,
                                       double finite_max = 6.0e4) {
  stats::TensorStats s;
  s.dtype = dtype;
  s.count = 1024;
  s.abs_min = 1e-3;
  s.abs_max = abs_max;
  s.finite_abs_min = 1e-3;
  s.finite_abs_max = std::isinf(abs_max) ? finite_max : abs_max;
  if (std::isinf(abs_max)) {
    s.pos_inf_count = 1;
    s.first_nonfinite = 3;
  }
  return s;
}

}  // namespace trainscope::testing
