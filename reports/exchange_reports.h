// The coordinator's reports — mismatch, desync, vanished rank — as text (the design's exact format) and JSON twins,
// and writing them into the run directory. Every stack in them is printed as reports/stack_text.h says: the Python
// frames in traceback form, innermost first, above the native frames.
//
// The coordinator fills these plain structs; nothing here knows about sockets or the coordinator's state, so the
// formats are tested on their own.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/call_stack.h"
#include "base/fingerprint.h"
#include "reports/cuda_launches.h"
#include "reports/report_files.h"

namespace trainscope::reports {

// One rank's call in a mismatch report.
struct CallLine {
  int32_t global_rank = -1;  // -1: the coordinator never learned it (shown with the communicator rank)
  int32_t comm_rank = -1;
  bool present = false;  // false: the rank had not reached the call when the report was made
  exchange::Fingerprint call{};
  exchange::CallStack stack{};  // of the call's site; empty when none was captured
};

struct MismatchReport {
  uint64_t comm_id = 0;
  uint64_t seq = 0;                      // collective: call number on the communicator; send/recv: n-th send a -> b
  uint16_t op = 0;                       // recorder::Op of the first rank's call
  bool point_to_point = false;           // a send/recv pair (calls[0] the send, calls[1] the receive)
  std::vector<std::string> differences;  // what disagrees: "operation", "count", "data type", "reduction op", "root"
  std::vector<CallLine> calls;           // every member, by communicator rank
  uint64_t detected_ns = 0;
};

// Why a member of a communicator has not arrived at a call.
enum class LaggardState : uint8_t {
  kAlive = 0,  // connected and sending heartbeats, just not there (yet)
  kFinalized,  // called ncclCommFinalize on the communicator
  kDestroyed,  // called ncclCommDestroy
  kAborted,    // called ncclCommAbort
  kRevoked,    // called ncclCommRevoke
  kExited,     // said goodbye: the process ended cleanly
  kVanished,   // its connection dropped without a goodbye
  kUnknown,    // never heard from
};
const char* laggard_state_text(LaggardState state);  // "destroyed the communicator", "vanished", ...

struct WaitingRank {
  int32_t global_rank = -1;
  int32_t comm_rank = -1;
  uint64_t seq = 0;  // the call it is in (its latest on the communicator); send/recv: its number for that peer
  uint16_t op = 0;
  uint64_t since_ns = 0;        // CLOCK_REALTIME of the rank, when that call started
  exchange::CallStack stack{};  // of the call it waits in (may be empty)
  uint64_t caller = 0;          // that call's site, shown when no stack was captured; 0 when not known
  // The last launch on each stream and whether it finished, from its flight recorder (launches_read: it was read).
  bool launches_read = false;
  std::vector<recorder::StreamLastLaunch> launches;
};

struct MissingRank {
  int32_t global_rank = -1;
  int32_t comm_rank = -1;
  std::string host;
  int32_t pid = 0;
  bool has_last_call = false;
  uint64_t last_seq = 0;  // its last call on this communicator (a send/recv: its number for that peer)
  uint16_t last_op = 0;
  int32_t last_peer = -1;  // the last call was a send/recv: to / from this communicator rank
  uint64_t last_call_ns = 0;
  exchange::CallStack last_stack{};  // the stack of that last call, when its site's stack is known
  // The last call was read from its flight recorder (its last fingerprints never reached the coordinator: a rank
  // frozen by SIGSTOP or a hang of its own); `last_call_returned` says whether it came back from it.
  bool last_call_from_recorder = false;
  bool last_call_returned = true;
  LaggardState state = LaggardState::kUnknown;
  bool process_gone = false;
  // Its flight recorder is on another host than the coordinator's (that host's name): its last calls there were not
  // read, and the last call above is the last one its fingerprints told. Empty: read where it could be, or unknown.
  std::string flight_recorder_elsewhere;
  // As WaitingRank's: what its GPU streams were doing (a kernel that never finished keeps a rank from arriving).
  bool launches_read = false;
  std::vector<recorder::StreamLastLaunch> launches;
};

// A collective some members reached and others did not, or (point_to_point) a send or receive whose other side has
// not come: the n-th send from `sender` to `receiver` meets the n-th receive on `receiver` from `sender`; the one
// rank in `waiting` made its side, the one in `missing` did not.
struct DesyncReport {
  uint64_t comm_id = 0;
  uint64_t seq = 0;  // the first call some members reached and others did not; send/recv: the send's number n
  uint16_t op = 0;   // that call's operation, as the members that reached it issued it (send/recv: the waiting side's)
  bool point_to_point = false;
  bool creation = false;  // the communicator's creation (`op`: ncclCommInitRank...): some members never joined it
  int32_t sender = -1;    // point_to_point: the pair, by communicator rank
  int32_t receiver = -1;
  bool certain = false;  // a missing member can never arrive (communicator ended, process exited or vanished)
  uint32_t repeat = 1;   // 2, 3, ...: the same stuck call reported again after another timeout
  uint64_t detected_ns = 0;
  uint64_t stuck_since_ns = 0;  // coordinator time when the first member arrived at the call (send/recv: when the
                                // waiting call arrived, or the one before it on the pair was matched if later)
  std::vector<WaitingRank> waiting;
  std::vector<MissingRank> missing;
  std::string note;  // e.g. that a missing rank dropped fingerprints, so the verdict may be wrong
};

struct VanishedReport {
  int32_t global_rank = -1;
  std::string host;
  int32_t pid = 0;
  uint64_t time_ns = 0;
  bool has_last_call = false;
  exchange::Fingerprint last_call{};
  exchange::CallStack last_stack{};  // the stack of the last call, when its site's stack is known
  std::string flight_recorder_path;
  // The recorder is on another host than the coordinator's (another machine, container or mount namespace): the path
  // is that host's, named so nobody looks for it here. Empty: the coordinator's host, or not known.
  std::string flight_recorder_elsewhere;
  // Every rank the coordinator knew on this rank's host vanished together (a node lost, or its link cut): all of
  // them, sorted, this rank among them. Empty: only some of the host's ranks went, or the host held this rank alone.
  std::vector<int32_t> host_ranks_lost;
};

std::string format_mismatch_text(const MismatchReport& report);
nlohmann::json mismatch_json(const MismatchReport& report);
std::string mismatch_base_name(const MismatchReport& report);  // "mismatch-3f2a9c-812"

std::string format_desync_text(const DesyncReport& report);
nlohmann::json desync_json(const DesyncReport& report);
// "desync-3f2a9c-813", "...-813-2" when repeated; a send/recv: "desync-3f2a9c-send-0-1-7" (send #7 from communicator
// rank 0 to communicator rank 1), "...-7-2" when repeated — never the name of a collective's desync; a creation:
// "desync-3f2a9c-creation", "...-creation-2".
std::string desync_base_name(const DesyncReport& report);

std::string format_vanished_text(const VanishedReport& report);
nlohmann::json vanished_json(const VanishedReport& report);
std::string vanished_base_name(const VanishedReport& report);  // "vanished-rank3"

}  // namespace trainscope::reports
