// Module frames (TRAINSCOPE_WATCH=modules), the job's side: one torch.nn.Module forward's tensors, as the Python
// hooks packed them (shim/module_frame_abi.h), onto the WatchBoard.
//
// Called on the job's thread by the shim once the frame's record is appended. As for a kernel launch's buffers
// (engine_kernel_frames.h), a host tensor is read at once, by the host statistics over its strided elements (one pass
// per contiguous run, no copy: kernels/tensor_view.h); the device tensors of one stream get one statistics batch
// enqueued on it, so nothing waits for the GPU, a strided view among them read element by element in logical order
// (its merged shape travels with it). A device view whose dimensions do not merge into kMaxStridedDims is not read:
// the frame has no row for it, and the closing log line counts it among the skipped buffers. The frame machinery
// (engine_frame_feed.h) makes the frame: its header the module's qualified name and class.
#pragma once

#include <cstdint>
#include <string>

#include "base/flight_record_format.h"

namespace trainscope::engine {

// One packed frame (module_frame_abi.h). Returns "" when it was put on the board, else why it is malformed (the
// record then gets no frame: the board holds a complete call without rows).
std::string watch_module_frame(const recorder::Record& record, uint64_t index, const char* name, const char* kind,
                               const char* labels, uint64_t labels_len, const int64_t* words, uint64_t word_count);

}  // namespace trainscope::engine
