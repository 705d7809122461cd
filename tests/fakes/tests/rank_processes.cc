// Test helper: runs NCCL ranks as forked processes with a hard deadline, and checks made inside a rank.
#include "rank_processes.h"

#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>

#include "fake_nccl_debug.h"

namespace tsfake_test {

RankProcesses::~RankProcesses() { kill_all(); }

void RankProcesses::start(int nranks, const RankBody& body) {
  ncclGetUniqueId(&id_);
  std::fflush(nullptr);  // buffered output would otherwise be written once per child
  for (int rank = 0; rank < nranks; ++rank) {
    const pid_t pid = fork();
    if (pid == 0) {
      RankChecks check(rank);
      body(rank, nranks, id_, check);
      std::fflush(nullptr);
      _exit(check.failures() > 100 ? 100 : check.failures());
    }
    children_.push_back(pid);
    pidfds_.push_back(static_cast<int>(syscall(SYS_pidfd_open, pid, 0)));
  }
}

std::string RankProcesses::wait_all(int deadline_seconds) {
  std::string problems;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(deadline_seconds);
  for (std::size_t i = 0; i < children_.size(); ++i) {
    // pidfds become readable when the child exits: a bounded wait without sleeping.
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd fd{pidfds_[i], POLLIN, 0};
    int ready = 0;
    do {
      ready = poll(&fd, 1, static_cast<int>(std::max<long long>(0, left.count())));
    } while (ready < 0 && errno == EINTR);
    if (ready <= 0) {
      problems += "rank " + std::to_string(i) + " did not finish within " + std::to_string(deadline_seconds) + " s; ";
      kill_all();
      return problems;
    }
    int status = 0;
    waitpid(children_[i], &status, 0);
    close(pidfds_[i]);
    pidfds_[i] = -1;
    children_[i] = 0;
    if (WIFSIGNALED(status)) {
      problems += "rank " + std::to_string(i) + " died of signal " + std::to_string(WTERMSIG(status)) + "; ";
    } else if (WEXITSTATUS(status) != 0) {
      problems += "rank " + std::to_string(i) + " had " + std::to_string(WEXITSTATUS(status)) + " failed checks; ";
    }
  }
  children_.clear();
  pidfds_.clear();
  if (!problems.empty()) unlink_segment(id_);  // a rank that died could not destroy its communicator
  return problems;
}

void RankProcesses::kill_all() {
  for (std::size_t i = 0; i < children_.size(); ++i) {
    if (children_[i] <= 0) continue;
    kill(children_[i], SIGKILL);
    waitpid(children_[i], nullptr, 0);
    if (pidfds_[i] >= 0) close(pidfds_[i]);
  }
  if (!children_.empty()) unlink_segment(id_);
  children_.clear();
  pidfds_.clear();
}

std::string run_ranks(int nranks, const RankBody& body) {
  RankProcesses ranks;
  ranks.start(nranks, body);
  return ranks.wait_all();
}

std::string poll_stuck_state(const ncclUniqueId& id, const std::function<bool(int, const std::string&)>& accept,
                             bool* accepted) {
  constexpr int kAttempts = 6000;
  std::string text;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    char buffer[4096];
    const int blocked = tsfake_stuck_state(&id, buffer, sizeof(buffer));
    text = buffer;
    if (accept(blocked, text)) {
      *accepted = true;
      return text;
    }
    timespec pause{0, 10 * 1000 * 1000};  // between polls only; nothing relies on its length
    nanosleep(&pause, nullptr);
  }
  *accepted = false;
  return text;
}

void unlink_segment(const ncclUniqueId& id) { shm_unlink(id.internal + TSFAKE_UNIQUE_ID_NAME_OFFSET); }

}  // namespace tsfake_test
