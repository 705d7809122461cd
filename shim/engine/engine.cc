// The engine library's C entry points (engine_api.h): started by the shim on first NCCL use.
#include <atomic>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "base/printable.h"
#include "shim/engine/engine_exchange.h"
#include "shim/engine/engine_frames.h"
#include "shim/engine/engine_launches.h"
#include "shim/engine/engine_stacks.h"
#include "shim/engine/engine_threads.h"
#include "shim/engine/job_thread/engine_batches.h"
#include "shim/engine/job_thread/engine_kernel_frames.h"
#include "shim/engine/job_thread/engine_module_frames.h"
#include "shim/engine/job_thread/engine_watch.h"
#include "shim/engine/job_thread/stack_capture.h"
#include "shim/engine/shared/engine_logging.h"
#include "shim/engine_api.h"

#define TS_ENGINE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

bool g_started = false;
trainscope::recorder::FileHeader* g_recorder = nullptr;  // for the calls counted at stop

// Exceptions contained at the entry points (base/errors.h: none crosses into the job), counted; the first is said in
// the log when it happens and the count at the end, so a swallowed failure is never a silent one.
std::atomic<uint64_t> g_contained{0};
const char* g_first_contained_entry = nullptr;
char g_first_contained_what[160];

// Called inside a catch (...) of entry point `entry`. Allocates nothing unless it logs, and never throws.
void contained(const char* entry) noexcept {
  if (g_contained.fetch_add(1, std::memory_order_relaxed) != 0) return;
  g_first_contained_entry = entry;
  std::snprintf(g_first_contained_what, sizeof(g_first_contained_what), "%s", "an exception of unknown type");
  try {
    throw;
  } catch (const std::exception& e) {
    std::snprintf(g_first_contained_what, sizeof(g_first_contained_what), "%s", e.what());
  } catch (...) {
  }
  if (!g_started) return;
  try {
    trainscope::engine::log(trainscope::LogLevel::kWarn,
                            (std::string("engine: ") + entry + " failed (" + g_first_contained_what +
                             "); the job goes on, without what that call would have recorded")
                                .c_str());
  } catch (...) {
  }
}

// At the end: how many failures were contained, when there were any.
void say_contained() noexcept {
  const uint64_t count = g_contained.load(std::memory_order_relaxed);
  if (count == 0 || !g_started) return;
  try {
    trainscope::engine::log(trainscope::LogLevel::kWarn,
                            ("engine: " + std::to_string(count) + " failure" + (count == 1 ? "" : "s") +
                             " contained at the engine's entry points, the first in " + g_first_contained_entry + " (" +
                             g_first_contained_what + ")")
                                .c_str());
  } catch (...) {
  }
}

}  // namespace

TS_ENGINE_EXPORT int trainscope_engine_start(const trainscope::EngineStartArgs* args) {
  using trainscope::LogLevel;
  if (args == nullptr || args->abi_version != trainscope::kEngineAbiVersion ||
      args->size < sizeof(trainscope::EngineStartArgs) || args->config == nullptr)
    return 1;
  try {
    const std::string log_path = args->log_path != nullptr ? args->log_path : "";
    std::string error;
    const bool logging = trainscope::engine::start_logging(*args->config, args->global_rank, log_path, &error);
    g_started = true;
    g_recorder = args->recorder;
    if (!logging) {
      trainscope::engine::log(
          LogLevel::kWarn,
          ("cannot open the log file " + trainscope::reports::printable(log_path) + ": " + error).c_str());
    }
    if (args->run_dir != nullptr && args->run_dir[0] != '\0' && args->run_dir_error == 0) {
      const std::string message = "recording to " + trainscope::reports::printable(args->run_dir) + " (pid " +
                                  std::to_string(args->pid) + ", host " +
                                  trainscope::reports::printable(args->host != nullptr ? args->host : "") + ")";
      trainscope::engine::log(LogLevel::kInfo, message.c_str());
    }
    trainscope::engine::ExchangeSetup setup;
    setup.config = args->config;
    setup.recorder = args->recorder;
    setup.run_dir = args->run_dir != nullptr ? args->run_dir : "";
    setup.run_id = args->run_id != nullptr ? args->run_id : "";
    setup.recorder_path = args->recorder_path != nullptr ? args->recorder_path : "";
    setup.host = args->host != nullptr ? args->host : "";
    setup.pid = args->pid;
    setup.launcher_rank = args->launcher_rank;
    setup.world = args->world;
    setup.local_rank = args->local_rank;
    setup.nccl_version = args->nccl_version;
    setup.forked_child = args->forked_child != 0;
    trainscope::engine::start_exchange(setup);
    trainscope::engine::FramesSetup frames;
    frames.config = args->config;
    frames.recorder = args->recorder;
    frames.run_dir = setup.run_dir;
    trainscope::engine::start_frames(frames);
    trainscope::engine::start_batch_gate(*args->config, &trainscope::engine::stop_after_batch);
    trainscope::engine::LaunchesSetup launches;
    launches.config = args->config;
    launches.recorder = args->recorder;
    launches.run_dir = setup.run_dir;
    launches.recorder_path = setup.recorder_path;
    launches.watcher = trainscope::engine::kernel_watcher();  // null unless TRAINSCOPE_WATCH names kernels
    trainscope::engine::prepare_launches(launches);
    return 0;
  } catch (...) {
    contained("trainscope_engine_start");
    return 1;
  }
}

TS_ENGINE_EXPORT void trainscope_engine_job_key(const trainscope::JobKeyArgs* args) {
  if (!g_started || args == nullptr || args->key == nullptr) return;
  try {
    trainscope::engine::job_key_known(*args);
  } catch (...) {
    contained("trainscope_engine_job_key");
    // Never an exception into the job's communicator creation.
  }
}

TS_ENGINE_EXPORT void trainscope_engine_log(int level, const char* message) {
  if (!g_started || message == nullptr) return;
  trainscope::engine::log(static_cast<trainscope::LogLevel>(level), message);
}

TS_ENGINE_EXPORT void trainscope_engine_set_rank(int32_t global_rank) {
  if (g_started) trainscope::engine::set_logging_rank(global_rank);
}

TS_ENGINE_EXPORT void trainscope_engine_stop(void) {
  if (!g_started) return;
  try {
    trainscope::engine::skip_all_parked();  // before the frame thread's last pass, so it does not wait on them
  } catch (...) {
    contained("trainscope_engine_stop");
  }
  try {
    // While every thread of ours is alive (the last passes after this are not counted).
    // Said only where something was recorded and some thread of ours ran: otherwise there is no cost to tell. The
    // threads are read from /proc only when the line is logged (info): a default run opens nothing at its exit.
    const uint64_t calls = g_recorder != nullptr ? __atomic_load_n(&g_recorder->next, __ATOMIC_RELAXED) : 0;
    const trainscope::engine::BackgroundCpu cpu =
        calls > 0 && trainscope::engine::log_enabled(trainscope::LogLevel::kInfo) ? trainscope::engine::background_cpu()
                                                                                  : trainscope::engine::BackgroundCpu{};
    if (cpu.threads > 0) {
      trainscope::engine::log(trainscope::LogLevel::kInfo,
                              trainscope::engine::describe_background_cpu(cpu, calls).c_str());
    }
  } catch (...) {
    contained("trainscope_engine_stop");
  }
  trainscope::engine::stop_launches();
  trainscope::engine::stop_frames();
  trainscope::engine::stop_exchange();
  say_contained();
  trainscope::engine::flush_logs();
}

TS_ENGINE_EXPORT void trainscope_engine_note_call_site(const trainscope::CallSiteCapture* site) {
  if (site == nullptr) return;
  try {
    trainscope::engine::capture_call_site(*site);
  } catch (...) {
    contained("trainscope_engine_note_call_site");
    // A stack is a nicety of the report: never worth an exception in the job.
  }
}

TS_ENGINE_EXPORT void* trainscope_engine_watch_begin(const trainscope::recorder::Record* record, uint64_t index) {
  try {
    return trainscope::engine::watch_begin(*record, index);
  } catch (...) {
    contained("trainscope_engine_watch_begin");
    return nullptr;  // out of memory: this call goes unwatched (its record's frame is then never complete)
  }
}

TS_ENGINE_EXPORT void trainscope_engine_watch_end(void* token, int32_t result) {
  try {
    trainscope::engine::watch_end(static_cast<trainscope::engine::WatchedCall*>(token), result);
  } catch (...) {
    contained("trainscope_engine_watch_end");
    // Never an exception into the job.
  }
}

TS_ENGINE_EXPORT void trainscope_engine_group_end(int32_t executed, int32_t result) {
  try {
    trainscope::engine::group_end(executed != 0, result);
  } catch (...) {
    contained("trainscope_engine_group_end");
  }
}

TS_ENGINE_EXPORT const std::atomic<uint32_t>* trainscope_engine_parked_calls(void) {
  return &trainscope::engine::parked_call_count();
}

TS_ENGINE_EXPORT void trainscope_engine_comm_async_state(uint64_t comm_id, int32_t state) {
  try {
    trainscope::engine::comm_async_state(comm_id, state);
  } catch (...) {
    contained("trainscope_engine_comm_async_state");
    // Out of memory for a reason string: the calls stay parked until the next call, the end or the exit.
  }
}

TS_ENGINE_EXPORT void trainscope_engine_comm_next_call(uint64_t comm_id, uint16_t op) {
  try {
    trainscope::engine::comm_next_call(comm_id, op);
  } catch (...) {
    contained("trainscope_engine_comm_next_call");
  }
}

TS_ENGINE_EXPORT int trainscope_engine_step_marker_matches(const char* name) {
  try {
    return name != nullptr && trainscope::engine::step_marker_matches(name) ? 1 : 0;
  } catch (...) {
    contained("trainscope_engine_step_marker_matches");
    return 0;
  }
}

TS_ENGINE_EXPORT void trainscope_engine_batch_call(const trainscope::recorder::Record* record) {
  if (record == nullptr) return;
  try {
    trainscope::engine::batch_gate_call(*record);
  } catch (...) {
    contained("trainscope_engine_batch_call");
    // Never an exception into the job (the gate allocates nothing per call; the stop itself catches its own).
  }
}

TS_ENGINE_EXPORT void trainscope_engine_batch_marker(void) {
  try {
    trainscope::engine::batch_gate_marker();
  } catch (...) {
    contained("trainscope_engine_batch_marker");
  }
}

TS_ENGINE_EXPORT int trainscope_engine_module_frame(const trainscope::recorder::Record* record, uint64_t index,
                                                    const char* name, const char* kind, const char* labels,
                                                    uint64_t labels_len, const int64_t* words, uint64_t word_count) {
  if (!g_started) return -1;
  try {
    const std::string why =
        trainscope::engine::watch_module_frame(*record, index, name, kind, labels, labels_len, words, word_count);
    if (why.empty()) return 0;
    static std::atomic<bool> said{false};
    if (!said.exchange(true))
      trainscope::engine::log(trainscope::LogLevel::kWarn, ("module frames: a frame was refused: " + why).c_str());
    return -1;
  } catch (...) {
    contained("trainscope_engine_module_frame");
    return -1;  // never an exception into the job
  }
}

TS_ENGINE_EXPORT void trainscope_engine_start_launches(void) {
  if (!g_started) return;
  try {
    trainscope::engine::start_launches();
  } catch (...) {
    contained("trainscope_engine_start_launches");
    // Never an exception into the job's cuInit: launches are then not recorded.
  }
}

TS_ENGINE_EXPORT void trainscope_engine_fork_prepare(void) {
  if (g_started) trainscope::engine::frames_fork_prepare();
}
TS_ENGINE_EXPORT void trainscope_engine_fork_parent(void) {
  if (g_started) trainscope::engine::frames_fork_parent();
}

TS_ENGINE_EXPORT void trainscope_engine_fork_child(void) {
  trainscope::engine::abandon_launches();
  trainscope::engine::abandon_batch_gate();
  trainscope::engine::abandon_frames();
  trainscope::engine::abandon_exchange();
  trainscope::engine::abandon_stacks();
  trainscope::engine::abandon_logging();
  g_started = false;
}
