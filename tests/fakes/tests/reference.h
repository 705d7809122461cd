// Test-side reference arithmetic: deterministic inputs and the results NCCL semantics say collectives must produce.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nccl.h>

namespace tsfake_test {

using Bytes = std::vector<unsigned char>;

enum class TestOp { kSum, kProd, kMax, kMin, kAvg, kPreMulSum };
inline constexpr TestOp kAllTestOps[] = {TestOp::kSum, TestOp::kProd, TestOp::kMax,
                                         TestOp::kMin, TestOp::kAvg,  TestOp::kPreMulSum};
inline constexpr ncclDataType_t kAllDatatypes[] = {ncclInt8,    ncclUint8,    ncclInt32,      ncclUint32,
                                                   ncclInt64,   ncclUint64,   ncclFloat16,    ncclFloat32,
                                                   ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};

std::size_t element_size(ncclDataType_t datatype);
const char* type_name(ncclDataType_t datatype);
const char* op_name(TestOp op);

// `count` elements of `datatype` that differ per rank and per `salt`, small enough that products of four stay finite.
Bytes make_input(ncclDataType_t datatype, std::size_t count, int rank, int salt);
// The PreMulSum scalar rank `rank` uses, encoded as one element of `datatype`.
Bytes premul_scalar(ncclDataType_t datatype, int rank);

// Folds the ranks' inputs in rank order with rounding after every step, as the stand-in promises.
Bytes reference_reduce(ncclDataType_t datatype, TestOp op, const std::vector<Bytes>& inputs, std::size_t count);

// Element-wise equality where any two NaNs count as equal; returns "" or a description of the first difference.
std::string compare(ncclDataType_t datatype, const unsigned char* actual, const unsigned char* expected,
                    std::size_t count);

}  // namespace tsfake_test
