// Element-wise reduction arithmetic for every ncclDataType_t, rounding to the data type after each step.
#pragma once

#include <cstddef>
#include <cstdint>

#include <nccl.h>

namespace tsfake {

// Reduction kinds as they travel between ranks: built-in ops keep their value, every PreMulSum op is one kind.
enum class OpKind : std::uint32_t { kSum = 0, kProd = 1, kMax = 2, kMin = 3, kAvg = 4, kPreMulSum = 5, kNone = 6 };

bool is_valid_datatype(ncclDataType_t datatype);
std::size_t datatype_size(ncclDataType_t datatype);
const char* datatype_name(ncclDataType_t datatype);
const char* op_kind_name(OpKind kind);

// accumulator[i] = round(accumulator[i] op input[i]); avg and premulsum accumulate as sums.
void reduce_into(void* accumulator, const void* input, std::size_t count, ncclDataType_t datatype, OpKind kind);
// output[i] = round(input[i] * scalar), scalar being one element of `datatype`; output may alias input.
void premultiply(void* output, const void* input, std::size_t count, ncclDataType_t datatype, const void* scalar);
// values[i] = round(values[i] / divisor), integer division for integer types.
void divide_by(void* values, std::size_t count, ncclDataType_t datatype, int divisor);

}  // namespace tsfake
