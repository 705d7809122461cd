// Test helper: runs NCCL ranks as forked processes with a hard deadline, and checks made inside a rank.
#pragma once

#include <sys/types.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <nccl.h>

namespace tsfake_test {

inline constexpr int kRankDeadlineSeconds = 60;

// Counts failed checks inside a rank process, where gtest assertions cannot reach the parent.
class RankChecks {
 public:
  explicit RankChecks(int rank) : rank_(rank) {}
  bool operator()(bool ok, const std::string& what) {
    if (!ok && failures_++ < 20) std::fprintf(stderr, "[rank %d] check failed: %s\n", rank_, what.c_str());
    return ok;
  }
  bool nccl(ncclResult_t result, const std::string& what) {
    return (*this)(result == ncclSuccess, what + " returned " + std::to_string(static_cast<int>(result)));
  }
  int failures() const { return failures_; }

 private:
  int rank_;
  int failures_ = 0;
};

using RankBody = std::function<void(int rank, int nranks, const ncclUniqueId& id, RankChecks& check)>;

// The live children of one test: started by start(), ended by wait_all() or kill_all().
class RankProcesses {
 public:
  RankProcesses() = default;
  ~RankProcesses();
  RankProcesses(const RankProcesses&) = delete;
  RankProcesses& operator=(const RankProcesses&) = delete;

  // Forks `nranks` children that share one fresh unique id; each runs body and _exits with its failure count.
  void start(int nranks, const RankBody& body);
  const ncclUniqueId& id() const { return id_; }
  // Waits (bounded) for every child; returns a description of what went wrong, empty when all succeeded.
  std::string wait_all(int deadline_seconds = kRankDeadlineSeconds);
  void kill_all();

 private:
  ncclUniqueId id_{};
  std::vector<pid_t> children_;
  std::vector<int> pidfds_;
};

// Runs body on `nranks` forked ranks and returns "" when every rank passed every check within the deadline.
std::string run_ranks(int nranks, const RankBody& body);

// Polls the stand-in's stuck state until `accept` likes it or ~60 s of attempts pass; returns the last text seen.
std::string poll_stuck_state(const ncclUniqueId& id, const std::function<bool(int blocked, const std::string&)>& accept,
                             bool* accepted);

// Removes the shared-memory name a killed rank could not clean up.
void unlink_segment(const ncclUniqueId& id);

}  // namespace tsfake_test
