// An unmodified NCCL program that forks: the parent uses NCCL before and after the fork; one child only
// computes and exits, another child creates its own single-rank communicator and uses NCCL itself.
#include <nccl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <vector>

#include "bootstrap.h"

namespace {

float allreduce_once(ncclComm_t comm, float value) {
  std::vector<float> buf(256, value);
  tsprog::check(ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat32, ncclSum, comm, nullptr), "allreduce");
  return buf[0];
}

int wait_child(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

int main() {
  ncclUniqueId id;
  tsprog::check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  ncclComm_t comm = nullptr;
  tsprog::check(ncclCommInitRank(&comm, 1, id, 0), "ncclCommInitRank");
  const float before = allreduce_once(comm, 1.0f);

  const pid_t quiet = fork();
  if (quiet == 0) _exit(before == 1.0f ? 0 : 1);  // a data-loader-like child: no NCCL at all

  const pid_t user = fork();
  if (user == 0) {
    ncclUniqueId child_id;
    tsprog::check(ncclGetUniqueId(&child_id), "child ncclGetUniqueId");
    ncclComm_t child_comm = nullptr;
    tsprog::check(ncclCommInitRank(&child_comm, 1, child_id, 0), "child ncclCommInitRank");
    const float v = allreduce_once(child_comm, 2.0f);
    tsprog::check(ncclCommDestroy(child_comm), "child destroy");
    std::printf("child pid %d value %g\n", static_cast<int>(getpid()), static_cast<double>(v));
    std::fflush(stdout);
    _exit(v == 2.0f ? 0 : 1);
  }
  const int quiet_status = wait_child(quiet);
  const int user_status = wait_child(user);
  const float after = allreduce_once(comm, 3.0f);
  tsprog::check(ncclCommDestroy(comm), "destroy");
  std::printf("parent pid %d before %g after %g children %d %d\n", static_cast<int>(getpid()),
              static_cast<double>(before), static_cast<double>(after), quiet_status, user_status);
  return quiet_status == 0 && user_status == 0 ? 0 : 1;
}
