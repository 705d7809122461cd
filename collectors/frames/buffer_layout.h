// Which buffers an NCCL call reads and writes on this rank, and how many elements each holds.
//
// The frame of a watched call has an `input[0]` row (the send buffer before the call) and an `output` row (the
// receive buffer after it); a buffer the operation does not use on this rank (the receive buffer of a reduce on a
// non-root rank, the send buffer of a broadcast or scatter off the root) is absent. Counts follow NCCL's own
// conventions: all-gather's count is per rank (the receive buffer holds nranks of them), reduce-scatter's is the
// receive count, all-to-all's is what goes to each peer.
//
// Freestanding (constexpr only): the preloaded shim uses it to apply TRAINSCOPE_WATCH_MIN_BYTES.
#pragma once

#include <cstdint>

#include "base/flight_record_format.h"

namespace trainscope::frames {

struct BufferLayout {
  bool has_input = false;
  bool has_output = false;
  uint64_t input_elements = 0;
  uint64_t output_elements = 0;
};

constexpr BufferLayout buffer_layout(recorder::Op op, uint64_t count, int32_t nranks, int32_t rank, int32_t root) {
  using recorder::Op;
  const uint64_t all = count * static_cast<uint64_t>(nranks > 0 ? nranks : 1);
  const bool is_root = rank == root;
  BufferLayout l;
  switch (op) {
    case Op::kAllReduce:
      l = {true, true, count, count};
      break;
    case Op::kReduce:
      l = {true, is_root, count, is_root ? count : 0};
      break;
    case Op::kBroadcast:
    case Op::kBcast:
      l = {is_root, true, is_root ? count : 0, count};
      break;
    case Op::kReduceScatter:
      l = {true, true, all, count};
      break;
    case Op::kAllGather:
      l = {true, true, count, all};
      break;
    case Op::kAlltoAll:
      l = {true, true, all, all};
      break;
    case Op::kGather:
      l = {true, is_root, count, is_root ? all : 0};
      break;
    case Op::kScatter:
      l = {is_root, true, is_root ? all : 0, count};
      break;
    case Op::kSend:
      l = {true, false, count, 0};
      break;
    case Op::kRecv:
      l = {false, true, 0, count};
      break;
    default:
      break;
  }
  return l;
}

// The larger of the two buffers in bytes (what TRAINSCOPE_WATCH_MIN_BYTES compares against).
constexpr uint64_t watched_bytes(const BufferLayout& layout, int nccl_dtype) {
  const uint64_t elements =
      layout.input_elements > layout.output_elements ? layout.input_elements : layout.output_elements;
  return elements * recorder::nccl_dtype_bytes(nccl_dtype);
}

}  // namespace trainscope::frames
