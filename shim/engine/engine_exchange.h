// The engine's side of the out-of-band exchange: tails this process's flight recorder on a background thread,
// turns new records into fingerprints for the coordinator, hosts the coordinator in global rank 0 when asked to,
// and applies the coordinator's verdicts (log the report; abort or go on).
//
// The job's threads pay nothing for the exchange: they already append every call to the recorder ring, and the
// ring is the lock-free queue this thread reads (a record overwritten before it was read is counted as dropped).
#pragma once

#include <cstdint>
#include <string>

#include "base/flight_record_format.h"
#include "reports/frame_report.h"
#include "shim/config.h"
#include "shim/engine_api.h"

namespace trainscope::engine {

struct ExchangeSetup {
  const Config* config = nullptr;
  recorder::FileHeader* recorder = nullptr;  // the live mapping in this process; nullptr: nothing to tail
  std::string run_dir;
  std::string run_id;
  std::string recorder_path;
  std::string host;
  int32_t pid = 0;
  int32_t launcher_rank = -1;
  int32_t world = -1;
  int32_t local_rank = -1;
  int32_t nccl_version = 0;
  bool forked_child = false;  // a forked child of a process that used NCCL: its parent is the rank in the exchange
};

// Where the coordinator is, derived from the configuration and the launcher's environment.
struct CoordinatorPlan {
  bool enabled = false;
  bool host_here = false;    // this process binds the coordinator (global rank 0 under TRAINSCOPE_COORDINATOR=auto)
  std::string bind_address;  // when host_here: where the ranks reach it (MASTER_ADDR's port + 3)
  std::string fallback_bind_address;  // when MASTER_ADDR is not an address of this host: every interface
  std::string endpoint;               // what every rank connects to
  std::string token;                  // TRAINSCOPE_TOKEN; empty: it comes from the job key (job_key_known)
  std::string why_disabled;           // for the log when !enabled
  bool worth_a_warning = false;       // disabled although the job has several ranks: they will go unchecked
};
CoordinatorPlan plan_coordinator(const Config& config, int32_t launcher_rank, int32_t world, const char* master_addr,
                                 const char* master_port);

// Starts the exchange (never throws; failures are logged and leave the job running without it). Without
// TRAINSCOPE_TOKEN it waits for the job key (job_key_known).
void start_exchange(const ExchangeSetup& setup);
// The job key is known (shim/job_key.h): the exchange starts with the secret derived from it, and reports follow the
// run's files when they moved into the run's own folder.
void job_key_known(const JobKeyArgs& args);
// Normal exit: sends what is left, says goodbye, and (rank 0) keeps the coordinator up briefly for the others.
// `stopping_job`: this rank stops the job on the user's request (see exchange::Goodbye).
void stop_exchange(bool stopping_job = false);
// Forked child: forget the parent's threads and sockets without touching them.
void abandon_exchange();

// Whether the exchange runs in this process (there is a coordinator to tell).
bool exchange_running();

// This rank's first frame holding a non-finite value, for the coordinator's origin report (origin.txt/.json in the
// run directory). `stop_job` (TRAINSCOPE_ON_NONFINITE=abort): ask the coordinator to stop every rank of the job
// once it has given the other ranks a moment to send their own first frames; the verdict that follows makes every
// rank, this one included, exit with kStopExitCode. Never blocks; a no-op when the exchange is not running.
void report_first_nonfinite(const reports::FirstNonfinite& first, uint32_t stack_id, bool stop_job);

// The exit status of a rank stopped because the user asked for it: inf/nan under TRAINSCOPE_ON_NONFINITE=abort,
// TRAINSCOPE_ABORT_AFTER_BATCH.
inline constexpr int kStopExitCode = 87;

// The exit status of a rank stopped by a verdict (TRAINSCOPE_ON_MISMATCH / TRAINSCOPE_ON_DESYNC = abort).
inline constexpr int kVerdictExitCode = 86;

}  // namespace trainscope::engine
