// Ranks and members that leave: a communicator ended, a goodbye, a connection lost without one. Each makes the
// calls others wait on it in certain desyncs; a rank that vanished is a verdict of its own first, and ranks of one
// host that vanish together are one, naming the host lost.
#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

#include "collectors/exchange/coordinator_core.h"
#include "collectors/exchange/coordinator_core_detail.h"

namespace trainscope::exchange {

namespace {

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

}  // namespace

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

bool CoordinatorCore::rank_gone(int32_t rank) const {
  auto it = ranks_.find(rank);
  return it != ranks_.end() && (it->second->said_goodbye || it->second->vanished);
}

}  // namespace trainscope::exchange
