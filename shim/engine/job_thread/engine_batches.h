// TRAINSCOPE_ABORT_AFTER_BATCH on the job's thread: the batch boundary is checked in the hook of each NCCL call (and
// at each NVTX step marker), so a rank stops before any call of batch N+1 returns, however fast its steps are.
//
// The shim calls in only when the variable is set (engine_api.h: trainscope_engine_batch_call/_marker); without
// it a hook pays one load of a null function pointer. With it, each collective and send/recv takes one uncontended
// lock and feeds the gate's own BatchTracker: under auto an O(max_period) update (at most 4096 comparisons), one
// comparison under the other markers. The frame thread's tracker counts the same calls, later, for the frames.
//
// Where the rank stops (N = TRAINSCOPE_ABORT_AFTER_BATCH):
//   every:K, collective:REGEX  at the first call of batch N+1, once its record is appended, before the real call
//   nvtx:REGEX                 at the range push that starts batch N+1, before any call of that batch
//   auto, module frames        at the first module forward of batch N+1 (TRAINSCOPE_WATCH=modules: a root module's
//                              forward ends a batch; from the first module frame on, calls and launches do not count)
//   auto, optimizer kernels    at the first launch or call after the optimizer step of batch N, once it returned
//   auto                       once the period is learnt, at the first call of batch N+1 as above; when learning it
//                              (the call that completes `confirmations` cycles, 3 by default) shows that batch N
//                              has already ended, at that call: the calls of later batches made before it returned
//                              (until then no call's batch was known); while a lost period is relearnt, no stop
// Calls made at once on several threads are counted in the order they reach the check (the recorder's order may
// differ by that race). The stop itself is the engine's (engine_frames.h's stop_after_batch: reports first, then exit
// 87), handed in at start: this folder, the job's side, includes nothing of the engine's own threads.
#pragma once

#include "base/flight_record_format.h"
#include "shim/config.h"

namespace trainscope::engine {

// Stops the rank after batch `batch`; never returns.
using StopAfterBatch = void (*)(uint64_t batch);

// Arms the gate when config.abort_after_batch_set (never throws; a failure is logged and leaves no gate); `stop` is
// called, on the job's thread, when a call or a marker belongs to a batch after N.
void start_batch_gate(const Config& config, StopAfterBatch stop);
// The job's thread: a call was recorded as `record` (any op: only collectives and send/recv on a communicator, and
// module forwards, count) / an NVTX step marker was recorded. Stops the rank, never returning, when it belongs to a
// batch after N.
void batch_gate_call(const recorder::Record& record);
void batch_gate_marker();
// The job's thread: a kernel launch of `function_handle` (0: a graph launch) returned; under auto, once optimizer
// kernels are known (engine_kernel_frames.h), the launch after an optimizer step starts the next batch, and the rank
// stops there when that batch is after N (the launch itself has been made). Launches into a capturing stream are
// not work of this moment: the caller passes none. The CUPTI adapter calls it after the collector recorded the launch.
void batch_gate_launch(uint64_t function_handle);
// Forked child: forget the parent's gate (its lock may have been held at the fork).
void abandon_batch_gate();

}  // namespace trainscope::engine
