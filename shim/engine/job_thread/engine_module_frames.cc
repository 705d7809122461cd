// Module frames, the job's side (see engine_module_frames.h).
#include "shim/engine/job_thread/engine_module_frames.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "kernels/gpu_stats.h"
#include "shim/engine/job_thread/engine_watch.h"
#include "shim/module_frame_abi.h"

namespace trainscope::engine {
namespace {

using State = WatchedBuffer::State;

struct Dim {
  int64_t size;
  int64_t stride;
};

// Sizes and strides with the dimensions of size 1 dropped and the ones that are contiguous with the next merged:
// the fewest runs to walk. A tensor of no element gives no dimension and count 0 (the caller's case).
std::vector<Dim> collapse(int64_t ndim, const int64_t* sizes, const int64_t* strides) {
  std::vector<Dim> dims;
  for (int64_t i = 0; i < ndim; ++i) {
    if (sizes[i] == 1) continue;
    if (!dims.empty() && dims.back().stride == strides[i] * sizes[i]) {
      dims.back() = {dims.back().size * sizes[i], strides[i]};
    } else {
      dims.push_back({sizes[i], strides[i]});
    }
  }
  return dims;
}

bool contiguous(int64_t ndim, const int64_t* sizes, const int64_t* strides) {
  const std::vector<Dim> dims = collapse(ndim, sizes, strides);
  return dims.empty() || (dims.size() == 1 && dims[0].stride == 1);
}

}  // namespace

stats::TensorStats strided_host_stats(const void* data, stats::DType dtype, int64_t ndim, const int64_t* sizes,
                                      const int64_t* strides) {
  uint64_t count = 1;
  for (int64_t i = 0; i < ndim; ++i) count *= static_cast<uint64_t>(sizes[i] > 0 ? sizes[i] : 0);
  const std::vector<Dim> dims = collapse(ndim, sizes, strides);
  if (count == 0) return stats::compute_stats_host(nullptr, 0, dtype, stats::ChecksumMode::kSkip);
  if (dims.empty() || (dims.size() == 1 && dims[0].stride == 1))
    return stats::compute_stats_host(data, count, dtype, stats::ChecksumMode::kSkip);
  const size_t element = stats::dtype_size(dtype);
  const auto* base = static_cast<const unsigned char*>(data);
  stats::StatsPartial partial = stats::empty_partial();
  // The innermost dimension is a run: read in place when its elements are adjacent, else gathered into a small
  // buffer (a transposed or expanded view) so that the pass still sees blocks.
  const Dim inner = dims.back();
  const size_t outer_dims = dims.size() - 1;
  std::vector<int64_t> at(outer_dims, 0);
  alignas(64) unsigned char gathered[16384];
  const uint64_t per_gather = sizeof(gathered) / element;
  uint64_t index = 0;
  while (true) {
    int64_t offset = 0;
    for (size_t d = 0; d < outer_dims; ++d) offset += at[d] * dims[d].stride;
    const unsigned char* run = base + offset * static_cast<int64_t>(element);
    if (inner.stride == 1) {
      stats::accumulate_stats_host(partial, run, static_cast<uint64_t>(inner.size), dtype, index,
                                   stats::ChecksumMode::kSkip);
    } else {
      for (uint64_t done = 0; done < static_cast<uint64_t>(inner.size);) {
        const uint64_t n = std::min<uint64_t>(per_gather, static_cast<uint64_t>(inner.size) - done);
        for (uint64_t k = 0; k < n; ++k)
          std::memcpy(gathered + k * element,
                      run + static_cast<int64_t>(done + k) * inner.stride * static_cast<int64_t>(element), element);
        stats::accumulate_stats_host(partial, gathered, n, dtype, index + done, stats::ChecksumMode::kSkip);
        done += n;
      }
    }
    index += static_cast<uint64_t>(inner.size);
    bool done = true;  // the outer indices, as an odometer: done once every one wrapped
    for (size_t d = outer_dims; d > 0; --d) {
      if (++at[d - 1] < dims[d - 1].size) {
        done = false;
        break;
      }
      at[d - 1] = 0;
    }
    if (done) break;
  }
  stats::TensorStats result = stats::finalize_stats(dtype, count, partial);
  result.checksum = 0;
  return result;
}

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
        buffer.stats = strided_host_stats(data, dtype, ndim, sizes, strides);
        buffer.state = State::kReady;
        watch_board().counters().host_buffers.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      if (!contiguous(ndim, sizes, strides)) {
        watch_board().counters().skipped_other.fetch_add(1, std::memory_order_relaxed);
        buffer.state = State::kSkipped;
        buffer.skipped_why = "a device tensor that is not contiguous";
        continue;
      }
      const uint64_t stream = static_cast<uint64_t>(head[6]);
      take_statistics(&buffer, {data, numel, dtype}, stream, &device[stream].first);
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
