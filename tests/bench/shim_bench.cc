// Micro benchmarks of the shim's cost on the calling thread: an intercepted call with recording on, against the
// same no-op NCCL function called directly, and the flight recorder's append on its own.
//
// The binary links libtrainscope.so before the no-op libnccl.so.2, so `ncclAllReduce` here is the shim's hook
// and REAL(ncclAllReduce) is the no-op. Run it with TRAINSCOPE_DIR pointing at a scratch folder. A copy of the no-op
// library under another name, opened RTLD_LOCAL and looked up on its handle, gives the hook of a ctypes or JAX job.
#include <benchmark/benchmark.h>
#include <dlfcn.h>
#include <nccl.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "base/flight_recorder_writer.h"

namespace {

using AllReduceFn = decltype(&ncclAllReduce);

// The no-op function itself. Looked up by NCCL's profiling alias: a handle look-up of "ncclAllReduce" in the linked
// library answers with the shim's hook (it is the process-wide NCCL's function), as it must for a job.
AllReduceFn direct_allreduce() {
  void* nccl = dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD);
  return nccl != nullptr ? reinterpret_cast<AllReduceFn>(dlsym(nccl, "pncclAllReduce")) : nullptr;
}

// The no-op library copied under another name and opened RTLD_LOCAL, as vLLM's VLLM_NCCL_SO_PATH or JAX's stub
// would: its functions, looked up on the handle, are the shim's hooks of that library.
struct HandleLibrary {
  AllReduceFn all_reduce = nullptr;
  ncclComm_t comm = nullptr;
  std::string error;
};

const HandleLibrary& handle_library() {
  static const HandleLibrary library = [] {
    HandleLibrary out;
    Dl_info info{};
    void* linked = dlsym(dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD), "pncclGetVersion");
    if (linked == nullptr || dladdr(linked, &info) == 0 || info.dli_fname == nullptr) {
      out.error = "the no-op libnccl.so.2 is not loaded";
      return out;
    }
    const std::string copy = "/tmp/trainscope-bench-nccl-" + std::to_string(getpid()) + ".so";
    const std::string command = "cp '" + std::string(info.dli_fname) + "' '" + copy + "'";
    if (std::system(command.c_str()) != 0) {
      out.error = "cannot copy the no-op NCCL to /tmp";
      return out;
    }
    void* handle = dlopen(copy.c_str(), RTLD_NOW | RTLD_LOCAL);
    unlink(copy.c_str());
    if (handle == nullptr) {
      out.error = "cannot open the copied no-op NCCL";
      return out;
    }
    using InitFn = decltype(&ncclCommInitRank);
    auto init = reinterpret_cast<InitFn>(dlsym(handle, "ncclCommInitRank"));
    out.all_reduce = reinterpret_cast<AllReduceFn>(dlsym(handle, "ncclAllReduce"));
    ncclUniqueId id{};
    if (init == nullptr || out.all_reduce == nullptr || init(&out.comm, 1, id, 0) != ncclSuccess)
      out.error = "the copied no-op NCCL has no ncclCommInitRank/ncclAllReduce";
    return out;
  }();
  return library;
}

ncclComm_t bench_comm() {
  static ncclComm_t comm = [] {
    ncclUniqueId id{};
    ncclGetUniqueId(&id);
    ncclComm_t c = nullptr;
    ncclCommInitRank(&c, 1, id, 0);
    return c;
  }();
  return comm;
}

float g_buffer[16];

void BM_AllReduceDirect(benchmark::State& state) {
  const AllReduceFn fn = direct_allreduce();
  if (fn == nullptr) {
    state.SkipWithError("the no-op libnccl.so.2 is not loaded");
    return;
  }
  ncclComm_t comm = bench_comm();
  for (auto _ : state) benchmark::DoNotOptimize(fn(g_buffer, g_buffer, 16, ncclFloat32, ncclSum, comm, nullptr));
}
BENCHMARK(BM_AllReduceDirect)->Repetitions(5)->ReportAggregatesOnly(true);

void BM_AllReduceThroughShim(benchmark::State& state) {
  ncclComm_t comm = bench_comm();
  for (auto _ : state)
    benchmark::DoNotOptimize(ncclAllReduce(g_buffer, g_buffer, 16, ncclFloat32, ncclSum, comm, nullptr));
}
BENCHMARK(BM_AllReduceThroughShim)->Repetitions(5)->ReportAggregatesOnly(true)->Threads(1)->Threads(2);

// The same all-reduce into an NCCL found by a look-up on a library handle (ctypes, JAX): the hook of that library.
void BM_AllReduceHandleLookedUpThroughShim(benchmark::State& state) {
  const HandleLibrary& library = handle_library();
  if (!library.error.empty()) {
    state.SkipWithError(library.error.c_str());
    return;
  }
  for (auto _ : state)
    benchmark::DoNotOptimize(library.all_reduce(g_buffer, g_buffer, 16, ncclFloat32, ncclSum, library.comm, nullptr));
}
BENCHMARK(BM_AllReduceHandleLookedUpThroughShim)->Repetitions(5)->ReportAggregatesOnly(true);

// What a process that never touches NCCL pays for our dlsym: a look-up of a libc function (the trampoline, a
// four-byte name check, the real dlsym), against the real dlsym called directly.
void BM_DlsymOfANonNcclName(benchmark::State& state) {
  void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  for (auto _ : state) benchmark::DoNotOptimize(dlsym(libc, "getpid"));
}
BENCHMARK(BM_DlsymOfANonNcclName)->Repetitions(5)->ReportAggregatesOnly(true);

void BM_DlsymOfANonNcclNameDirect(benchmark::State& state) {
  void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  using DlsymFn = void* (*)(void*, const char*);
  auto real = reinterpret_cast<DlsymFn>(dlvsym(libc, "dlsym", "GLIBC_2.34"));
  if (real == nullptr) real = reinterpret_cast<DlsymFn>(dlvsym(libc, "dlsym", "GLIBC_2.2.5"));
  if (real == nullptr) {
    state.SkipWithError("no versioned dlsym in libc.so.6");
    return;
  }
  for (auto _ : state) benchmark::DoNotOptimize(real(libc, "getpid"));
}
BENCHMARK(BM_DlsymOfANonNcclNameDirect)->Repetitions(5)->ReportAggregatesOnly(true);

void BM_SendThroughShim(benchmark::State& state) {
  ncclComm_t comm = bench_comm();
  for (auto _ : state) benchmark::DoNotOptimize(ncclSend(g_buffer, 16, ncclFloat32, 0, comm, nullptr));
}
BENCHMARK(BM_SendThroughShim)->Repetitions(5)->ReportAggregatesOnly(true);

// ncclCommGetAsyncError, which jobs on non-blocking communicators poll in tight loops: forwarded, not recorded; with
// no watched call waiting for it, two loads on top of the call.
void BM_GetAsyncErrorThroughShim(benchmark::State& state) {
  ncclComm_t comm = bench_comm();
  ncclResult_t async_error = ncclSuccess;
  for (auto _ : state) benchmark::DoNotOptimize(ncclCommGetAsyncError(comm, &async_error));
}
BENCHMARK(BM_GetAsyncErrorThroughShim)->Repetitions(5)->ReportAggregatesOnly(true);

void BM_GroupOfTwoThroughShim(benchmark::State& state) {
  ncclComm_t comm = bench_comm();
  for (auto _ : state) {
    ncclGroupStart();
    ncclSend(g_buffer, 16, ncclFloat32, 0, comm, nullptr);
    ncclRecv(g_buffer, 16, ncclFloat32, 0, comm, nullptr);
    benchmark::DoNotOptimize(ncclGroupEnd());
  }
}
BENCHMARK(BM_GroupOfTwoThroughShim)->Repetitions(5)->ReportAggregatesOnly(true);

// A watched all-reduce (TRAINSCOPE_WATCH=collectives, the default) of a host buffer of Arg fp32 elements: the
// calling thread takes the send buffer's statistics before the call and the receive buffer's after it (two passes
// of the host implementation) and posts the frame for the engine's frame thread. Only the call is timed (manual
// time); between calls the benchmark pauses 50 us, the pace of real collectives, so the frame thread keeps up as
// it would in a job. Run the binary once with TRAINSCOPE_WATCH=off for the same call unwatched (scripts/test.sh
// runs both).
void BM_AllReduceWatched(benchmark::State& state) {
  static std::vector<float> buffer;
  buffer.assign(static_cast<size_t>(state.range(0)), 0.5f);
  ncclComm_t comm = bench_comm();
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(
        ncclAllReduce(buffer.data(), buffer.data(), buffer.size(), ncclFloat32, ncclSum, comm, nullptr));
    const auto end = std::chrono::steady_clock::now();
    state.SetIterationTime(std::chrono::duration<double>(end - start).count());
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0) * 4 * 2);
}
// Fixed iteration counts: the pauses are not timed, so a time budget would run for minutes.
BENCHMARK(BM_AllReduceWatched)->Arg(16)->Iterations(20000)->UseManualTime()->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_AllReduceWatched)
    ->Arg(4096)
    ->Iterations(5000)
    ->UseManualTime()
    ->Repetitions(5)
    ->ReportAggregatesOnly(true);
BENCHMARK(BM_AllReduceWatched)
    ->Arg(1 << 20)
    ->Iterations(40)
    ->UseManualTime()
    ->Repetitions(5)
    ->ReportAggregatesOnly(true);

// What a watched 16-element all-reduce costs the whole process: the CPU time of every thread (the caller's statistics
// and post, the frame thread's frame, batch and window, the exchange) per call, over bursts of 2,000 calls each
// followed by 20 ms in which the frame thread catches up. Process CPU time, not wall time: the pauses cost nothing
// but what trainscope's threads do in them. Under TRAINSCOPE_WATCH=off the same figure is the unwatched call's.
void BM_AllReduceWatchedProcessCpu(benchmark::State& state) {
  static std::vector<float> buffer(16, 0.5f);
  ncclComm_t comm = bench_comm();
  constexpr int kBurst = 2000;
  const auto process_cpu_ns = [] {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
  };
  for (auto _ : state) {
    const double start = process_cpu_ns();
    for (int i = 0; i < kBurst; ++i)
      benchmark::DoNotOptimize(
          ncclAllReduce(buffer.data(), buffer.data(), buffer.size(), ncclFloat32, ncclSum, comm, nullptr));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    state.SetIterationTime((process_cpu_ns() - start) / 1e9 / kBurst);
  }
}
BENCHMARK(BM_AllReduceWatchedProcessCpu)->Iterations(20)->UseManualTime()->Repetitions(5)->ReportAggregatesOnly(true);

// The recorder on its own: claim, fill, checksum, commit, then complete.
void BM_RecorderAppend(benchmark::State& state) {
  static trainscope::recorder::Writer writer;
  if (!writer.is_open()) {
    const std::string path = "/tmp/trainscope-bench-" + std::to_string(getpid()) + ".tsrec";
    trainscope::recorder::WriterOptions options{};
    options.path = path.c_str();
    options.capacity = 65536;
    options.max_comms = 16;
    options.pid = getpid();
    options.launcher_rank = options.launcher_world = options.local_rank = -1;
    options.host = "bench";
    options.run_id = "bench";
    options.exe = "bench";
    if (writer.open(options) != 0) {
      state.SkipWithError("cannot create the recorder file in /tmp");
      return;
    }
    unlink(path.c_str());  // the mapping stays valid
  }
  trainscope::recorder::Record record{};
  record.op = static_cast<uint16_t>(trainscope::recorder::Op::kAllReduce);
  for (auto _ : state) {
    record.seq++;
    const auto pending = writer.append(record);
    trainscope::recorder::Writer::complete(pending, 0, record.seq);
  }
}
BENCHMARK(BM_RecorderAppend)->Repetitions(5)->ReportAggregatesOnly(true)->Threads(1)->Threads(2);

}  // namespace

BENCHMARK_MAIN();
