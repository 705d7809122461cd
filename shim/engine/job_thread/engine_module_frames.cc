// Module frames, the job's side (see engine_module_frames.h).
#include "shim/engine/job_thread/engine_module_frames.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "kernels/gpu_stats.h"
#include "kernels/tensor_view.h"
#include "shim/engine/job_thread/engine_watch.h"
#include "shim/module_frame_abi.h"

namespace trainscope::engine {

using State = WatchedBuffer::State;

std::string watch_module_frame(const recorder::Record& record, uint64_t index, const char* name, const char* kind,
                               const char* labels, uint64_t labels_len, const int64_t* words, uint64_t word_count) {
  WatchedCall* call = watch_board().add(record, index);
  if (call->complete.load(std::memory_order_relaxed)) return "";  // refused: the frame thread is too far behind
  watch_board().counters().watched.fetch_add(1, std::memory_order_relaxed);
  std::string why;
  try {
    auto taken = std::make_unique<WatchedLaunchBuffers>();
    taken->short_name = name;
    taken->name = kind;
    const int64_t rows = word_count >= 3 && words[0] == kModuleFrameVersion ? words[2] : -1;
    if (rows < 0) why = "the frame's version or row count is not the library's";
    taken->labels.reserve(rows > 0 ? static_cast<size_t>(rows) : 0);
    taken->buffers.resize(rows > 0 ? static_cast<size_t>(rows) : 0);
    uint64_t w = 3;
    uint64_t label_at = 0;
    // The device tensors by stream: one statistics batch each.
    std::map<uint64_t, std::pair<std::vector<stats::TensorRef>, std::vector<uint32_t>>> device;
    for (int64_t row = 0; row < rows && why.empty(); ++row) {
      if (w + kModuleRowHead > word_count) {
        why = "the frame's words end inside row " + std::to_string(row);
        break;
      }
      const void* end = label_at < labels_len ? std::memchr(labels + label_at, '\0', labels_len - label_at) : nullptr;
      if (end == nullptr) {
        why = "the frame's labels end before row " + std::to_string(row);
        break;
      }
      taken->labels.emplace_back(labels + label_at);
      label_at = static_cast<uint64_t>(static_cast<const char*>(end) - labels) + 1;
      const int64_t* head = words + w;
      const int64_t ndim = head[4];
      if (ndim < 0 || ndim > kModuleMaxDims || w + kModuleRowHead + 2 * static_cast<uint64_t>(ndim) > word_count) {
        why = "row " + std::to_string(row) + " has a wrong number of dimensions";
        break;
      }
      const int64_t* sizes = head + kModuleRowHead;
      const int64_t* strides = sizes + ndim;
      w += kModuleRowHead + 2 * static_cast<uint64_t>(ndim);
      WatchedBuffer& buffer = taken->buffers[static_cast<size_t>(row)];
      const auto row_kind = static_cast<ModuleRowKind>(head[0]);
      if (row_kind == ModuleRowKind::kNone) {
        buffer.state = State::kAbsent;
        continue;
      }
      if (row_kind == ModuleRowKind::kNotATensor) {
        buffer.state = State::kNotATensor;
        continue;
      }
      if (row_kind != ModuleRowKind::kTensor || head[1] < 0 || head[1] >= stats::kDTypeCount) {
        buffer.state = State::kUnreadable;
        continue;
      }
      const auto dtype = static_cast<stats::DType>(head[1]);
      const auto* data = reinterpret_cast<const void*>(static_cast<uintptr_t>(head[2]));
      const auto numel = static_cast<uint64_t>(head[3] > 0 ? head[3] : 0);
      if (head[5] < 0 || numel == 0) {
        buffer.stats = stats::strided_host_stats(data, dtype, ndim, sizes, strides);
        buffer.state = State::kReady;
        watch_board().counters().host_buffers.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      stats::TensorRef tensor{data, numel, dtype};
      const std::vector<stats::ViewDim> dims = stats::merge_view_dims(ndim, sizes, strides);
      if (!stats::is_dense(dims)) {
        const std::optional<stats::StridedShape> shape = stats::strided_shape(dims);
        if (!shape) {
          watch_board().counters().skipped_other.fetch_add(1, std::memory_order_relaxed);
          buffer.state = State::kSkipped;
          buffer.skipped_why = "a device view of " + std::to_string(dims.size()) +
                               " dimensions that do not merge into " + std::to_string(stats::kMaxStridedDims) +
                               " or fewer";
          continue;
        }
        tensor.shape = *shape;
      }
      const uint64_t stream = static_cast<uint64_t>(head[6]);
      take_statistics(&buffer, tensor, stream, &device[stream].first);
      if (buffer.state == State::kGpuPending) device[stream].second.push_back(static_cast<uint32_t>(row));
    }
    // Several streams in one frame are rare (a module's tensors live on its device's current stream): the first
    // stream's batch is the launch's; the others' rows say why they have no statistics.
    bool first = true;
    for (auto& [stream, batch] : device) {
      std::string failed = first ? enqueue_device_batch(stream, batch.first, &taken->device)
                                 : std::string("a second CUDA stream in one frame");
      if (failed.empty()) taken->device_rows = batch.second;
      for (const uint32_t row : batch.second) {
        if (failed.empty()) continue;
        taken->buffers[row].state = State::kSkipped;
        taken->buffers[row].skipped_why = failed;
      }
      first = false;
    }
    if (!why.empty()) {
      taken->labels.clear();
      taken->buffers.clear();
      taken->device.reset();
      taken->device_rows.clear();
    }
    call->launch = std::move(taken);
  } catch (...) {
    call->launch.reset();
    call->input.state = call->output.state = State::kSkipped;
    why = "out of memory";
  }
  call->complete.store(true, std::memory_order_release);
  return why;
}

}  // namespace trainscope::engine
