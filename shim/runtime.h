// Process-wide state of the preloaded shim: configuration, lazy start, the flight recorder, per-thread guards.
//
// Everything here lives in leaked static storage (no destructors race the job's exit), and the hot-path
// pieces (enabled flag, start state, thread-local guard) are single loads.
#pragma once

#include <atomic>
#include <cstdint>

#include "base/flight_recorder_writer.h"
#include "shim/config.h"
#include "shim/engine_api.h"
#include "shim/identity.h"
#include "shim/wall_clock.h"

namespace trainscope::shim {

// The engine's entry points as the shim holds them: one field per line of TRAINSCOPE_ENGINE_ENTRY_POINTS.
struct EngineEntryPoints {
#define TRAINSCOPE_ENGINE_ENTRY_POINT_FIELD(name, wanted) decltype(&trainscope_engine_##name) name;
  TRAINSCOPE_ENGINE_ENTRY_POINTS(TRAINSCOPE_ENGINE_ENTRY_POINT_FIELD)
#undef TRAINSCOPE_ENGINE_ENTRY_POINT_FIELD
};

enum class StartState : int { kNotStarted = 0, kStarting = 1, kReady = 2 };

struct Runtime {
  Config config;
  bool enabled;                  // TRAINSCOPE_ENABLE, fixed at load
  std::atomic<int> start_state;  // StartState
  int32_t owner_pid;             // the process that started (a forked child starts anew)
  bool forked_from_nccl_user;    // a forked child of a process that used NCCL: its loaded NCCL is its parent's
  bool startup_warnings_said;    // the start-up warnings of the environment were said (kept across fork: once a job)
  recorder::Writer writer;
  std::atomic<int32_t> global_rank;  // launcher rank, else rank in the first communicator, else -1
  int32_t launcher_rank;
  int32_t launcher_world;
  int32_t local_rank;
  int32_t nccl_version;
  std::atomic<uint64_t> group_counter;
  std::atomic<uint64_t> initall_counter;
  char host[64];
  char run_id[kMaxRunId + 1];
  char run_dir[kMaxPath];
  char recorder_path[kMaxPath];
  char log_path[kMaxPath];
  RunIdSource run_id_source;
  // The job key (job_key.h): 0 until the world communicator's unique id is seen, then 1 (set under its lock).
  std::atomic<int> job_key_state;
  // The engine's entry points (engine_api.h's list), null until it is loaded, and again in a forked child.
  EngineEntryPoints engine;
  // The engine's count of parked calls (engine.parked_calls()), loaded relaxed by the hooks before calling
  // engine.comm_async_state / comm_next_call; set with the other kWatch entry points (all or none).
  const std::atomic<uint32_t>* engine_parked_calls;
};

extern Runtime g_runtime;

// Per-thread state. `depth` > 0 while this thread is inside one of our hooks (or our own code): nested NCCL
// calls (NCCL calling its own exported functions, the engine calling NCCL) are passed through unrecorded.
struct ThreadState {
  int depth;
  int library;  // the NCCL library (interception.h) of the outermost hook this thread entered last
  int group_depth;
  uint64_t group;  // number of the outermost open group, 0 outside groups
  uint32_t tid;
};
extern __thread ThreadState t_thread __attribute__((tls_model("initial-exec")));

// Starts the runtime if needed (first NCCL call of the process, made into NCCL library `library`, whose version the
// recorder notes). Never fails: what cannot be set up is warned about once and left out.
void start_slow_path(int library);
inline void ensure_started(int library = 0) {
  if (__builtin_expect(g_runtime.start_state.load(std::memory_order_acquire) != static_cast<int>(StartState::kReady),
                       0))
    start_slow_path(library);
}

uint32_t current_tid();

// The directory this library was loaded from, into `out`; false when it cannot be told or does not fit.
bool own_directory(char* out, size_t out_len);

// TRAINSCOPE_WATCH=modules: puts the Python module hooks first on PYTHONPATH (module_frames.cc); at load.
void inject_module_hooks();
// How many module frames' records this process appended.
uint64_t module_frames_recorded();

// The global rank is learnt from the first communicator when the launcher did not give one.
void learn_global_rank(int32_t rank);

// Logs through the engine when it is loaded, else as one line on stderr (main rank, at or above the level).
void log_message(LogLevel level, const char* format, ...) __attribute__((format(printf, 2, 3)));

}  // namespace trainscope::shim
