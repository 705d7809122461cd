// Collective matching: every member's fingerprint of a collective call is compared with the first one seen, within a
// bounded window of calls some members reached and others not; a difference becomes a mismatch report that waits a
// grace period for the members still on their way, so the report shows every rank's line, not only the first two.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "collectors/exchange/coordinator_core.h"
#include "collectors/exchange/coordinator_core_detail.h"

namespace trainscope::exchange {

namespace {

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

}  // namespace

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

}  // namespace trainscope::exchange
