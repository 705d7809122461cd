// The engine's side of the out-of-band exchange: tails this process's flight recorder on a background thread,
// turns new records into fingerprints for the coordinator, hosts the coordinator in global rank 0 when asked to,
// and applies the coordinator's verdicts (log the report; abort or go on).
//
// The job's threads pay nothing for the exchange: they already append every call to the recorder ring, and the
// ring is the lock-free queue this thread reads (a record overwritten before it was read is counted as dropped).
#pragma once

#include <cstdint>
#include <string>

#include "reports/flight_record_format.h"
#include "shim/config.h"

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
};

// Where the coordinator is, derived from the configuration and the launcher's environment.
struct CoordinatorPlan {
  bool enabled = false;
  bool host_here = false;    // this process binds the coordinator (global rank 0 under TRAINSCOPE_COORDINATOR=auto)
  std::string bind_address;  // when host_here
  std::string endpoint;      // what every rank connects to
  std::string token;
  std::string why_disabled;  // for the log when !enabled
};
CoordinatorPlan plan_coordinator(const Config& config, const std::string& run_id, int32_t launcher_rank, int32_t world,
                                 const char* master_addr, const char* master_port);

// Starts the exchange (never throws; failures are logged and leave the job running without it).
void start_exchange(const ExchangeSetup& setup);
// Normal exit: sends what is left, says goodbye, and (rank 0) keeps the coordinator up briefly for the others.
void stop_exchange();
// Forked child: forget the parent's threads and sockets without touching them.
void abandon_exchange();

// The exit status of a rank stopped by a verdict (TRAINSCOPE_ON_MISMATCH / TRAINSCOPE_ON_DESYNC = abort).
inline constexpr int kVerdictExitCode = 86;

}  // namespace trainscope::engine
