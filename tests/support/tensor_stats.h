// Statistics for the tests: a made-up tensor's for the report tests, and a comparison of two.
//
// tensor_stats: 1024 elements, abs min 1e-3, the given abs max; an infinite
// abs max is one +inf element (the third), the finite ones reaching `finite_max`.
#pragma once

#include <cmath>
#include <string>

#include <gtest/gtest.h>

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

// Every statistic but the checksum is the same (a NaN abs min/max as a NaN): `what` names the case in a failure.
inline void expect_same_statistics(const stats::TensorStats& got, const stats::TensorStats& want,
                                   const std::string& what) {
  EXPECT_EQ(got.count, want.count) << what;
  EXPECT_EQ(std::isnan(got.abs_min), std::isnan(want.abs_min)) << what;
  if (!std::isnan(want.abs_min)) {
    EXPECT_EQ(got.abs_min, want.abs_min) << what;
    EXPECT_EQ(got.abs_max, want.abs_max) << what;
  }
  EXPECT_EQ(got.finite_abs_min, want.finite_abs_min) << what;
  EXPECT_EQ(got.finite_abs_max, want.finite_abs_max) << what;
  EXPECT_EQ(got.nan_count, want.nan_count) << what;
  EXPECT_EQ(got.pos_inf_count, want.pos_inf_count) << what;
  EXPECT_EQ(got.neg_inf_count, want.neg_inf_count) << what;
  EXPECT_EQ(got.first_nonfinite, want.first_nonfinite) << what;
}

}  // namespace trainscope::testing
