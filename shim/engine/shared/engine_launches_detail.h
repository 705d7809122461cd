// What the CUPTI adapter's files share, and no other file: the collector's state (one per process, leaked once
// created: CUPTI may call back until the process ends) and the pointer through which CUPTI's callbacks, on the job's
// threads, find it. Kept out of engine_launches.h, the engine's view of the adapter (prepare, start, stop, fork),
// which names no CUPTI type.
#pragma once

#include <cupti.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "base/flight_recorder_writer.h"
#include "collectors/launches/launch_collector.h"
#include "shim/engine/shared/cuda_driver_queries.h"
#include "shim/engine/shared/cupti_library.h"
#include "shim/engine/shared/launches_setup.h"

namespace trainscope::engine {

struct Launches {
  LaunchesSetup setup;
  recorder::Writer writer;  // attached to the shim's live recorder mapping
  DriverQueries queries;
  launches::LaunchCollector* collector = nullptr;
  Cupti cupti;
  CUpti_SubscriberHandle subscriber = nullptr;
  bool activity = false;         // TRAINSCOPE_LAUNCHES=on and kernel activity enabled
  int64_t timestamp_offset = 0;  // CLOCK_REALTIME minus CUPTI's clock, at start
  std::atomic<uint64_t> launched{0};
  std::atomic<uint64_t> completed{0};
  std::atomic<int> buffers_out{0};
  std::mutex completion_mutex;  // CUPTI may hand buffers back on its own thread as well as in our flush
  // The first error: the collector's handler stores the record index + 1; the thread writes the report.
  std::atomic<uint64_t> first_error{0};
  bool error_report_written = false;  // written once (the log says so); rewritten at stop
  bool error_report_failed = false;   // said once
  std::mutex mutex;
  std::condition_variable wake;
  bool stopping = false;
  std::thread thread;
};

extern std::atomic<Launches*> g_active;  // null: callbacks are ignored (not started, stopped, a forked child)

// CUPTI's callback for every runtime and driver API call, at its enter and its exit, on the calling thread
// (job_thread/launch_callbacks.cc).
void CUPTIAPI on_callback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data);

}  // namespace trainscope::engine
