// The CUPTI adapter (see engine_launches.h): the collector's state, kernel activity, the first error's report, the
// launches thread, and subscribe, start and stop. Its other parts, one concern each: cupti_library (libcupti, loaded
// at run time), cuda_driver_queries (the driver's answers) and job_thread/launch_callbacks (CUPTI's callbacks, on
// the job's launching thread: the only code that knows CUPTI's callback ids and *_params structs).
#include "shim/engine/engine_launches.h"

#include <cuda.h>
#include <cupti.h>
#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <string>
#include <thread>

#include "base/clocks.h"
#include "base/flight_recorder_reader.h"
#include "base/flight_recorder_writer.h"
#include "base/launch_event.h"
#include "base/printable.h"
#include "collectors/launches/launch_collector.h"
#include "reports/cuda_error_report.h"
#include "shim/engine/engine_threads.h"
#include "shim/engine/job_thread/engine_batches.h"
#include "shim/engine/job_thread/engine_kernel_frames.h"
#include "shim/engine/shared/cupti_library.h"
#include "shim/engine/shared/engine_launches_detail.h"
#include "shim/engine/shared/engine_logging.h"

namespace trainscope::engine {

std::atomic<Launches*> g_active{nullptr};

namespace {

using recorder::LaunchMode;

// Every CUpti_ActivityKernelN from 4 on (CUDA 9) to 10 (CUDA 13) keeps these fields where they were: the records of
// whichever CUPTI is loaded are read through the oldest layout.
static_assert(offsetof(CUpti_ActivityKernel4, correlationId) == offsetof(CUpti_ActivityKernel10, correlationId));
static_assert(offsetof(CUpti_ActivityKernel4, end) == offsetof(CUpti_ActivityKernel10, end));

constexpr auto kFlushPeriod = std::chrono::milliseconds(500);
constexpr size_t kActivityBufferBytes = size_t{256} << 10;
constexpr int kMaxActivityBuffers = 16;  // in CUPTI's hands at once; beyond, CUPTI drops records (and counts them)

using clocks::realtime_ns;

// ---- The collector's state ------------------------------------------------------------------------------------------
std::mutex g_start_mutex;
Launches* g_launches = nullptr;  // leaked once created: CUPTI may call us until the process ends
bool g_prepared = false;
bool g_tried = false;  // subscription attempted (once per process)

// ---- Kernel activity ------------------------------------------------------------------------------------------------
void CUPTIAPI on_buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *max_records = 0;
  Launches* l = g_launches;
  if (l == nullptr || l->buffers_out.fetch_add(1) >= kMaxActivityBuffers) {
    if (l != nullptr) l->buffers_out.fetch_sub(1);
    *buffer = nullptr;  // CUPTI drops the records and counts them
    *size = 0;
    return;
  }
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kActivityBufferBytes));
  *size = *buffer != nullptr ? kActivityBufferBytes : 0;
  if (*buffer == nullptr) l->buffers_out.fetch_sub(1);
}

void CUPTIAPI on_buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  Launches* l = g_launches;
  if (l != nullptr && buffer != nullptr && g_active.load(std::memory_order_acquire) == l) {
    std::lock_guard<std::mutex> lock(l->completion_mutex);
    CUpti_Activity* record = nullptr;
    uint32_t previous = 0;
    while (l->cupti.cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
      if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && record->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
      const auto* kernel = reinterpret_cast<const CUpti_ActivityKernel4*>(record);
      const auto end_ns = static_cast<uint64_t>(static_cast<int64_t>(kernel->end) + l->timestamp_offset);
      try {
        l->collector->on_kernel_completed(kernel->correlationId, end_ns);
      } catch (...) {
      }
      // A graph launch's kernels share its correlation id: counted once, as its launch was.
      if (kernel->correlationId != previous) l->completed.fetch_add(1, std::memory_order_relaxed);
      previous = kernel->correlationId;
    }
  }
  std::free(buffer);
  if (l != nullptr) l->buffers_out.fetch_sub(1);
}

// Hands every finished kernel CUPTI holds to the collector, and says completion is up to date as of now.
void flush_activity(Launches& l) {
  const uint64_t checked = realtime_ns();
  l.cupti.cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::lock_guard<std::mutex> lock(l.completion_mutex);
  try {
    l.collector->on_completions_checked(checked);
  } catch (...) {
  }
}

// ---- The first error's report ---------------------------------------------------------------------------------------
// Built from the live recorder file (reports/cuda_error_report.h), as `trainscope report` rebuilds it for a process
// that died first: at the error, on this thread, and again at stop, when more of its launches are known finished.
void write_error_report(Launches& l) {
  if (l.first_error.load() == 0) return;
  recorder::RecorderFile file;
  std::string error;
  reports::CudaErrorReport report;
  if (!recorder::read_recorder_file(l.setup.recorder_path, &file, &error) ||
      !reports::build_cuda_error_report(file, &report)) {
    if (!l.error_report_failed)
      log(LogLevel::kWarn, ("cannot write the cuda-error report: " +
                            (error.empty() ? "the first error's record was overwritten" : error))
                               .c_str());
    l.error_report_failed = true;
    return;
  }
  const reports::CudaErrorFiles files = reports::write_cuda_error_report(l.setup.run_dir, file);
  if (!files.error.empty()) {
    if (!l.error_report_failed) log(LogLevel::kWarn, ("cannot write the cuda-error report: " + files.error).c_str());
    l.error_report_failed = true;
    return;
  }
  if (!l.error_report_written)
    log(LogLevel::kError,
        ("first CUDA error: " + reports::cuda_error_summary(report) + " (report: " + files.text_path + ")").c_str());
  l.error_report_written = true;
}

// The first error happened and its report was neither written nor refused yet.
bool error_report_due(const Launches& l) {
  return l.first_error.load() != 0 && !l.error_report_written && !l.error_report_failed;
}

void thread_loop(Launches* l) {
  name_this_thread("ts-launches");
  std::unique_lock<std::mutex> lock(l->mutex);
  while (!l->stopping) {
    l->wake.wait_for(lock, kFlushPeriod, [l] { return l->stopping || error_report_due(*l); });
    if (l->stopping) break;
    lock.unlock();
    if (error_report_due(*l)) write_error_report(*l);
    // Only while some launch is not known finished: a process whose kernels all finished costs a wake-up and two
    // loads every period, never a CUPTI flush.
    if (l->activity && l->launched.load(std::memory_order_relaxed) > l->completed.load(std::memory_order_relaxed))
      flush_activity(*l);
    lock.lock();
  }
}

void warn_foreign_injection() {
  const char* tool = std::getenv("CUDA_INJECTION64_PATH");
  const char* base = tool != nullptr ? std::strrchr(tool, '/') : nullptr;
  if (tool != nullptr && std::strcmp(base != nullptr ? base + 1 : tool, "libtrainscope.so") != 0)
    log(LogLevel::kWarn, ("CUDA_INJECTION64_PATH is set to '" + reports::printable(tool) +
                          "' (another tool): CUDA launches are seen from trainscope's start on, not from cuInit")
                             .c_str());
}

// Subscribes and enables what the mode needs; the launch mode the recorder then says, with its note.
void subscribe(Launches& l) {
  recorder::Writer& w = l.writer;
  const bool want_activity = l.setup.config->launches == LaunchesMode::kOn;
  if (const std::string why = load_cupti(l.cupti); !why.empty()) {
    w.set_launch_mode(LaunchMode::kUnavailable, why.c_str());
    log(LogLevel::kWarn, ("CUDA launches are not recorded: " + why).c_str());
    return;
  }
  CUptiResult result = l.cupti.cuptiSubscribe(&l.subscriber, on_callback, nullptr);
  if (result == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
    w.set_launch_mode(LaunchMode::kUnavailable, "CUPTI is in use by another tool (Nsight Systems, torch.profiler?)");
    log(LogLevel::kWarn,
        "CUDA launches are not recorded: CUPTI is in use by another tool (Nsight Systems, torch.profiler / Kineto); "
        "the job runs on, NCCL calls are recorded as usual");
    return;
  }
  if (result != CUPTI_SUCCESS) {
    const std::string why = "cuptiSubscribe failed: " + l.cupti.error_text(result);
    w.set_launch_mode(LaunchMode::kUnavailable, why.c_str());
    log(LogLevel::kWarn, ("CUDA launches are not recorded: " + why).c_str());
    return;
  }
  // Every call's result is wanted (the first error can be any call), not only the launches'.
  for (CUpti_CallbackDomain domain : {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_CB_DOMAIN_DRIVER_API}) {
    if ((result = l.cupti.cuptiEnableDomain(1, l.subscriber, domain)) != CUPTI_SUCCESS) {
      const std::string why = "cuptiEnableDomain failed: " + l.cupti.error_text(result);
      l.cupti.cuptiUnsubscribe(l.subscriber);
      w.set_launch_mode(LaunchMode::kUnavailable, why.c_str());
      log(LogLevel::kWarn, ("CUDA launches are not recorded: " + why).c_str());
      return;
    }
  }
  std::string note;
  if (want_activity) {
    uint64_t cupti_now = 0;
    l.cupti.cuptiGetTimestamp(&cupti_now);
    l.timestamp_offset = static_cast<int64_t>(realtime_ns()) - static_cast<int64_t>(cupti_now);
    result = l.cupti.cuptiActivityRegisterCallbacks(on_buffer_requested, on_buffer_completed);
    if (result == CUPTI_SUCCESS) result = l.cupti.cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    l.activity = result == CUPTI_SUCCESS;
    if (!l.activity) note = "no kernel completion: CUPTI activity failed (" + l.cupti.error_text(result) + ")";
  }
  w.set_launch_mode(l.activity ? LaunchMode::kCompletions : LaunchMode::kCallbacks, note.c_str());
  if (!note.empty()) log(LogLevel::kWarn, ("CUDA launches are recorded with " + note).c_str());
  log(LogLevel::kDebug, ("CUDA launches recorded through " + l.cupti.path).c_str());
  l.collector->set_first_error_handler([l_ptr = &l](uint64_t index) {
    {
      std::lock_guard<std::mutex> lock(l_ptr->mutex);
      l_ptr->first_error.store(index + 1);
    }
    l_ptr->wake.notify_all();
  });
  g_active.store(&l, std::memory_order_release);
  l.thread = std::thread(thread_loop, &l);
  // exit() runs atexit handlers (static destructors included: CUPTI's own teardown) before the shim's destructor
  // stops the engine. Registered after libcupti's, ours runs before its teardown: no flush into a torn-down CUPTI.
  std::atexit(stop_launches);
}

void start_locked() {
  if (g_tried || !g_prepared) return;
  g_tried = true;
  Launches& l = *g_launches;
  if (!l.writer.attach(l.setup.recorder)) return;
  launches::CollectorOptions options;
  options.watch_kernels = l.setup.config->watch_kernels[0] != '\0' ? l.setup.config->watch_kernels : nullptr;
  options.kernel_dtype = l.setup.config->kernel_dtype[0] != '\0' ? l.setup.config->kernel_dtype : nullptr;
  l.collector = new launches::LaunchCollector(&l.writer, &l.queries, l.setup.watcher, options);  // leaked with l
  // TRAINSCOPE_STEP_MARKER=auto: optimizer kernels end batches, for the frame thread and the batch gate.
  const launches::LaunchCollector* collector = l.collector;
  set_optimizer_kernel_predicate([collector](uint64_t f) { return collector->is_optimizer_kernel(f); });
  l.collector->set_launch_handler(&batch_gate_launch);
  subscribe(l);
}

}  // namespace

void prepare_launches(const LaunchesSetup& setup) {
  std::lock_guard<std::mutex> lock(g_start_mutex);
  if (g_prepared || setup.config == nullptr || setup.config->launches == LaunchesMode::kOff ||
      setup.recorder == nullptr)
    return;
  g_launches = new Launches();
  g_launches->setup = setup;
  g_prepared = true;
  warn_foreign_injection();
  // The driver is already here (the job initialised CUDA before its first NCCL call, with no injection of ours).
  if (void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD); driver != nullptr) {
    dlclose(driver);
    start_locked();
  }
}

void start_launches() {
  std::lock_guard<std::mutex> lock(g_start_mutex);
  start_locked();
}

void stop_launches() {
  // From then on CUPTI's callbacks are ignored: what exit() tears down after this is not ours to touch.
  Launches* l = g_active.exchange(nullptr, std::memory_order_acq_rel);
  if (l == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(l->mutex);
    l->stopping = true;
  }
  l->wake.notify_all();
  if (l->thread.joinable()) l->thread.join();
  write_error_report(*l);
}

void abandon_launches() {
  Launches* l = g_active.exchange(nullptr, std::memory_order_acq_rel);
  if (l != nullptr && l->thread.joinable()) l->thread.detach();
  // The child never records launches: its CUDA (if any) is its parent's, unusable after fork. No lock: the child has
  // one thread, and another thread of the parent may have held g_start_mutex at the fork.
  g_tried = true;
}

}  // namespace trainscope::engine
