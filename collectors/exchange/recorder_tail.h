// The latest collective a rank's flight recorder holds on one communicator, for the coordinator when that rank went
// silent. Its fingerprints leave it from a background thread every few milliseconds: a rank frozen by SIGSTOP, a
// debugger or a hang of its own keeps the last ones to itself, and the coordinator alone would report a call it had
// long passed. Its recorder, a file the process wrote into as it called, knows better; the coordinator reads it when
// it is on the same host (or a shared file system).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "reports/cuda_launches.h"

namespace trainscope::exchange {

struct RecordedCall {
  uint64_t seq = 0;
  uint16_t op = 0;
  uint64_t start_ns = 0;
  uint32_t site = 0;  // its call site: the stack id the rank's stack definitions use (0: none)
  bool returned = false;
};

// The collective with the highest call number on communicator `comm_id` among the last `max_records` complete records
// of the recorder at `path`. False when the file cannot be read, is not a flight recorder, or holds no such call.
// Never follows a link; reads at most max_records records.
bool latest_recorded_collective(const std::string& path, uint64_t comm_id, RecordedCall* out,
                                uint64_t max_records = 65536);

// The last launch on each stream among the last `max_records` records of the recorder at `path`, with whether it had
// finished (the stream table: finished / not finished as of the engine's last completion check / unknown), for the
// desync report of a rank that waits or did not arrive: a kernel that never finished is why a rank hangs. False when
// the file cannot be read or is not a flight recorder; true with `out` empty when it holds no launch. Never follows a
// link.
bool recorded_last_launches(const std::string& path, std::vector<recorder::StreamLastLaunch>* out,
                            uint64_t max_records = 65536);

}  // namespace trainscope::exchange
