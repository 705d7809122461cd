// The coordinator core's entry points and bookkeeping: ranks and communicators as fingerprints introduce them, the
// dispatch of each fingerprint to the rule that judges it, verdicts queued for tick(), and what the server asks of
// the core (hellos, stacks, stats). The rules themselves live in coordinator_core_*.cc, one concern a file.
#include "collectors/exchange/coordinator_core.h"

#include <algorithm>

#include "collectors/exchange/coordinator_core_detail.h"

namespace trainscope::exchange {

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

void CoordinatorCore::scan_timeouts(uint64_t now_ns) {
  for (auto& [id, comm_ptr] : comms_) {
    scan_creation(*comm_ptr, now_ns);
    scan_collective_timeout(*comm_ptr, now_ns);
    scan_pair_timeouts(*comm_ptr, now_ns);
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

CoreStats CoordinatorCore::stats() const {
  CoreStats stats = stats_;
  stats.comms = comms_.size();
  stats.outstanding_calls = 0;
  for (const auto& [id, comm] : comms_) stats.outstanding_calls += comm->outstanding.size();
  return stats;
}

}  // namespace trainscope::exchange
