// `trainscope commcheck`'s rendezvous: rank 0 hands its ncclUniqueId to every rank over one small TCP exchange,
// or tells every rank that joined why the check cannot go on (a rank that never came, a rank that cannot take part).
//
// Protocol (text lines, tab-separated fields, at most kMaxLine bytes each):
//   rank r -> rank 0:  "TSCOMMCHECK1 <rank> <world> <local rank> <host> <error, empty when the rank can take part>
//                       <pid>" (the pid may be left out: unknown)
//   rank 0 -> rank r:  "ID <256 hex digits> <rank 0's host-localrank>"
//                      or  "FAIL <what broke> <missing ranks as 0-3,5 or ->"
// A second process that says it is rank 0 finds the port taken; it says hello to the first as rank 0, and both fail
// with "two processes call themselves rank 0: <host-local (pid)>, which holds the rendezvous at ..., and <...>".
// On success the connections stay open for the FailureRelay (commcheck_relay.h).
// Every wait is bounded by the request's deadlines; nothing here blocks without one.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "tools/commcheck_relay.h"

namespace trainscope::tools::commcheck {

inline constexpr std::size_t kUniqueIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES
inline constexpr std::size_t kMaxLine = 4096;
using UniqueId = std::array<unsigned char, kUniqueIdBytes>;
using Clock = std::chrono::steady_clock;

struct RendezvousRequest {
  int rank = 0;
  int world = 1;
  int local_rank = 0;
  std::string host;     // this rank's host name (no tab or newline)
  int pid = 0;          // this process, for the messages of the other ranks (0: not said)
  std::string address;  // rank 0 listens there, the others connect to it
  int port = 0;
  Clock::time_point join_deadline;    // rank 0: stop waiting for the others; others: stop trying to connect
  Clock::time_point answer_deadline;  // others: stop waiting for rank 0's answer (a little after rank 0's deadline)
  std::string own_error;              // non-empty: this rank cannot take part, and every rank is told why
  UniqueId unique_id{};               // rank 0: the id to hand out
};

struct RendezvousResult {
  bool ok = false;
  UniqueId unique_id{};
  std::string error;             // what broke, in words, when !ok
  std::vector<int32_t> missing;  // ranks that never joined (known to rank 0, told to the others)
  std::vector<Link> links;       // when ok: rank 0's connection to every other rank, or this rank's to rank 0
};

RendezvousResult rendezvous(const RendezvousRequest& request);

// Tabs and line ends would break the protocol's fields: they become spaces (and the text is cut at 1024 bytes).
std::string protocol_field(std::string text);
// Sends all of `text` on a non-blocking socket, waiting at most two seconds for room.
bool send_all(int fd, const std::string& text);

// "HOST:PORT" or "[IPv6]:PORT" (port 1-65535). False with a reason otherwise.
bool parse_endpoint(const std::string& text, std::string* host, int* port, std::string* reason);

// A positive number of seconds, optionally suffixed s or m, up to `max_seconds`: "60", "90s", "2m".
bool parse_timeout_seconds(const std::string& text, int max_seconds, int* seconds);

}  // namespace trainscope::tools::commcheck
