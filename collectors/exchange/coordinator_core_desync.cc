// Desyncs of collectives and of communicator creations: members that wait in a call (or a creation) that others
// never make. Certain when a member that can never call again stopped below it, otherwise a warning after each
// desync timeout; the report names who waits where and what is known of the missing ranks' processes.
#include <algorithm>
#include <set>
#include <vector>

#include "collectors/exchange/coordinator_core.h"
#include "collectors/exchange/coordinator_core_detail.h"

namespace trainscope::exchange {

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

}  // namespace trainscope::exchange
