// Whether NCCL is loaded in a process whose NCCL calls we never saw, and the note such a process leaves behind.
//
// A job whose NCCL is linked statically (into libtorch_cuda.so, say) calls no function we can interpose: its run
// would otherwise look clean. So at exit, a process that registered no communicator looks for a loaded NCCL; if it
// finds one, it says so in its log and leaves <stem>.no-nccl-calls.json in the run directory, which the run
// summary reads (analysis/run_summary.h). Freestanding: libc only.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/run_files.h"

namespace trainscope::shim {

// The path of the first loaded NCCL (an object that exports ncclCommInitRank, or whose file name starts with
// "libnccl"), other than this library. False when there is none.
bool find_loaded_nccl(char* path, size_t path_len);

// Whether the CUDA driver (libcuda.so.1) is loaded: NCCL, linked statically or not, runs only on a GPU and so only
// after the driver is loaded; a process without it (a CPU job: torch with gloo, say) ran no NCCL collective at all.
// Found by the file name or by a function only the driver defines. (The engine loads the driver itself only for
// device buffers, which imply the job had loaded it.)
bool cuda_driver_loaded();

struct NoCallsNote {
  const char* run_dir;
  const char* stem;  // "rank-R.pid-P" or "pid-P"
  int32_t pid;
  int32_t rank;  // launcher rank, -1 when none
  const char* host;
  const char* exe;
  const char* nccl_path;
  uint64_t calls;    // NCCL calls recorded by this process (none of them made a communicator)
  bool cuda_driver;  // cuda_driver_loaded() at exit
};

// The file name of the note ("<stem>.no-nccl-calls.json"); the summary finds notes by this suffix.
using run_files::kNoCallsSuffix;

// Writes the note as one JSON object (files::write_new_file: mode 0600, never following a link nor replacing a file).
// Returns 0, an errno value (EEXIST: the name is taken) or a files:: refusal.
int write_no_calls_note(const NoCallsNote& note);

}  // namespace trainscope::shim
