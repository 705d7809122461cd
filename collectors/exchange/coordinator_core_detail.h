// The coordinator core's bookkeeping types, shared by the files its logic is split into (collective matching,
// send/recv pairing, desyncs, departures, inf/nan origin, manifest): private to CoordinatorCore, so kept out of its
// public header; nothing outside collectors/exchange/coordinator_core*.cc includes this.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <unordered_map>
#include <vector>

#include "collectors/exchange/coordinator_core.h"

namespace trainscope::exchange {

using recorder::Op;
using reports::LaggardState;

constexpr size_t kRecentCalls = 8;  // per member: enough to show the earlier ranks' own call in a mismatch report

struct CoordinatorCore::Member {
  int32_t global_rank = -1;
  uint64_t last_seq = 0;  // last collective call number this member reached
  uint16_t last_op = 0;
  uint64_t last_start_ns = 0;
  uint32_t last_stack_id = 0;  // that call's stack and site
  uint64_t last_caller = 0;
  LaggardState ended = LaggardState::kAlive;  // set when the member ended the communicator or its process went
  // Its latest call of any kind here, a send/recv too (numbered per peer and direction), for send/recv desyncs.
  bool has_call = false;
  uint16_t call_op = 0;
  uint64_t call_seq = 0;
  int32_t call_peer = -1;  // a send/recv: the peer
  uint64_t call_start_ns = 0;
  uint32_t call_stack_id = 0;
  std::array<Fingerprint, kRecentCalls> recent{};
  size_t recent_next = 0;
  // Waiting in the communicator's creation (kCommCreating), until any member says it is created.
  bool creating = false;
  uint16_t creating_op = 0;
  uint64_t creating_start_ns = 0;  // the rank's clock
  uint32_t creating_stack_id = 0;
  uint64_t creating_caller = 0;
};

struct CoordinatorCore::Entry {
  Fingerprint reference{};
  bool has_reference = false;
  bool mismatch_done = false;  // reported (or suppressed): later arrivals are not compared again
  uint32_t arrived = 0;
  uint64_t first_arrival_ns = 0;
  std::unique_ptr<reports::MismatchReport> mismatch;  // only for mismatched calls: every member's line
};

// The sends from one rank to another that wait for their receives, or the receives that wait for their sends:
// whichever side is ahead. The oldest is the call its rank is stuck in if the other side never comes.
struct CoordinatorCore::PairQueue {
  struct Pending {
    Fingerprint call;
    uint64_t arrived_ns = 0;  // coordinator time
  };
  std::deque<Pending> pending;
  bool holds_sends = false;
  uint64_t matched_ns = 0;  // coordinator time when a pending call of this pair was last matched
  // About the oldest pending call; they start over when it is matched.
  uint64_t front_seq = 0;
  bool front_is_send = false;
  uint64_t stuck_since_ns = 0;  // its arrival, or the match of the call before it if later: calls of a pair
                                // complete in order, so one posted far ahead waits only from then on
  uint32_t warnings = 0;
  uint64_t next_warning_ns = 0;
  bool certain_reported = false;  // or suppressed while the job was stopping

  void follow_front(uint64_t timeout_ns) {
    const Pending& front = pending.front();
    if (front.call.seq == front_seq && holds_sends == front_is_send) return;
    front_seq = front.call.seq;
    front_is_send = holds_sends;
    stuck_since_ns = std::max(front.arrived_ns, matched_ns);
    warnings = 0;
    next_warning_ns = stuck_since_ns + timeout_ns;
    certain_reported = false;
  }
};

struct CoordinatorCore::Comm {
  uint64_t id = 0;
  int32_t nranks = 0;
  std::vector<Member> members;
  std::deque<Entry> outstanding;  // calls base_seq, base_seq + 1, ...
  uint64_t base_seq = 1;
  // The smallest last call of a member that can never call again (ended the communicator, exited, vanished):
  // any call above it that others reached is a certain desync.
  uint64_t final_floor = UINT64_MAX;
  bool certain_reported = false;
  uint64_t certain_since_ns = 0;  // the desync became certain; reported once the others arrived or after the grace
  uint32_t mismatch_reports = 0;
  bool diverged = false;    // the operation sequence itself split: later calls compare nothing useful
  uint64_t warned_seq = 0;  // the stuck call the timeout warnings are about
  uint32_t warnings = 0;
  uint64_t next_warning_ns = 0;
  std::unordered_map<uint64_t, PairQueue> pairs;  // (sender << 32 | receiver) by communicator rank; never empty
  // Its creation: a member said it is created, or called on it (NCCL's creation returns once every member is in).
  // Until then, members waiting in it whose others never come are a desync like a collective's.
  bool created = false;
  uint64_t creating_since_ns = 0;  // coordinator time of the first member waiting in the creation; 0: none
  bool creation_certain_reported = false;
  uint32_t creation_warnings = 0;
  uint64_t creation_next_warning_ns = 0;
};

struct CoordinatorCore::RankInfo {
  bool has_hello = false;
  Hello hello;  // token cleared
  bool said_goodbye = false;
  bool vanished = false;
  uint64_t dropped_total = 0;
  bool has_last_call = false;
  Fingerprint last_call{};
  std::vector<HeartbeatCall> inside;
  uint64_t last_heard_ns = 0;
  std::unordered_map<uint32_t, CallStack> stacks;
  std::vector<uint64_t> comms;  // communicators this rank is a member of
};

}  // namespace trainscope::exchange
