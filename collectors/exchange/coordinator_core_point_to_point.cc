// Point-to-point pairing: the n-th send from one rank to another meets the n-th receive on the other from the first,
// in one bounded queue per (sender, receiver) pair. A pair that disagrees is a mismatch; a pending call whose peer
// has left is a certain desync, one whose peer is alive but silent past the timeout a warning.
#include <algorithm>
#include <string>
#include <vector>

#include "collectors/exchange/coordinator_core.h"
#include "collectors/exchange/coordinator_core_detail.h"

namespace trainscope::exchange {

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

}  // namespace trainscope::exchange
