// The C ABI between the preloaded shim and the engine library it dlopen()s on first NCCL use.
//
// The shim stays libc-only; everything heavier (spdlog logging now; the exchange, kernels and reports later)
// lives in libtrainscope-engine.so. The ABI is versioned: the shim refuses an engine of another version.
#pragma once

#include <atomic>
#include <cstdint>

#include "base/flight_record_format.h"
#include "shim/config.h"

namespace trainscope {

// 4: group_end takes ncclGroupEnd's result; non-blocking communicators (comm_async_state, comm_next_call,
// parked_calls). 5: note_call_site takes a CallSiteCapture (site id, Python frames). 6: batch_call and batch_marker.
// 7: job_key; the exchange waits for it when no TRAINSCOPE_TOKEN is set. 8: start_launches (CUDA launches, from
// InitializeInjection). 9: module_frame (TRAINSCOPE_WATCH=modules).
inline constexpr uint32_t kEngineAbiVersion = 9;

struct EngineStartArgs {
  uint32_t abi_version;       // kEngineAbiVersion
  uint32_t size;              // sizeof(EngineStartArgs)
  const Config* config;       // parsed once by the shim at load; lives as long as the process
  const char* run_dir;        // "" when it could not be created (run_dir_error says why)
  int32_t run_dir_error;      // errno of the failed mkdir / recorder creation, 0 if fine
  const char* recorder_path;  // "" when the flight recorder could not be created
  const char* log_path;       // this process's log file in the run directory, "" if none
  const char* host;
  int32_t pid;
  int32_t global_rank;    // -1 until known
  int32_t launcher_rank;  // -1 when the launcher gave none
  int32_t world;
  int32_t nccl_version;  // of the loaded NCCL, 0 if unknown
  int32_t local_rank;    // -1 when the launcher gave none
  const char* run_id;
  recorder::FileHeader* recorder;  // this process's live flight recorder mapping, nullptr if none
  int32_t forked_child;            // 1: a forked child of a process that used NCCL (which joined the exchange)
};

// One Python frame as the shim read it at a call site's first sight (strings owned by the shim, valid for the call).
struct CallSitePythonFrame {
  int32_t line;
  const char* file;
  const char* function;
};

// A call site seen for the first time: the shim's id for it (the recorder's site table index + 1, also the stack
// id the exchange sends) and what the shim knows of it.
struct CallSiteCapture {
  uint32_t site;
  uint64_t caller;                    // native return address into the caller of the NCCL function
  const CallSitePythonFrame* python;  // innermost first; nullptr when the thread runs no Python
  int32_t python_count;               // frames in `python`
  int32_t python_depth;               // the thread's whole Python depth (python_count may be capped)
  const char* python_note;            // why the frames are missing although the thread runs Python; "" otherwise
};

// The job key, once this rank creates the communicator that spans every rank of the launcher (job_key.h), and where
// this run's files are from then on (they moved into the run's own sub-directory when the run id is one reruns share).
struct JobKeyArgs {
  const uint8_t* key;  // the ncclUniqueId's bytes
  uint32_t key_len;
  int32_t moved;  // 1: the files below moved into a new run directory
  const char* run_dir;
  const char* recorder_path;
  const char* log_path;
};

}  // namespace trainscope

// Every entry point the shim looks up once trainscope_engine_start succeeded, with the configuration that wants it:
// the shim's table of them (EngineEntryPoints, runtime.h), their loading and their forgetting in a forked child are
// made from this one list. Adding an entry point is its prototype below and its line here (and a kEngineAbiVersion
// step). A hook pays one load of a null pointer for an entry point its configuration does not want.
//   X(name, wanted): trainscope_engine_<name>; `wanted` names an EngineEntryPointUse.
#define TRAINSCOPE_ENGINE_ENTRY_POINTS(X) \
  X(log, kAlways)                         \
  X(set_rank, kAlways)                    \
  X(stop, kAlways)                        \
  X(fork_prepare, kAlways)                \
  X(fork_parent, kAlways)                 \
  X(fork_child, kAlways)                  \
  X(note_call_site, kAlways)              \
  X(job_key, kAlways)                     \
  X(watch_begin, kWatch)                  \
  X(watch_end, kWatch)                    \
  X(group_end, kWatch)                    \
  X(parked_calls, kWatch)                 \
  X(comm_async_state, kWatch)             \
  X(comm_next_call, kWatch)               \
  X(step_marker_matches, kNvtxStepMarker) \
  X(batch_call, kAbortAfterBatch)         \
  X(batch_marker, kAbortAfterBatch)       \
  X(start_launches, kLaunches)            \
  X(module_frame, kWatchModules)

namespace trainscope {
// When the shim wants an entry point (TRAINSCOPE_ENGINE_ENTRY_POINTS).
enum class EngineEntryPointUse {
  kAlways,
  kWatch,           // TRAINSCOPE_WATCH is not off; all six or none (a begun watch must end, a parked call be confirmed)
  kNvtxStepMarker,  // TRAINSCOPE_STEP_MARKER=nvtx:REGEX
  kAbortAfterBatch,  // TRAINSCOPE_ABORT_AFTER_BATCH set
  kLaunches,         // TRAINSCOPE_LAUNCHES on or calls
  kWatchModules,     // TRAINSCOPE_WATCH=modules
};
}  // namespace trainscope

extern "C" {
// Returns 0 on success. Called once per process (again in a forked child that uses NCCL itself).
int trainscope_engine_start(const trainscope::EngineStartArgs* args);
// The job key is known (at most once per process; again in a forked child that starts anew).
void trainscope_engine_job_key(const trainscope::JobKeyArgs* args);
// One complete, already formatted message at `level` (trainscope::LogLevel).
void trainscope_engine_log(int level, const char* message);
// The global rank became known (from the first communicator) after start.
void trainscope_engine_set_rank(int32_t global_rank);
// Normal process exit: flush and stop background work.
void trainscope_engine_stop(void);
// First call from a call site (a native return address and, on a Python thread, a Python stack): keep its Python
// frames and capture its native stack. Called on the job's thread, once per call site.
void trainscope_engine_note_call_site(const trainscope::CallSiteCapture* site);
// A watched call (kFlagWatched), on the job's thread: `record` is what was appended as record `index`. Takes the
// send buffer's statistics (host buffers) or enqueues them on the call's stream (device buffers), before the real
// call. Returns the token for trainscope_engine_watch_end, never null.
void* trainscope_engine_watch_begin(const trainscope::recorder::Record* record, uint64_t index);
// After the real call returned `result`: the receive buffer's statistics, or, inside a group, a note to take them
// when the group ends (NCCL runs grouped calls at the outermost ncclGroupEnd). ncclInProgress (a non-blocking
// communicator): the call is parked until ncclCommGetAsyncError confirms NCCL's work was enqueued.
void trainscope_engine_watch_end(void* token, int32_t result);
// The calling thread's outermost group ended with `result`; `executed` is 0 for ncclGroupSimulateEnd (nothing
// ran). ncclInProgress parks the group's watched calls like watch_end.
void trainscope_engine_group_end(int32_t executed, int32_t result);
// How many watched calls are parked: the shim loads it (relaxed) in ncclCommGetAsyncError and before each call on a
// communicator, and calls the two functions below only when it is not 0. The address is fixed for the process.
const std::atomic<uint32_t>* trainscope_engine_parked_calls(void);
// The job's ncclCommGetAsyncError(comm) returned ncclSuccess with *asyncError == `state` (not ncclInProgress):
// ncclSuccess takes the parked outputs of communicator `comm_id` on this thread; an error skips them.
void trainscope_engine_comm_async_state(uint64_t comm_id, int32_t state);
// Communicator `comm_id` is about to make a call `op` (recorder::Op; ncclCommDestroy and the other ends included):
// its parked calls were never confirmed, so their outputs are skipped.
void trainscope_engine_comm_next_call(uint64_t comm_id, uint16_t op);
// TRAINSCOPE_STEP_MARKER=nvtx:REGEX: whether an NVTX range name matches (1) or not (0). Called on the job's
// threads for every range push; the answer is cached per distinct name.
int trainscope_engine_step_marker_matches(const char* name);
// TRAINSCOPE_ABORT_AFTER_BATCH only (the shim looks these up only then, and a hook without them pays one load of a
// null pointer): on the job's thread, once a call's record was appended and before the real call, or once an NVTX
// step marker was recorded. Counts batches (engine_batches.h); when this call or marker belongs to a batch after the
// one given, stops the rank (its reports written, exit status 87) and never returns.
void trainscope_engine_batch_call(const trainscope::recorder::Record* record);
void trainscope_engine_batch_marker(void);
// The CUDA driver loaded libtrainscope.so as its injection library (CUDA_INJECTION64_PATH) and is initialising: start
// the launch collector (CUPTI) now, if the engine's start did not already (it does when libcuda.so.1 is loaded then).
// Called from InitializeInjection, inside the job's cuInit; at most one start per process.
void trainscope_engine_start_launches(void);
// TRAINSCOPE_WATCH=modules, on the job's thread: a module forward's frame as the Python hooks packed it
// (module_frame_abi.h), whose record `record` was appended as record `index`. Takes the host tensors' statistics and
// enqueues the device tensors' on their streams before it returns. Returns 0, or -1 for a malformed frame (the record
// then gets no frame).
int trainscope_engine_module_frame(const trainscope::recorder::Record* record, uint64_t index, const char* name,
                                   const char* kind, const char* labels, uint64_t labels_len, const int64_t* words,
                                   uint64_t word_count);
// Fork handling: quiesce before fork; in the child, forget every thread, socket and file of the parent.
void trainscope_engine_fork_prepare(void);
void trainscope_engine_fork_parent(void);
void trainscope_engine_fork_child(void);
}
