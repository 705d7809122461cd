// The frame thread: turns watched NCCL calls and watched kernel launches into frames, counts batches, and writes the
// DebugUnderflowOverflow family of reports (inf/nan detection, persistent overflow, near overflow, trace batches, the
// stops).
//
// Every few milliseconds it runs the frame feed (engine_frame_feed.h) over this process's flight recorder: batches
// from the collectives, NVTX step markers and (auto) optimizer kernels, frames from the statistics the job's threads
// took or enqueued (engine_watch.h for collectives, engine_kernel_frames.h for launches). Reports go to the run
// directory as text and JSON; the main rank also logs them. It runs when TRAINSCOPE_WATCH watches anything.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/flight_record_format.h"
#include "shim/config.h"

namespace trainscope::engine {

struct FramesSetup {
  const Config* config = nullptr;
  recorder::FileHeader* recorder = nullptr;  // nullptr: nothing to watch
  std::string run_dir;
};

// Starts the frame thread (never throws; a failure is logged and leaves the job without frames).
void start_frames(const FramesSetup& setup);
// Normal exit: takes what is complete, then stops.
void stop_frames();
// The process ends now (_exit on a verdict or a stop): the frame thread leaves the idle class where it may, so that
// the process is not kept waiting for an idle core to end it (base/thread_class.h).
void frames_before_process_end();
// Forked child: forget the parent's thread.
// fork(): prepare holds the frame thread between passes until parent (or the child's abandon_frames) lets go.
void frames_fork_prepare();
void frames_fork_parent();
void abandon_frames();
// The run directory moved (job key): reports written from now on go to `run_dir`.
void set_frames_run_dir(const std::string& run_dir);

// TRAINSCOPE_ABORT_AFTER_BATCH (engine_batches.h): batch `batch` has ended, and the calling thread (the job's, in the
// hook of a call after it) stops the rank. The frames of the calls recorded before are taken first, so their traces
// and reports are on disk (statistics still computed on a device are waited for up to 2 s), then
// stop-rank<R>.txt and .json are written, and the process exits with kStopExitCode. Never returns; another thread
// that stops meanwhile waits for that exit.
[[noreturn]] void stop_after_batch(uint64_t batch);

// TRAINSCOPE_STEP_MARKER=nvtx:REGEX: whether an NVTX range name matches (cached per distinct name; thread-safe).
// False before start_frames and under any other marker.
bool step_marker_matches(const char* name);

}  // namespace trainscope::engine
