// Writes flight recorder files holding launch collector records (kKernelLaunch, kStreamSync, kCudaError) with the real
// writer, as the collector would, for the tests of the reports that read them.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "base/flight_recorder_writer.h"
#include "tests/support/rank_recorder.h"

namespace trainscope::testing {

class LaunchRecorder {
 public:
  static constexpr uint64_t kContext = 0xc0ffee;

  // Opens `path` for a process of global rank `rank` (pid 4000 + rank, host "node-1").
  LaunchRecorder(const std::string& path, int32_t rank, uint64_t capacity = 256) {
    opened_ = open_rank_recorder(writer_, path.c_str(),
                                 {.rank = rank,
                                  .world = 4,
                                  .pid = 4000 + rank,
                                  .host = "node-1",
                                  .run_id = "run-launches",
                                  .start_ns = kStart,
                                  .capacity = capacity,
                                  .max_sites = 4,
                                  .max_names = 64,
                                  .max_streams = 8}) == 0;
  }
  ~LaunchRecorder() { writer_.close(kStart + 1000000000ull); }
  LaunchRecorder(const LaunchRecorder&) = delete;
  LaunchRecorder& operator=(const LaunchRecorder&) = delete;

  bool opened() const { return opened_; }
  recorder::Writer& writer() { return writer_; }
  static constexpr uint64_t kStart = 1764590400000000000ull;  // 2025-12-01 12:00:00 UTC
  // kStart + ms milliseconds.
  static uint64_t at(uint64_t ms) { return kStart + ms * 1000000ull; }

  // A name, interned once per text.
  uint32_t name(const std::string& text) {
    auto it = names_.find(text);
    if (it != names_.end()) return it->second;
    const uint32_t id = writer_.add_name(next_key_++, text.c_str());
    names_[text] = id;
    return id;
  }

  // A kernel launch on `stream` at `ms`, returning `result`; its correlation id is returned.
  uint64_t launch(const std::string& kernel, uint64_t stream, uint64_t ms, int32_t result = 0,
                  recorder::Op op = recorder::Op::kKernelLaunch) {
    recorder::Record r = base(op, ms, stream);
    r.count = recorder::pack_grid(1024, 1, 1);
    r.sendbuff = recorder::pack_block(256, 1, 1);
    r.recvbuff = 0;
    r.caller = 0xf000 + names_.size();
    r.peer = static_cast<int32_t>(name(kernel));
    r.redop = recorder::launch_api(recorder::CudaDomain::kRuntime, op == recorder::Op::kGraphLaunch
                                                                       ? recorder::LaunchKind::kGraph
                                                                       : recorder::LaunchKind::kKernel);
    const recorder::Pending pending = writer_.append(r);
    recorder::Writer::complete(pending, result, at(ms) + 5000);
    recorder::Writer::set_stream_launched(stream_entry(stream), r.seq);
    return r.seq;
  }

  // A synchronisation by `api` ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize") at `ms`.
  // A successful one of a stream (or the context) brings that stream's completion up to date.
  void sync(const std::string& api, uint64_t stream, uint64_t ms, int32_t result = 0) {
    recorder::Record r = base(recorder::Op::kStreamSync, ms, stream);
    r.peer = static_cast<int32_t>(name(api));
    r.redop = static_cast<int16_t>(recorder::CudaDomain::kRuntime);
    const recorder::Pending pending = writer_.append(r);
    recorder::Writer::complete(pending, result, at(ms) + 1000);
  }

  // Every launch up to correlation id `seq` on `stream` finished at `done_ms`; the engine checked at `checked_ms`.
  void completed(uint64_t stream, uint64_t seq, uint64_t done_ms, uint64_t checked_ms) {
    recorder::Writer::set_stream_completed(stream_entry(stream), seq, at(done_ms), at(checked_ms));
    writer_.set_completions_checked(at(checked_ms));
  }

  // A CUDA API call `api` on `stream` returned `result` at `ms`: counted, and the first one recorded.
  void error(const std::string& api, uint64_t stream, uint64_t ms, int32_t result,
             recorder::CudaDomain domain = recorder::CudaDomain::kRuntime) {
    if (!writer_.count_cuda_error()) return;
    recorder::Record r = base(recorder::Op::kCudaError, ms, stream);
    r.count = 131;  // a CUPTI callback id
    r.peer = static_cast<int32_t>(name(api));
    r.redop = static_cast<int16_t>(domain);
    const recorder::Pending pending = writer_.append(r);
    recorder::Writer::complete(pending, result, at(ms) + 2000);
    writer_.set_first_error(pending.commit);
  }

  // An NCCL collective on communicator `comm` (call number `seq`) at `ms`; `returned` false leaves it pending.
  void collective(uint64_t comm, uint64_t seq, uint64_t ms, bool returned = true) {
    recorder::Record r{};
    r.op = static_cast<uint16_t>(recorder::Op::kAllReduce);
    r.start_ns = at(ms);
    r.comm_id = comm;
    r.seq = seq;
    r.count = 1024;
    r.rank = 0;
    r.nranks = 2;
    r.dtype = 7;
    r.redop = 0;
    r.peer = recorder::kUnknown;
    const recorder::Pending pending = writer_.append(r);
    if (returned) recorder::Writer::complete(pending, 0, at(ms) + 3000);
  }

 private:
  recorder::Record base(recorder::Op op, uint64_t ms, uint64_t stream) {
    recorder::Record r{};
    r.op = static_cast<uint16_t>(op);
    r.start_ns = at(ms);
    r.seq = ++correlation_;
    r.stream = stream;
    r.aux = kContext;
    r.rank = recorder::kUnknown;
    r.nranks = recorder::kUnknown;
    r.dtype = recorder::kUnknown;
    r.tid = 77;
    return r;
  }

  recorder::StreamEntry* stream_entry(uint64_t stream) {
    auto it = streams_.find(stream);
    if (it != streams_.end()) return it->second;
    recorder::StreamEntry* entry = writer_.add_stream(stream, kContext);
    streams_[stream] = entry;
    return entry;
  }

  recorder::Writer writer_;
  bool opened_ = false;
  uint64_t correlation_ = 0;
  uint64_t next_key_ = 1;
  std::map<std::string, uint32_t> names_;
  std::map<uint64_t, recorder::StreamEntry*> streams_;
};

}  // namespace trainscope::testing
