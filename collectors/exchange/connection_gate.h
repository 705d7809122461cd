// What peers that have not proved they are the job's ranks may hold of the coordinator's process. The coordinator
// lives in rank 0, and every connection ZeroMQ accepts costs that process a file descriptor: anyone who can reach the
// port could otherwise hold idle connections until the job's own open() of a checkpoint fails with EMFILE.
//
// A connection is unauthenticated from its accept until a valid hello (or a message of a rank that said one) comes
// on it. The gate decides, for each accepted connection, whether it may stay:
//   - never when fewer than max(64, limit / 4) descriptors would be left free for the job: it is refused;
//   - at most max(max_unauthenticated, ranks) unauthenticated connections at once, and never more than an eighth of
//     the descriptor limit;
//   - once the job's size is known, at most ranks + max(16, ranks / 4) connections in all (the margin: ranks that
//     reconnect while their old connection has not been seen to close);
// Over either of the last two, the oldest unauthenticated connection makes way (a rank's handshake and hello take
// a millisecond, an idle outsider's connection waits: refusing the newest would let a few idle connections keep
// every rank out); with none to make way, the new one is refused. An unauthenticated connection older than the hello
// deadline is closed. A connection refused, made way or timed out leaves the gate at once (the caller closes it).
// What no gate can bound: ZeroMQ accepts before the gate hears of it, so a burst of connects (up to the listener's
// accept backlog, ZeroMQ's 100) holds that many descriptors for as long as the server takes to read their events.
//
// No sockets, no clock: the server passes the descriptors, the time and the process's descriptor counts, so every
// rule is tested deterministically (tests/unit/connection_gate_test.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace trainscope::exchange {

struct ConnectionGateOptions {
  uint64_t hello_deadline_ns = 5'000'000'000ull;  // accept to valid hello
  size_t max_unauthenticated = 64;                // or the job's rank count, when larger
  size_t min_descriptor_reserve = 64;             // descriptors always left to the job: max(this, limit / 4)
};

enum class Refusal : uint8_t {
  kNone,
  kTooManyUnauthenticated,  // the cap on connections that have not said hello
  kMoreThanTheRanks,        // the job's rank count plus the margin
  kDescriptorReserve,       // the job's last descriptors
};
const char* refusal_reason(Refusal refusal);

struct ConnectionGateStats {
  uint64_t accepted = 0;
  uint64_t refused_unauthenticated = 0;  // closed over the cap on those at once (the oldest, or the new one)
  uint64_t refused_over_ranks = 0;       // closed over the rank count plus the margin (likewise)
  uint64_t refused_descriptors = 0;      // refused: the job's last descriptors
  uint64_t hello_timeouts = 0;           // closed: no valid hello within the deadline
  uint64_t connections = 0;              // admitted and not seen to close, now
  uint64_t unauthenticated = 0;          // of those, the ones that have not said a valid hello
  uint64_t refused() const { return refused_unauthenticated + refused_over_ranks + refused_descriptors; }
};

// The process's descriptors when a connection was accepted: `open` counts the new one.
struct DescriptorUse {
  size_t open = 0;
  size_t limit = 0;  // RLIMIT_NOFILE's soft limit
};

class ConnectionGate {
 public:
  explicit ConnectionGate(ConnectionGateOptions options) : options_(options) {}

  struct Connection {
    int fd = -1;
    uint64_t identity = 0;  // tells this socket from a later one on the same number: its inode
  };
  struct Admission {
    Refusal refusal = Refusal::kNone;   // the new connection is refused (to be closed)
    Refusal made_way = Refusal::kNone;  // or admitted, and `oldest` (to be closed) made way for it, for this reason
    Connection oldest;
  };
  // A connection accepted on `fd`; `ranks`: the job's rank count, 0 while unknown.
  Admission on_accepted(Connection connection, uint64_t now_ns, size_t ranks, DescriptorUse descriptors);
  // A valid hello, or a message of a rank that said one, came on `fd`. False when the gate does not know `fd`.
  bool on_authenticated(int fd);
  void on_closed(int fd);
  bool knows(int fd) const { return connections_.contains(fd); }
  bool is_authenticated(int fd) const {
    const auto it = connections_.find(fd);
    return it != connections_.end() && it->second.authenticated;
  }

  // Unauthenticated connections past the hello deadline (to be closed).
  std::vector<Connection> take_expired(uint64_t now_ns);

  // The limits in force for a job of `ranks` ranks (0: unknown) and this descriptor limit.
  size_t unauthenticated_cap(size_t ranks, size_t limit) const;
  static size_t connection_bound(size_t ranks);  // 0: unbounded (rank count unknown)
  size_t descriptor_reserve(size_t limit) const;

  ConnectionGateStats stats() const;

 private:
  struct Held {
    uint64_t identity = 0;
    uint64_t deadline_ns = 0;
    bool authenticated = false;
  };
  // Removes and returns the unauthenticated connection with the earliest deadline; false when there is none.
  bool take_oldest_unauthenticated(Connection* oldest);
  ConnectionGateOptions options_;
  std::unordered_map<int, Held> connections_;
  size_t unauthenticated_ = 0;
  ConnectionGateStats stats_;
};

}  // namespace trainscope::exchange
