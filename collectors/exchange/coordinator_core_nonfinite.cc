// The origin of the first inf/nan: each rank's first report is kept (later ones are downstream of it), completed by
// its stack and its peer's global rank as those become known, and a stop the user asked for waits a grace period so
// the other ranks' firsts make it into the verdict.
#include <vector>

#include "collectors/exchange/coordinator_core.h"
#include "collectors/exchange/coordinator_core_detail.h"

namespace trainscope::exchange {

namespace {

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

}  // namespace trainscope::exchange
