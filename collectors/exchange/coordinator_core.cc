// The coordinator's comparison, progress tracking and verdict logic (see coordinator_core.h).
#include "collectors/exchange/coordinator_core.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>

namespace trainscope::exchange {

using recorder::Op;
using reports::LaggardState;

namespace {

constexpr size_t kRecentCalls = 8;        // per member: enough to show the earlier ranks' own call in a mismatch report
constexpr int32_t kNumBuiltinRedOps = 5;  // ncclNumOps: ids from ncclRedOpCreatePreMulSum start here

// ncclBcast is ncclBroadcast in place: a rank may use either and still meet the others.
Op canonical(Op op) { return op == Op::kBcast ? Op::kBroadcast : op; }

bool reduces(Op op) { return op == Op::kAllReduce || op == Op::kReduce || op == Op::kReduceScatter; }
bool rooted(Op op) {
  return op == Op::kReduce || op == Op::kBroadcast || op == Op::kBcast || op == Op::kGather || op == Op::kScatter;
}

// What two members' fingerprints of the same collective call disagree on. The count is compared as passed, which is
// each operation's own rule: all-reduce/broadcast/reduce the buffer count, all-gather and gather the send count,
// reduce-scatter and scatter the receive count, all-to-all the per-peer count — NCCL needs each equal everywhere.
// A reduction op created with ncclRedOpCreatePreMulSum has a per-communicator handle whose value may differ by
// rank; only that both are such ops is compared.
std::vector<std::string> collective_differences(const Fingerprint& a, const Fingerprint& b) {
  std::vector<std::string> differences;
  const Op op_a = canonical(static_cast<Op>(a.op));
  const Op op_b = canonical(static_cast<Op>(b.op));
  if (op_a != op_b) {
    differences.push_back("operation");
    return differences;  // the rest means nothing across different operations
  }
  if (a.count != b.count) differences.push_back("count");
  if (a.dtype != b.dtype) differences.push_back("data type");
  if (reduces(op_a)) {
    const bool dynamic_a = a.redop >= kNumBuiltinRedOps;
    const bool dynamic_b = b.redop >= kNumBuiltinRedOps;
    if (dynamic_a != dynamic_b || (!dynamic_a && a.redop != b.redop)) differences.push_back("reduction op");
  }
  if (rooted(op_a) && a.peer != b.peer) differences.push_back("root");
  return differences;
}

LaggardState state_of_end(Op op) {
  switch (op) {
    case Op::kCommFinalize:
      return LaggardState::kFinalized;
    case Op::kCommDestroy:
      return LaggardState::kDestroyed;
    case Op::kCommAbort:
      return LaggardState::kAborted;
    case Op::kCommRevoke:
      return LaggardState::kRevoked;
    default:
      return LaggardState::kDestroyed;
  }
}

// Groups ranks by a string property: value -> ranks, in rank order.
std::string describe_groups(const std::map<std::string, std::vector<int32_t>>& groups) {
  std::string text;
  for (const auto& [value, ranks] : groups) {
    if (!text.empty()) text += "; ";
    text += "'" + value + "' on rank" + (ranks.size() > 1 ? "s " : " ") + rank_ranges(ranks);
  }
  return text;
}

std::string gib(uint64_t bytes) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.1f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return buffer;
}

// The wire's values are the report's (the wire layer does not include the reports).
static_assert(static_cast<uint8_t>(NonfiniteWhere::kInput) == static_cast<uint8_t>(reports::NonfiniteWhere::kInput));
static_assert(static_cast<uint8_t>(NonfiniteWhere::kOutput) == static_cast<uint8_t>(reports::NonfiniteWhere::kOutput));
static_assert(static_cast<uint8_t>(NonfiniteKind::kInf) == static_cast<uint8_t>(reports::NonfiniteKind::kInf));
static_assert(static_cast<uint8_t>(NonfiniteKind::kNan) == static_cast<uint8_t>(reports::NonfiniteKind::kNan));

reports::FirstNonfinite first_of(const NonfiniteMessage& m) {
  reports::FirstNonfinite first;
  first.rank = m.rank;
  first.batch_number = m.batch_number;
  first.comm_id = m.comm_id;
  first.call_number = m.call_number;
  first.op = m.op;
  first.where = m.where == NonfiniteWhere::kInput ? reports::NonfiniteWhere::kInput : reports::NonfiniteWhere::kOutput;
  first.kind = m.kind == NonfiniteKind::kNan ? reports::NonfiniteKind::kNan : reports::NonfiniteKind::kInf;
  first.comm_rank = m.comm_rank;
  first.peer = m.peer;
  return first;
}

}  // namespace

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

CoordinatorCore::CoordinatorCore(CoordinatorOptions options) : options_(options) {
  if (options_.max_outstanding_calls == 0) options_.max_outstanding_calls = 1;
}
CoordinatorCore::~CoordinatorCore() = default;

CoordinatorCore::RankInfo& CoordinatorCore::rank_info(int32_t rank) {
  auto& slot = ranks_[rank];
  if (!slot) slot = std::make_unique<RankInfo>();
  return *slot;
}

void CoordinatorCore::on_hello(const Hello& hello, uint64_t now_ns) {
  RankInfo& info = rank_info(hello.global_rank);
  info.has_hello = true;
  info.hello = hello;
  info.hello.token.clear();
  info.vanished = false;  // a rank that comes back is followed again
  info.said_goodbye = false;
  info.last_heard_ns = now_ns;
}

CoordinatorCore::Comm* CoordinatorCore::comm_for(const Fingerprint& f, int32_t global_rank) {
  if (f.comm_id == 0 || f.nranks < 1 || f.nranks > options_.max_comm_ranks || f.comm_rank < 0 ||
      f.comm_rank >= f.nranks) {
    ++stats_.invalid_fingerprints;
    return nullptr;
  }
  auto it = comms_.find(f.comm_id);
  if (it == comms_.end()) {
    if (comms_.size() >= options_.max_comms) {
      ++stats_.untracked_comms;
      return nullptr;
    }
    auto comm = std::make_unique<Comm>();
    comm->id = f.comm_id;
    comm->nranks = f.nranks;
    comm->members.resize(static_cast<size_t>(f.nranks));
    it = comms_.emplace(f.comm_id, std::move(comm)).first;
  }
  Comm& comm = *it->second;
  if (comm.nranks != f.nranks) {
    ++stats_.invalid_fingerprints;
    return nullptr;
  }
  Member& member = comm.members[static_cast<size_t>(f.comm_rank)];
  if (member.global_rank < 0) {
    member.global_rank = global_rank;
    rank_info(global_rank).comms.push_back(comm.id);
  } else if (member.global_rank != global_rank) {
    ++stats_.invalid_fingerprints;  // two processes claim the same seat
    return nullptr;
  }
  return &comm;
}

void CoordinatorCore::on_fingerprints(int32_t rank, std::span<const Fingerprint> fingerprints, uint64_t dropped_total,
                                      uint64_t now_ns) {
  RankInfo& info = rank_info(rank);
  info.last_heard_ns = now_ns;
  info.dropped_total = std::max(info.dropped_total, dropped_total);
  Comm* cached = nullptr;  // consecutive fingerprints are mostly on one communicator
  for (const Fingerprint& f : fingerprints) {
    Comm* comm = nullptr;
    if (cached != nullptr && cached->id == f.comm_id && f.comm_rank >= 0 && f.comm_rank < cached->nranks &&
        f.nranks == cached->nranks && cached->members[static_cast<size_t>(f.comm_rank)].global_rank == rank) {
      comm = cached;
    } else {
      comm = comm_for(f, rank);
      if (comm == nullptr) continue;
      cached = comm;
    }
    ++stats_.fingerprints;
    const auto op = static_cast<Op>(f.op);
    switch (static_cast<EventKind>(f.kind)) {
      case EventKind::kCall: {
        comm->created = true;
        info.has_last_call = true;
        info.last_call = f;
        const bool point_to_point = recorder::is_point_to_point(op);
        if (point_to_point || recorder::is_collective(op)) {
          Member& member = comm->members[static_cast<size_t>(f.comm_rank)];
          member.has_call = true;
          member.call_op = f.op;
          member.call_seq = f.seq;
          member.call_peer = point_to_point ? f.peer : -1;
          member.call_start_ns = f.start_ns;
          member.call_stack_id = f.stack_id;
        }
        if (point_to_point) {
          on_point_to_point(*comm, f, now_ns);
        } else if (recorder::is_collective(op)) {
          on_collective(*comm, f, now_ns);
        }
        break;
      }
      case EventKind::kCommEnded:
        on_comm_ended(*comm, f, now_ns);
        break;
      case EventKind::kCommCreating: {
        Member& member = comm->members[static_cast<size_t>(f.comm_rank)];
        member.creating = true;
        member.creating_op = f.op;
        member.creating_start_ns = f.start_ns;
        member.creating_stack_id = f.stack_id;
        member.creating_caller = f.caller;
        if (comm->creating_since_ns == 0) comm->creating_since_ns = now_ns;
        break;
      }
      case EventKind::kCommCreated:
        comm->created = true;  // membership was recorded by comm_for
        break;
      case EventKind::kReturned:
        // A creation that returned waits for nobody: it failed (its members are NCCL's to tell), or it succeeded and
        // the communicator's entry says so too.
        if (recorder::is_creation_from_unique_ids(op)) {
          comm->members[static_cast<size_t>(f.comm_rank)].creating = false;
          if (f.result == 0) comm->created = true;
        }
        break;
    }
  }
}

void CoordinatorCore::on_collective(Comm& comm, const Fingerprint& f, uint64_t now_ns) {
  Member& member = comm.members[static_cast<size_t>(f.comm_rank)];
  if (f.seq == 0 || f.seq <= member.last_seq) {
    ++stats_.out_of_order;
    return;
  }
  // Make room: a window that would grow past its bound loses its oldest calls (counted).
  while (f.seq - comm.base_seq + 1 > options_.max_outstanding_calls) {
    if (comm.outstanding.empty()) {
      stats_.untracked_calls += f.seq - options_.max_outstanding_calls + 1 - comm.base_seq;
      comm.base_seq = f.seq - options_.max_outstanding_calls + 1;
      break;
    }
    drop_front(comm, now_ns);
  }
  while (comm.base_seq + comm.outstanding.size() <= f.seq) {
    comm.outstanding.emplace_back();
    comm.outstanding.back().first_arrival_ns = now_ns;
  }
  // This member passed every call between its last one and this one: their fingerprints were lost on the way
  // (its queue was full, or the coordinator was not reachable). Count them as arrived, without comparing.
  for (uint64_t s = std::max(member.last_seq + 1, comm.base_seq); s < f.seq; ++s) {
    ++comm.outstanding[s - comm.base_seq].arrived;
  }
  Entry& entry = comm.outstanding[f.seq - comm.base_seq];
  if (!entry.has_reference) {
    entry.reference = f;
    entry.has_reference = true;
  } else if (entry.mismatch) {
    reports::CallLine& line = entry.mismatch->calls[static_cast<size_t>(f.comm_rank)];
    line.present = true;
    line.call = f;
  } else if (!entry.mismatch_done) {
    std::vector<std::string> differences = collective_differences(entry.reference, f);
    if (!differences.empty()) start_mismatch(comm, entry, f.seq, std::move(differences), now_ns);
    if (entry.mismatch) {
      reports::CallLine& line = entry.mismatch->calls[static_cast<size_t>(f.comm_rank)];
      line.present = true;
      line.call = f;
    }
  }
  ++entry.arrived;
  member.last_seq = f.seq;
  member.last_op = f.op;
  member.last_start_ns = f.start_ns;
  member.last_stack_id = f.stack_id;
  member.last_caller = f.caller;
  member.recent[member.recent_next] = f;
  member.recent_next = (member.recent_next + 1) % kRecentCalls;
  if (f.seq > comm.final_floor && !comm.certain_reported) check_certain_desync(comm, now_ns);
  complete_front(comm, now_ns);
}

void CoordinatorCore::start_mismatch(Comm& comm, Entry& entry, uint64_t seq, std::vector<std::string> differences,
                                     uint64_t now_ns) {
  entry.mismatch_done = true;
  if (comm.diverged || comm.mismatch_reports >= options_.max_mismatch_reports_per_comm) {
    ++stats_.suppressed_mismatches;
    return;
  }
  ++comm.mismatch_reports;
  // Once the operations themselves differ, every later call on this communicator is off by the same step.
  if (std::find(differences.begin(), differences.end(), "operation") != differences.end()) comm.diverged = true;
  auto report = std::make_unique<reports::MismatchReport>();
  report->comm_id = comm.id;
  report->seq = seq;
  report->op = entry.reference.op;
  report->differences = std::move(differences);
  report->detected_ns = now_ns;
  report->calls.resize(comm.members.size());
  for (size_t r = 0; r < comm.members.size(); ++r) {
    const Member& member = comm.members[r];
    reports::CallLine& line = report->calls[r];
    line.comm_rank = static_cast<int32_t>(r);
    line.global_rank = member.global_rank;
    if (member.last_seq < seq) continue;
    // Members already past this call agreed with the reference; their own fingerprint (for the stack) is in
    // their recent history unless they have run far ahead.
    line.present = true;
    line.call = entry.reference;
    line.call.comm_rank = static_cast<int32_t>(r);
    line.call.stack_id = 0;
    line.call.caller = 0;
    for (const Fingerprint& recent : member.recent) {
      if (recent.seq == seq && recent.kind == static_cast<uint8_t>(EventKind::kCall)) line.call = recent;
    }
  }
  entry.mismatch = std::move(report);
  mismatches_waiting_.emplace_back(comm.id, seq);
}

void CoordinatorCore::emit_mismatch(Comm& comm, Entry& entry) {
  if (!entry.mismatch) return;
  reports::MismatchReport report = std::move(*entry.mismatch);
  entry.mismatch.reset();
  for (size_t r = 0; r < report.calls.size(); ++r) {
    reports::CallLine& line = report.calls[r];
    // A member first seen after the mismatch started was not known by its global rank then.
    if (line.global_rank < 0 && r < comm.members.size()) line.global_rank = comm.members[r].global_rank;
    if (line.present) line.stack = stack_of(line.global_rank, line.call.stack_id);
  }
  const uint64_t seq = report.seq;
  emit_verdict(VerdictKind::kMismatch, options_.on_mismatch, comm.id, seq, std::move(report));
}

void CoordinatorCore::complete_front(Comm& comm, uint64_t now_ns) {
  (void)now_ns;
  while (!comm.outstanding.empty() && comm.outstanding.front().arrived >= static_cast<uint32_t>(comm.nranks)) {
    emit_mismatch(comm, comm.outstanding.front());
    comm.outstanding.pop_front();
    ++comm.base_seq;
  }
}

void CoordinatorCore::drop_front(Comm& comm, uint64_t now_ns) {
  (void)now_ns;
  emit_mismatch(comm, comm.outstanding.front());
  comm.outstanding.pop_front();
  ++comm.base_seq;
  ++stats_.untracked_calls;
}

void CoordinatorCore::on_point_to_point(Comm& comm, const Fingerprint& f, uint64_t now_ns) {
  if (f.peer < 0 || f.peer >= comm.nranks || f.seq == 0) {
    ++stats_.invalid_fingerprints;
    return;
  }
  const bool is_send = static_cast<Op>(f.op) == Op::kSend;
  const auto sender = static_cast<uint32_t>(is_send ? f.comm_rank : f.peer);
  const auto receiver = static_cast<uint32_t>(is_send ? f.peer : f.comm_rank);
  const uint64_t key = (uint64_t{sender} << 32) | receiver;
  PairQueue& queue = comm.pairs[key];
  if (!queue.pending.empty() && queue.holds_sends != is_send) {
    // The other side is ahead: the n-th send from a to b meets the n-th receive on b from a.
    while (!queue.pending.empty() && queue.pending.front().call.seq < f.seq) {
      queue.pending.pop_front();
      ++stats_.lost_counterparts;
    }
    if (!queue.pending.empty()) {
      if (queue.pending.front().call.seq > f.seq) {
        ++stats_.lost_counterparts;
        return;
      }
      const Fingerprint other = queue.pending.front().call;
      queue.pending.pop_front();
      queue.matched_ns = now_ns;
      if (queue.pending.empty()) comm.pairs.erase(key);
      const Fingerprint& send = is_send ? f : other;
      const Fingerprint& recv = is_send ? other : f;
      std::vector<std::string> differences;
      if (send.count != recv.count) differences.push_back("count");
      if (send.dtype != recv.dtype) differences.push_back("data type");
      if (differences.empty()) return;
      if (comm.mismatch_reports >= options_.max_mismatch_reports_per_comm) {
        ++stats_.suppressed_mismatches;
        return;
      }
      ++comm.mismatch_reports;
      reports::MismatchReport report;
      report.comm_id = comm.id;
      report.seq = f.seq;
      report.op = send.op;
      report.point_to_point = true;
      report.differences = std::move(differences);
      report.detected_ns = now_ns;
      for (const Fingerprint* side : {&send, &recv}) {
        reports::CallLine line;
        line.comm_rank = side->comm_rank;
        line.global_rank = comm.members[static_cast<size_t>(side->comm_rank)].global_rank;
        line.present = true;
        line.call = *side;
        line.stack = stack_of(line.global_rank, side->stack_id);
        report.calls.push_back(std::move(line));
      }
      emit_verdict(VerdictKind::kMismatch, options_.on_mismatch, comm.id, f.seq, std::move(report));
      return;
    }
  }
  if (queue.pending.size() >= options_.max_pending_point_to_point) {
    ++stats_.untracked_point_to_point;
    if (queue.pending.empty()) comm.pairs.erase(key);  // a bound of 0 tracks nothing
    return;
  }
  queue.holds_sends = is_send;
  queue.pending.push_back({f, now_ns});
  // Its peer may have left already (its end, or its goodbye, came before this rank's call).
  check_certain_pair(comm, queue, now_ns);
}

void CoordinatorCore::on_comm_ended(Comm& comm, const Fingerprint& f, uint64_t now_ns) {
  Member& member = comm.members[static_cast<size_t>(f.comm_rank)];
  member.ended = state_of_end(static_cast<Op>(f.op));
  comm.final_floor = std::min(comm.final_floor, member.last_seq);
  check_certain_desync(comm, now_ns);
  check_certain_point_to_point(comm, f.comm_rank, now_ns);
}

void CoordinatorCore::member_gone(int32_t rank, uint64_t now_ns) {
  RankInfo& info = rank_info(rank);
  const LaggardState state = info.vanished ? LaggardState::kVanished : LaggardState::kExited;
  for (uint64_t id : info.comms) {
    auto it = comms_.find(id);
    if (it == comms_.end()) continue;
    Comm& comm = *it->second;
    int32_t seat = -1;
    for (size_t r = 0; r < comm.members.size(); ++r) {
      Member& member = comm.members[r];
      if (member.global_rank != rank) continue;
      // A communicator it ended stays "destroyed" in reports: that is the more precise reason.
      if (member.ended == LaggardState::kAlive) member.ended = state;
      comm.final_floor = std::min(comm.final_floor, member.last_seq);
      seat = static_cast<int32_t>(r);
    }
    check_certain_desync(comm, now_ns);
    if (seat >= 0) check_certain_point_to_point(comm, seat, now_ns);
  }
}

void CoordinatorCore::emit_verdict(VerdictKind kind, VerdictAction action, uint64_t comm_id, uint64_t seq,
                                   decltype(CoreVerdict::report) report) {
  CoreVerdict verdict;
  verdict.kind = kind;
  verdict.action = action;
  verdict.comm_id = comm_id;
  verdict.seq = seq;
  verdict.report = std::move(report);
  ready_.push_back(std::move(verdict));
  ++stats_.verdicts;
}

void CoordinatorCore::check_certain_point_to_point(Comm& comm, int32_t gone_comm_rank, uint64_t now_ns) {
  std::vector<uint64_t> keys;  // in pair order, so the reports come in a stable order
  for (const auto& [key, queue] : comm.pairs) {
    if (static_cast<int32_t>(key >> 32) == gone_comm_rank || static_cast<int32_t>(key & 0xffffffffu) == gone_comm_rank)
      keys.push_back(key);
  }
  std::sort(keys.begin(), keys.end());
  for (uint64_t key : keys) check_certain_pair(comm, comm.pairs.at(key), now_ns);
}

void CoordinatorCore::check_certain_pair(Comm& comm, PairQueue& queue, uint64_t now_ns) {
  if (queue.pending.empty()) return;
  queue.follow_front(options_.desync_timeout_ns);
  if (queue.certain_reported) return;
  const Fingerprint& f = queue.pending.front().call;
  const Member& waiting = comm.members[static_cast<size_t>(f.comm_rank)];
  const Member& other = comm.members[static_cast<size_t>(f.peer)];
  // A pending call whose own rank is gone leaves nobody waiting (a rank that sent and exited, its receiver's
  // fingerprints still on their way); a peer that can still come is the timeout's business.
  if (waiting.ended != LaggardState::kAlive || other.ended == LaggardState::kAlive) return;
  // Certain at once, without check_certain_desync's grace period: the two members of the pair are settled. The
  // waiting call is here, and the peer's fingerprints came before its end (a rank's fingerprints arrive in its call
  // order, the end of a communicator after every call on it, the goodbye after the last of them; what a vanished
  // rank had not sent is lost either way).
  queue.certain_reported = true;
  // The job is being stopped (a verdict, or the user's stop condition): ranks leaving mid-call is the stop.
  if (job_stopping_) return;
  reports::DesyncReport report = pair_desync_report(comm, queue, true, now_ns);
  VerdictAction action = options_.on_desync;
  // A peer that dropped fingerprints may have made the call we never saw: then "certain" is a guess.
  if (auto it = ranks_.find(other.global_rank); it != ranks_.end() && it->second->dropped_total > 0) {
    action = VerdictAction::kWarn;
    report.note =
        "the missing rank dropped fingerprints before the coordinator saw them; it may have made this call "
        "without it being seen here, so this is reported as a warning only";
  }
  emit_verdict(VerdictKind::kDesync, action, comm.id, f.seq, std::move(report));
}

void CoordinatorCore::check_certain_desync(Comm& comm, uint64_t now_ns) {
  if (comm.certain_reported || comm.final_floor == UINT64_MAX) return;
  const uint64_t furthest = comm.base_seq + comm.outstanding.size() - 1;  // highest call some member reached
  if (comm.outstanding.empty() || furthest <= comm.final_floor) return;
  const uint64_t seq = std::max(comm.final_floor + 1, comm.base_seq);
  // Certain now, but members still on their way to the call would show as "never heard from": wait for every
  // member that can still arrive, at most the grace period (then report them as they are).
  bool everyone_settled = true;
  for (const Member& member : comm.members) {
    if (member.last_seq < seq && member.ended == LaggardState::kAlive) everyone_settled = false;
  }
  if (comm.certain_since_ns == 0) {
    comm.certain_since_ns = now_ns;
    if (!everyone_settled) desyncs_waiting_.push_back(comm.id);
  }
  if (!everyone_settled && now_ns - comm.certain_since_ns < options_.mismatch_grace_ns) return;
  comm.certain_reported = true;
  reports::DesyncReport report = desync_report(comm, seq, true, now_ns);
  // A rank that dropped fingerprints may have made calls we never saw: then "certain" is a guess.
  bool lossy = false;
  for (const reports::MissingRank& missing : report.missing) {
    auto it = ranks_.find(missing.global_rank);
    if (it != ranks_.end() && it->second->dropped_total > 0) lossy = true;
  }
  if (job_stopping_) {
    // The job is being stopped (a verdict, or the user's stop condition): ranks leaving mid-call is the stop.
    comm.certain_reported = true;
    return;
  }
  VerdictAction action = options_.on_desync;
  if (lossy) {
    action = VerdictAction::kWarn;
    report.note =
        "a missing rank dropped fingerprints before the coordinator saw them; it may have made calls "
        "not shown here, so this is reported as a warning only";
  }
  emit_verdict(VerdictKind::kDesync, action, comm.id, seq, std::move(report));
}

reports::DesyncReport CoordinatorCore::desync_report(const Comm& comm, uint64_t seq, bool certain,
                                                     uint64_t now_ns) const {
  reports::DesyncReport report;
  report.comm_id = comm.id;
  report.seq = seq;
  report.certain = certain;
  report.detected_ns = now_ns;
  if (seq >= comm.base_seq && seq - comm.base_seq < comm.outstanding.size()) {
    const Entry& entry = comm.outstanding[seq - comm.base_seq];
    report.op = entry.reference.op;
    report.stuck_since_ns = entry.first_arrival_ns;
  }
  for (size_t r = 0; r < comm.members.size(); ++r) {
    const Member& member = comm.members[r];
    const RankInfo* info = nullptr;
    if (auto it = ranks_.find(member.global_rank); it != ranks_.end()) info = it->second.get();
    if (member.last_seq >= seq) {
      reports::WaitingRank waiting;
      waiting.global_rank = member.global_rank;
      waiting.comm_rank = static_cast<int32_t>(r);
      waiting.seq = member.last_seq;
      waiting.op = member.last_op;
      waiting.since_ns = member.last_start_ns;
      // The heartbeat knows whether the rank is still inside a call on this communicator, and since when (a
      // send/recv it is inside has a number of its own: not this count's). A call before its last one is a stale
      // heartbeat's: the rank returned from it before it made the next (a communicator's calls come in order).
      if (info != nullptr) {
        for (const HeartbeatCall& call : info->inside) {
          if (call.comm_id == comm.id && !recorder::is_point_to_point(static_cast<Op>(call.op)) &&
              call.seq >= member.last_seq) {
            waiting.seq = call.seq;
            waiting.op = call.op;
            waiting.since_ns = call.since_ns;
          }
        }
      }
      // The stack of the call it waits in: its last one (a call the heartbeat names beyond it is not here yet).
      if (waiting.seq == member.last_seq) {
        waiting.stack = stack_of(member.global_rank, member.last_stack_id);
        waiting.caller = member.last_caller;
      }
      report.waiting.push_back(std::move(waiting));
      continue;
    }
    report.missing.push_back(missing_rank(comm, r));
  }
  return report;
}

// A member that has not arrived, with its last collective call on the communicator.
reports::MissingRank CoordinatorCore::missing_rank(const Comm& comm, size_t comm_rank) const {
  const Member& member = comm.members[comm_rank];
  reports::MissingRank missing;
  missing.global_rank = member.global_rank;
  missing.comm_rank = static_cast<int32_t>(comm_rank);
  missing.has_last_call = member.last_seq > 0;
  missing.last_seq = member.last_seq;
  missing.last_op = member.last_op;
  missing.last_call_ns = member.last_start_ns;
  missing.last_stack = stack_of(member.global_rank, member.last_stack_id);
  missing.state = member.global_rank < 0 ? LaggardState::kUnknown : member.ended;
  describe_process(member.global_rank, &missing);
  return missing;
}

void CoordinatorCore::describe_process(int32_t rank, reports::MissingRank* missing) const {
  auto it = ranks_.find(rank);
  if (rank < 0 || it == ranks_.end()) return;
  const RankInfo& info = *it->second;
  missing->host = info.hello.host;
  missing->pid = info.hello.pid;
  missing->process_gone = info.vanished || info.said_goodbye;
  if (missing->state == LaggardState::kUnknown && info.has_hello) missing->state = LaggardState::kAlive;
  if (missing->state == LaggardState::kAlive && info.vanished) missing->state = LaggardState::kVanished;
  if (missing->state == LaggardState::kAlive && info.said_goodbye) missing->state = LaggardState::kExited;
}

// The oldest pending call of a pair: its rank waits, the peer has not made the other side.
reports::DesyncReport CoordinatorCore::pair_desync_report(const Comm& comm, const PairQueue& queue, bool certain,
                                                          uint64_t now_ns) const {
  const PairQueue::Pending& front = queue.pending.front();
  const Fingerprint& f = front.call;
  const bool is_send = static_cast<Op>(f.op) == Op::kSend;
  reports::DesyncReport report;
  report.comm_id = comm.id;
  report.seq = f.seq;
  report.op = f.op;
  report.point_to_point = true;
  report.sender = is_send ? f.comm_rank : f.peer;
  report.receiver = is_send ? f.peer : f.comm_rank;
  report.certain = certain;
  report.detected_ns = now_ns;
  report.stuck_since_ns = queue.stuck_since_ns;
  reports::WaitingRank waiting;
  waiting.global_rank = comm.members[static_cast<size_t>(f.comm_rank)].global_rank;
  waiting.comm_rank = f.comm_rank;
  waiting.seq = f.seq;
  waiting.op = f.op;
  waiting.since_ns = f.start_ns;
  waiting.stack = stack_of(waiting.global_rank, f.stack_id);
  waiting.caller = f.caller;
  report.waiting.push_back(std::move(waiting));
  // The peer's last call of any kind: on a pipeline's communicator there may be no collective at all.
  const Member& other = comm.members[static_cast<size_t>(f.peer)];
  reports::MissingRank missing = missing_rank(comm, static_cast<size_t>(f.peer));
  missing.has_last_call = other.has_call;
  missing.last_seq = other.call_seq;
  missing.last_op = other.call_op;
  missing.last_peer = other.call_peer;
  missing.last_call_ns = other.call_start_ns;
  missing.last_stack = other.has_call ? stack_of(other.global_rank, other.call_stack_id) : CallStack{};
  report.missing.push_back(std::move(missing));
  return report;
}

void CoordinatorCore::on_stack(const StackDefinition& stack) {
  RankInfo& info = rank_info(stack.rank);
  if (info.stacks.size() >= options_.max_stacks_per_rank && !info.stacks.contains(stack.stack_id)) return;
  info.stacks[stack.stack_id] = stack.stack;
  // The rank's first inf/nan may have named this stack before it arrived: the origin report gets it now (the
  // caller rewrites the report when the generation moves, as when a peer's rank becomes known).
  auto named = nonfinite_stack_ids_.find(stack.rank);
  if (named != nonfinite_stack_ids_.end() && named->second == stack.stack_id) {
    nonfinite_firsts_.at(stack.rank).stack = stack.stack;
    nonfinite_stack_ids_.erase(named);
    ++nonfinite_generation_;
  }
}

CallStack CoordinatorCore::stack_of(int32_t global_rank, uint32_t stack_id) const {
  if (stack_id == 0) return {};
  auto it = ranks_.find(global_rank);
  if (it == ranks_.end()) return {};
  auto stack = it->second->stacks.find(stack_id);
  return stack == it->second->stacks.end() ? CallStack{} : stack->second;
}

void CoordinatorCore::on_heartbeat(const Heartbeat& heartbeat, uint64_t now_ns) {
  RankInfo& info = rank_info(heartbeat.rank);
  info.inside = heartbeat.inside;
  info.last_heard_ns = now_ns;
}

void CoordinatorCore::on_goodbye(int32_t rank, uint64_t now_ns, bool stopping_job) {
  if (stopping_job) job_stopping_ = true;
  RankInfo& info = rank_info(rank);
  if (info.said_goodbye) return;
  info.said_goodbye = true;
  member_gone(rank, now_ns);
}

bool CoordinatorCore::has_live_comm(int32_t rank) const {
  auto it = ranks_.find(rank);
  if (it == ranks_.end()) return false;
  for (uint64_t id : it->second->comms) {
    auto comm = comms_.find(id);
    if (comm == comms_.end()) continue;
    for (const Member& member : comm->second->members) {
      if (member.global_rank == rank && member.ended == LaggardState::kAlive) return true;
    }
  }
  return false;
}

void CoordinatorCore::on_disconnect(int32_t rank, bool clean, uint64_t now_ns) {
  if (clean) {
    on_goodbye(rank, now_ns);
    return;
  }
  RankInfo& info = rank_info(rank);
  if (info.said_goodbye || info.vanished) return;
  // After a verdict that stops the job, ranks leave without a goodbye on purpose: that is no news.
  if (job_stopping_) {
    info.vanished = true;
    member_gone(rank, now_ns);
    return;
  }
  reports::VanishedReport report;
  report.global_rank = rank;
  report.host = info.hello.host;
  report.pid = info.hello.pid;
  report.time_ns = now_ns;
  report.has_last_call = info.has_last_call;
  report.last_call = info.last_call;
  if (info.has_last_call) report.last_stack = stack_of(rank, info.last_call.stack_id);
  report.flight_recorder_path = info.hello.flight_recorder_path;
  if (!info.hello.host_id.empty() && !options_.own_host_id.empty() && info.hello.host_id != options_.own_host_id)
    report.flight_recorder_elsewhere = info.hello.host.empty() ? info.hello.host_id : info.hello.host;
  // A rank that had ended all its communicators leaves nobody waiting: worth a report, not a stop.
  vanished_waiting_.push_back({std::move(report), has_live_comm(rank) ? options_.on_desync : VerdictAction::kWarn});
  info.vanished = true;  // what its going means to its communicators comes after its verdict, at the next tick()
}

std::string CoordinatorCore::host_key(int32_t rank) const {
  auto it = ranks_.find(rank);
  if (it == ranks_.end() || !it->second->has_hello) return {};
  const Hello& hello = it->second->hello;
  if (hello.host.empty() && hello.host_id.empty()) return {};
  return hello.host + "|" + hello.host_id.substr(0, hello.host_id.find('/'));
}

void CoordinatorCore::emit_vanished(uint64_t now_ns) {
  // Ranks of one host that vanished together are one verdict; it names the host lost when every rank known there is
  // gone and some other host still has a live rank (a job that ended everywhere at once lost no host). One pass over
  // the ranks: a whole job vanishing at once must not cost ranks squared.
  std::vector<std::pair<reports::VanishedReport, VerdictAction>> waiting;
  waiting.swap(vanished_waiting_);
  struct HostRanks {
    std::vector<int32_t> ranks;
    bool all_gone = true;
    size_t live = 0;
    bool abort = false;  // one of its vanished ranks' verdicts stops the job
    bool reported = false;
  };
  std::unordered_map<std::string, HostRanks> hosts;
  size_t live_total = 0;
  for (const auto& [rank, info] : ranks_) {
    const bool live = info->has_hello && !info->vanished && !info->said_goodbye;
    live_total += live ? 1 : 0;
    const std::string key = host_key(rank);
    if (key.empty()) continue;
    HostRanks& host = hosts[key];
    host.ranks.push_back(rank);
    host.all_gone &= info->vanished;
    host.live += live ? 1 : 0;
  }
  std::vector<std::string> keys;
  keys.reserve(waiting.size());
  for (const auto& [report, action] : waiting) {
    keys.push_back(host_key(report.global_rank));
    if (!keys.back().empty() && action == VerdictAction::kAbort) hosts[keys.back()].abort = true;
  }
  std::vector<int32_t> gone;
  gone.reserve(waiting.size());
  for (size_t i = 0; i < waiting.size(); ++i) {
    auto& [report, action] = waiting[i];
    gone.push_back(report.global_rank);
    HostRanks* host = keys[i].empty() ? nullptr : &hosts[keys[i]];
    if (host != nullptr && host->reported) continue;  // told with the first rank of its host
    VerdictAction host_action = action;
    if (host != nullptr && host->all_gone && host->ranks.size() >= 2 && live_total > host->live) {
      std::sort(host->ranks.begin(), host->ranks.end());
      report.host_ranks_lost = host->ranks;
      host->reported = true;
      if (host->abort) host_action = VerdictAction::kAbort;
    }
    emit_verdict(VerdictKind::kVanished, host_action, 0, 0, std::move(report));
  }
  // Then the desyncs their going makes certain, after the verdict that says why.
  for (int32_t rank : gone) member_gone(rank, now_ns);
}

void CoordinatorCore::on_nonfinite(const NonfiniteMessage& message, uint64_t now_ns) {
  rank_info(message.rank).last_heard_ns = now_ns;
  // A rank's first is where it saw the value first; anything it reports later is downstream of that.
  if (const auto [it, added] = nonfinite_firsts_.emplace(message.rank, first_of(message)); added) {
    it->second.stack = stack_of(message.rank, message.stack_id);
    if (message.stack_id != 0 && it->second.stack.empty()) nonfinite_stack_ids_[message.rank] = message.stack_id;
    ++nonfinite_generation_;
    ++stats_.nonfinite_firsts;
    resolve_peer_ranks();
  } else {
    ++stats_.ignored_nonfinite;
  }
  // The stop request counts even on a repeated report: the rank asked for it and is waiting for the verdict.
  if (message.stop_job && !nonfinite_stop_requested_) {
    nonfinite_stop_requested_ = true;
    nonfinite_stop_rank_ = message.rank;
    nonfinite_stop_since_ns_ = now_ns;
  }
}

std::vector<reports::FirstNonfinite> CoordinatorCore::nonfinite_firsts() const {
  std::vector<reports::FirstNonfinite> firsts;
  firsts.reserve(nonfinite_firsts_.size());
  for (const auto& [rank, first] : nonfinite_firsts_) firsts.push_back(first);
  return firsts;
}

void CoordinatorCore::check_nonfinite_stop(uint64_t now_ns) {
  if (!nonfinite_stop_requested_ || nonfinite_stop_sent_) return;
  // The grace period lets the other ranks' firsts arrive (they see the value a moment later, in the same or the next
  // call); when every rank of the world has reported there is nothing left to wait for. A clock that went back
  // does not hold the stop up.
  const int32_t world = world_size();
  const bool everyone = world > 0 && nonfinite_firsts_.size() >= static_cast<size_t>(world);
  if (!everyone && now_ns >= nonfinite_stop_since_ns_ &&
      now_ns - nonfinite_stop_since_ns_ < options_.nonfinite_grace_ns)
    return;
  nonfinite_stop_sent_ = true;
  NonfiniteOriginReport report;
  report.firsts = nonfinite_firsts();
  report.requested_by = nonfinite_stop_rank_;
  report.detected_ns = nonfinite_stop_since_ns_;
  // The verdict names the call the value came from, as the origin report does.
  const reports::FirstNonfinite* origin = reports::origin_call(report.firsts);
  const uint64_t comm_id = origin != nullptr ? origin->comm_id : 0;
  const uint64_t seq = origin != nullptr ? origin->call_number : 0;
  // Abort: the user asked for it (TRAINSCOPE_ON_NONFINITE=abort).
  emit_verdict(VerdictKind::kNonfinite, VerdictAction::kAbort, comm_id, seq, std::move(report));
}

void CoordinatorCore::scan_timeouts(uint64_t now_ns) {
  for (auto& [id, comm_ptr] : comms_) {
    scan_creation(*comm_ptr, now_ns);
    scan_collective_timeout(*comm_ptr, now_ns);
    scan_pair_timeouts(*comm_ptr, now_ns);
  }
}

bool CoordinatorCore::rank_gone(int32_t rank) const {
  auto it = ranks_.find(rank);
  return it != ranks_.end() && (it->second->said_goodbye || it->second->vanished);
}

// Members wait in a communicator's creation and others have not come. The ranks of the job that could still take the
// empty seats are those not in it; when fewer of them are alive than there are empty seats, the creation can never
// complete: a certain desync, stopping the waiting ranks as TRAINSCOPE_ON_DESYNC says. It waits kCreationGrace (or the
// desync timeout, if shorter) first: a restarted rank (torchelastic) takes its seat with a new hello, which makes it
// alive again. Otherwise a warning after each desync timeout, as for a collective.
void CoordinatorCore::scan_creation(Comm& comm, uint64_t now_ns) {
  if (comm.created || comm.creating_since_ns == 0 || comm.creation_certain_reported) return;
  std::vector<int32_t> empty_seats;
  std::set<int32_t> present;
  bool anyone_waits = false;
  for (size_t r = 0; r < comm.members.size(); ++r) {
    const Member& member = comm.members[r];
    if (member.global_rank < 0) {
      empty_seats.push_back(static_cast<int32_t>(r));
      continue;
    }
    present.insert(member.global_rank);
    anyone_waits |= member.creating && !rank_gone(member.global_rank);
  }
  if (empty_seats.empty() || !anyone_waits) return;
  const int32_t world = world_size();
  size_t alive = 0;
  for (int32_t g = 0; g < world; ++g)
    if (present.count(g) == 0 && !rank_gone(g)) ++alive;
  const uint64_t grace = std::min(options_.desync_timeout_ns, kCreationGraceNs);
  if (world > 0 && alive < empty_seats.size() && now_ns >= comm.creating_since_ns + grace) {
    comm.creation_certain_reported = true;
    emit_verdict(VerdictKind::kDesync, options_.on_desync, comm.id, 0,
                 creation_desync_report(comm, empty_seats, present, true, now_ns));
    return;
  }
  if (comm.creation_next_warning_ns == 0)
    comm.creation_next_warning_ns = comm.creating_since_ns + options_.desync_timeout_ns;
  if (now_ns < comm.creation_next_warning_ns) return;
  reports::DesyncReport report = creation_desync_report(comm, empty_seats, present, false, now_ns);
  report.repeat = ++comm.creation_warnings;
  comm.creation_next_warning_ns = now_ns + options_.desync_timeout_ns;
  emit_verdict(VerdictKind::kDesync, VerdictAction::kWarn, comm.id, 0, std::move(report));
}

// Who waits in the creation, and who could take each empty seat: when the communicator spans the world and every
// member sits at its own global rank (a world communicator, as launchers make it), seat r is rank r's; otherwise the
// ranks not in it are paired with the empty seats in order, and the report says it is a guess.
reports::DesyncReport CoordinatorCore::creation_desync_report(const Comm& comm, const std::vector<int32_t>& empty_seats,
                                                              const std::set<int32_t>& present, bool certain,
                                                              uint64_t now_ns) const {
  reports::DesyncReport report;
  report.comm_id = comm.id;
  report.creation = true;
  report.certain = certain;
  report.detected_ns = now_ns;
  report.stuck_since_ns = comm.creating_since_ns;
  bool identity = comm.nranks == world_size();
  for (size_t r = 0; r < comm.members.size(); ++r) {
    const Member& member = comm.members[r];
    if (member.global_rank < 0) continue;
    identity &= member.global_rank == static_cast<int32_t>(r);
    if (!member.creating) continue;
    if (report.op == 0) report.op = member.creating_op;
    reports::WaitingRank waiting;
    waiting.global_rank = member.global_rank;
    waiting.comm_rank = static_cast<int32_t>(r);
    waiting.op = member.creating_op;
    waiting.since_ns = member.creating_start_ns;
    waiting.stack = stack_of(member.global_rank, member.creating_stack_id);
    waiting.caller = member.creating_caller;
    report.waiting.push_back(std::move(waiting));
  }
  std::vector<int32_t> candidates;
  for (int32_t g = 0; g < world_size(); ++g)
    if (present.count(g) == 0) candidates.push_back(g);
  // The gone ones first: they are why the seats stay empty.
  std::stable_partition(candidates.begin(), candidates.end(), [this](int32_t g) { return rank_gone(g); });
  for (size_t i = 0; i < empty_seats.size(); ++i) {
    reports::MissingRank missing;
    missing.comm_rank = empty_seats[i];
    missing.global_rank = identity ? empty_seats[i] : i < candidates.size() ? candidates[i] : -1;
    missing.state = LaggardState::kUnknown;
    describe_process(missing.global_rank, &missing);
    report.missing.push_back(std::move(missing));
  }
  if (!identity && !empty_seats.empty())
    report.note = "which rank would take each empty seat is a guess: the communicator's ranks are not the job's";
  return report;
}

void CoordinatorCore::scan_collective_timeout(Comm& comm, uint64_t now_ns) {
  if (comm.outstanding.empty() || comm.certain_reported) return;
  const Entry& front = comm.outstanding.front();
  if (comm.warned_seq != comm.base_seq) {
    comm.warned_seq = comm.base_seq;
    comm.warnings = 0;
    comm.next_warning_ns = front.first_arrival_ns + options_.desync_timeout_ns;
  }
  if (now_ns < comm.next_warning_ns) return;
  reports::DesyncReport report = desync_report(comm, comm.base_seq, false, now_ns);
  report.repeat = ++comm.warnings;
  comm.next_warning_ns = now_ns + options_.desync_timeout_ns;
  // A warning: alive but silent, and a checkpoint save on one rank looks the same.
  emit_verdict(VerdictKind::kDesync, VerdictAction::kWarn, comm.id, comm.base_seq, std::move(report));
}

// One warning per stuck pair (about its oldest pending call), not one per pending call.
void CoordinatorCore::scan_pair_timeouts(Comm& comm, uint64_t now_ns) {
  std::vector<uint64_t> due;  // in pair order, so the reports come in a stable order
  for (auto& [key, queue] : comm.pairs) {
    if (queue.pending.empty()) continue;
    queue.follow_front(options_.desync_timeout_ns);
    if (queue.certain_reported) continue;
    const Fingerprint& f = queue.pending.front().call;
    if (comm.members[static_cast<size_t>(f.comm_rank)].ended != LaggardState::kAlive) continue;  // nobody waits
    if (now_ns >= queue.next_warning_ns || comm.members[static_cast<size_t>(f.peer)].ended != LaggardState::kAlive)
      due.push_back(key);
  }
  std::sort(due.begin(), due.end());
  for (uint64_t key : due) {
    PairQueue& queue = comm.pairs.at(key);
    const Fingerprint& f = queue.pending.front().call;
    if (comm.members[static_cast<size_t>(f.peer)].ended != LaggardState::kAlive) {
      check_certain_pair(comm, queue, now_ns);  // the peer left: certain, not a warning
      continue;
    }
    reports::DesyncReport report = pair_desync_report(comm, queue, false, now_ns);
    report.repeat = ++queue.warnings;
    queue.next_warning_ns = now_ns + options_.desync_timeout_ns;
    // A warning: the peer is alive and may still come, as after a long checkpoint save.
    emit_verdict(VerdictKind::kDesync, VerdictAction::kWarn, comm.id, f.seq, std::move(report));
  }
}

// A send/recv first names its peer by communicator rank; the report speaks of global ranks, which the coordinator
// learns from the peer's own fingerprints, maybe after the first arrived. Each one learnt rewrites the origin.
void CoordinatorCore::resolve_peer_ranks() {
  unresolved_peers_ = 0;
  for (auto& [rank, first] : nonfinite_firsts_) {
    if (first.peer < 0 || first.peer_rank >= 0) continue;
    auto it = comms_.find(first.comm_id);
    const int32_t peer_rank = it != comms_.end() && first.peer < it->second->nranks
                                  ? it->second->members[static_cast<size_t>(first.peer)].global_rank
                                  : -1;
    if (peer_rank >= 0) {
      first.peer_rank = peer_rank;
      ++nonfinite_generation_;
    } else {
      ++unresolved_peers_;
    }
  }
}

std::vector<CoreVerdict> CoordinatorCore::tick(uint64_t now_ns) {
  if (unresolved_peers_ > 0) resolve_peer_ranks();
  if (!vanished_waiting_.empty()) emit_vanished(now_ns);
  // Mismatches whose missing members did not come within the grace period are reported as they are.
  for (size_t i = 0; i < mismatches_waiting_.size();) {
    const auto [id, seq] = mismatches_waiting_[i];
    auto it = comms_.find(id);
    Entry* entry = nullptr;
    if (it != comms_.end() && seq >= it->second->base_seq &&
        seq - it->second->base_seq < it->second->outstanding.size())
      entry = &it->second->outstanding[seq - it->second->base_seq];
    if (entry == nullptr || !entry->mismatch) {  // already reported when the call completed
      mismatches_waiting_[i] = mismatches_waiting_.back();
      mismatches_waiting_.pop_back();
      continue;
    }
    if (now_ns - entry->mismatch->detected_ns >= options_.mismatch_grace_ns) {
      emit_mismatch(*it->second, *entry);
      mismatches_waiting_[i] = mismatches_waiting_.back();
      mismatches_waiting_.pop_back();
      continue;
    }
    ++i;
  }
  // Certain desyncs waiting for members still on their way.
  for (size_t i = 0; i < desyncs_waiting_.size();) {
    auto it = comms_.find(desyncs_waiting_[i]);
    if (it != comms_.end()) check_certain_desync(*it->second, now_ns);
    if (it == comms_.end() || it->second->certain_reported) {
      desyncs_waiting_[i] = desyncs_waiting_.back();
      desyncs_waiting_.pop_back();
      continue;
    }
    ++i;
  }
  if (now_ns >= next_scan_ns_) {
    next_scan_ns_ = now_ns + options_.scan_interval_ns;
    scan_timeouts(now_ns);
  }
  check_nonfinite_stop(now_ns);
  std::vector<CoreVerdict> verdicts;
  verdicts.swap(ready_);
  for (const CoreVerdict& verdict : verdicts)
    if (verdict.action == VerdictAction::kAbort) job_stopping_ = true;
  return verdicts;
}

size_t CoordinatorCore::hellos() const {
  size_t count = 0;
  for (const auto& [rank, info] : ranks_) count += info->has_hello ? 1 : 0;
  return count;
}

const Hello* CoordinatorCore::hello_of(int32_t rank) const {
  auto it = ranks_.find(rank);
  return it != ranks_.end() && it->second->has_hello ? &it->second->hello : nullptr;
}

int32_t CoordinatorCore::world_size() const {
  int32_t world = -1;
  for (const auto& [rank, info] : ranks_) {
    if (info->has_hello) world = std::max(world, info->hello.world_size);
  }
  return world;
}

std::vector<std::string> CoordinatorCore::manifest_warnings() const {
  std::map<int32_t, const Hello*> hellos_by_rank;
  for (const auto& [rank, info] : ranks_) {
    if (info->has_hello) hellos_by_rank[rank] = &info->hello;
  }
  std::map<std::string, std::vector<int32_t>> models, memories, nccl, cuda, drivers;
  std::map<uint64_t, std::vector<int32_t>> memory_bytes;
  std::vector<std::string> warnings;
  for (const auto& [rank, hello] : hellos_by_rank) {
    if (!hello->gpu_name.empty()) models[hello->gpu_name].push_back(rank);
    if (hello->gpu_memory_bytes != 0) {
      memories[gib(hello->gpu_memory_bytes)].push_back(rank);
      memory_bytes[hello->gpu_memory_bytes].push_back(rank);
    }
    if (!hello->nccl_version.empty()) nccl[hello->nccl_version].push_back(rank);
    if (!hello->cuda_runtime_version.empty()) cuda[hello->cuda_runtime_version].push_back(rank);
    if (!hello->driver_version.empty()) drivers[hello->driver_version].push_back(rank);
    if (!hello->kernel_release.empty() && kernel_older_than(hello->kernel_release, 5, 5)) {
      warnings.push_back("rank " + std::to_string(rank) + " (host " + hello->host + ") runs Linux kernel " +
                         hello->kernel_release +
                         ", older than the recommended minimum 5.5.0: processes can hang on such kernels");
    }
  }
  if (models.size() > 1) {
    warnings.push_back("GPUs of different models: " + describe_groups(models) +
                       ". The slowest GPU bounds the step of every rank.");
  }
  if (memory_bytes.size() > 1) {
    warnings.push_back("GPUs with different memory sizes: " + describe_groups(memories) + ". The smallest (" +
                       gib(memory_bytes.begin()->first) + ") bounds the batch size of every rank.");
  }
  if (nccl.size() > 1) warnings.push_back("different NCCL versions across ranks: " + describe_groups(nccl));
  if (cuda.size() > 1) warnings.push_back("different CUDA runtime versions across ranks: " + describe_groups(cuda));
  if (drivers.size() > 1) warnings.push_back("different GPU driver versions across ranks: " + describe_groups(drivers));
  return warnings;
}

nlohmann::json CoordinatorCore::manifest() const {
  std::map<int32_t, const Hello*> hellos_by_rank;
  for (const auto& [rank, info] : ranks_) {
    if (info->has_hello) hellos_by_rank[rank] = &info->hello;
  }
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& [rank, h] : hellos_by_rank) {
    nlohmann::json gpu = nullptr;
    if (!h->gpu_name.empty()) {
      gpu = {{"name", h->gpu_name},
             {"memory_bytes", h->gpu_memory_bytes},
             {"compute_capability",
              std::to_string(h->compute_capability_major) + "." + std::to_string(h->compute_capability_minor)},
             {"bus_id", h->gpu_bus_id}};
    }
    ranks.push_back({{"rank", rank},
                     {"launcher_rank", h->launcher_rank},
                     {"host", h->host},
                     {"host_id", h->host_id},
                     {"pid", h->pid},
                     {"gpu", gpu},
                     {"driver_version", h->driver_version},
                     {"cuda_runtime_version", h->cuda_runtime_version},
                     {"nccl_version", h->nccl_version},
                     {"kernel_release", h->kernel_release},
                     {"flight_recorder", h->flight_recorder_path}});
  }
  return {{"world_size", world_size()}, {"ranks", std::move(ranks)}, {"warnings", manifest_warnings()}};
}

CoreStats CoordinatorCore::stats() const {
  CoreStats stats = stats_;
  stats.comms = comms_.size();
  stats.outstanding_calls = 0;
  for (const auto& [id, comm] : comms_) stats.outstanding_calls += comm->outstanding.size();
  return stats;
}

std::string rank_ranges(const std::vector<int32_t>& sorted_ranks) {
  std::string text;
  for (size_t i = 0; i < sorted_ranks.size();) {
    size_t j = i;
    while (j + 1 < sorted_ranks.size() && sorted_ranks[j + 1] == sorted_ranks[j] + 1) ++j;
    if (!text.empty()) text += ",";
    text += std::to_string(sorted_ranks[i]);
    if (j > i) text += "-" + std::to_string(sorted_ranks[j]);
    i = j + 1;
  }
  return text;
}

bool kernel_older_than(const std::string& release, int major, int minor) {
  int release_major = 0;
  int release_minor = 0;
  if (std::sscanf(release.c_str(), "%d.%d", &release_major, &release_minor) != 2) return false;
  return release_major < major || (release_major == major && release_minor < minor);
}

}  // namespace trainscope::exchange
