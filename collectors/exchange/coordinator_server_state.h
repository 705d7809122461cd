// The coordinator server's state, shared by the server (coordinator_server.cc: binds the sockets, starts and stops
// the thread) and its thread's loop (coordinator_server_loop.cc): private to CoordinatorServer; nothing outside
// those two files includes this.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <zmq.hpp>

#include "collectors/exchange/accepted_sockets.h"
#include "collectors/exchange/connection_gate.h"
#include "collectors/exchange/coordinator_core.h"
#include "collectors/exchange/coordinator_server.h"

namespace trainscope::exchange {

struct CoordinatorServer::State {
  zmq::context_t context{1};
  zmq::socket_t router{context, zmq::socket_type::router};
  zmq::socket_t monitor{context, zmq::socket_type::pair};
  CoordinatorCore core;
  ConnectionGate gate;
  std::unique_ptr<AcceptedSockets> accepted_sockets;
  size_t open_descriptors = 0;  // counted at descriptors_counted_ns, plus the accepts since (never less)
  size_t accepted_since_count = 0;
  uint64_t descriptors_counted_ns = 0;
  uint64_t turned_away_logged = 0;  // refusals and hello timeouts, as of the last log line about them
  uint64_t next_refusal_summary_ns = 0;
  struct Peer {
    int32_t rank = -1;
    bool said_goodbye = false;
  };
  std::unordered_map<std::string, Peer> peers;  // by routing id
  std::unordered_map<int, int32_t> rank_by_fd;  // connection -> rank, for disconnect events
  std::unordered_map<int32_t, uint64_t> last_message_ns;
  std::unordered_map<int32_t, std::pair<uint64_t, uint64_t>> dropped_connections;  // rank -> (at, report after)
  std::set<std::string> logged_warnings;
  std::vector<std::vector<uint8_t>> abort_verdicts;  // replayed to ranks that say hello after they were sent
  uint64_t next_abort_resend_ns = 0;                 // and sent again to every rank still there, until it goes
  uint64_t origin_generation = 0;                    // of the firsts in origin.txt / origin.json now
  uint64_t origin_failed_generation = 0;             // the last one that could not be written (logged once)
  size_t manifest_hellos = 0;
  uint64_t manifest_written_ns = 0;
  bool manifest_failed = false;  // said once: a manifest that cannot be written must not flood the log
  uint64_t malformed_logged = 0;

  State(const CoordinatorOptions& options, const ConnectionGateOptions& gate_options)
      : core(options), gate(gate_options) {}
};

}  // namespace trainscope::exchange
