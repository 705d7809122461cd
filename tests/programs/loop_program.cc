// An unmodified NCCL program that all-reduces in a loop: for crash tests (a rank is SIGKILLed mid-run) and the
// end-to-end overhead measurement. --iterations 0 loops until killed.
//
// --mix: each iteration is a collective-bound step instead, all-reduce, broadcast, all-gather, reduce-scatter and
// a send/recv ring in a group (6 calls), each of --count elements: the whole-job benchmark's loop
// (tests/bench/whole_job.sh).
//
// --pace-ms N: each iteration starts N ms after the previous one started (a step's compute, for jobs that run across
// the multi-host test bed for a known time at a known collective rate).
//
// --half-count-rank R --at N: at iteration N (0-based), rank R all-reduces half the count: a mismatch in a job that
// is already running (the stand-in NCCL then blocks, as NCCL would; trainscope stops the job).
//
// --nofile N lowers the process's soft descriptor limit to N at its start (`ulimit -n N`); --open-files N --after
// FILE: rank 0, after its first all-reduce, waits (at most 60 s) for FILE to exist, then opens N files at once, as a
// checkpoint or a data loader would, says how many it could, and exits 3 after its loop if any failed.
#include <fcntl.h>
#include <nccl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bootstrap.h"

namespace {

// Opens `count` files at once and closes them; returns how many failed with EMFILE.
int open_files(int count) {
  std::vector<int> files;
  int emfile = 0;
  for (int i = 0; i < count; ++i) {
    const int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) files.push_back(fd);
    if (fd < 0 && errno == EMFILE) ++emfile;
  }
  for (const int fd : files) close(fd);
  std::printf("rank 0 opened %zu of %d files (%d failed with EMFILE)\n", files.size(), count, emfile);
  std::fflush(stdout);
  return emfile;
}

}  // namespace

int main(int argc, char** argv) {
  long iterations = 0;
  size_t count = 256;
  int open_count = 0;
  std::string after;
  bool mix = false;
  long pace_ms = 0;
  int fault_rank = -1;
  long fault_at = -1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--iterations") == 0 && i + 1 < argc) {
      iterations = std::atol(argv[++i]);
    } else if (std::strcmp(argv[i], "--count") == 0 && i + 1 < argc) {
      count = static_cast<size_t>(std::atoll(argv[++i]));
    } else if (std::strcmp(argv[i], "--nofile") == 0 && i + 1 < argc) {
      rlimit limit{};
      getrlimit(RLIMIT_NOFILE, &limit);
      limit.rlim_cur = static_cast<rlim_t>(std::atol(argv[++i]));
      if (setrlimit(RLIMIT_NOFILE, &limit) != 0) tsprog::fail("setrlimit(RLIMIT_NOFILE)", errno);
    } else if (std::strcmp(argv[i], "--open-files") == 0 && i + 1 < argc) {
      open_count = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--after") == 0 && i + 1 < argc) {
      after = argv[++i];
    } else if (std::strcmp(argv[i], "--half-count-rank") == 0 && i + 1 < argc) {
      fault_rank = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--at") == 0 && i + 1 < argc) {
      fault_at = std::atol(argv[++i]);
    } else if (std::strcmp(argv[i], "--pace-ms") == 0 && i + 1 < argc) {
      pace_ms = std::atol(argv[++i]);
    } else if (std::strcmp(argv[i], "--mix") == 0) {
      mix = true;
    } else {
      std::fprintf(stderr,
                   "usage: loop_program [--iterations N (0: forever)] [--count N] [--mix] [--pace-ms N] "
                   "[--half-count-rank R --at N] "
                   "[--nofile N] "
                   "[--open-files N --after FILE]\n");
      return 2;
    }
  }
  const tsprog::Job job = tsprog::job();
  const ncclUniqueId id = tsprog::shared_unique_id(job);
  ncclComm_t comm = nullptr;
  tsprog::check(ncclCommInitRank(&comm, job.world, id, job.rank), "ncclCommInitRank");
  std::vector<float> buf(count, 1.0f);
  std::vector<float> gathered(mix ? count * static_cast<size_t>(job.world) : 0, 1.0f);
  std::vector<float> received(mix ? count : 0, 1.0f);
  const int right = (job.rank + 1) % job.world;
  const int left = (job.rank + job.world - 1) % job.world;
  int emfile = 0;
  timespec next{};
  clock_gettime(CLOCK_MONOTONIC, &next);
  for (long it = 0; iterations == 0 || it < iterations; ++it) {
    if (pace_ms > 0) {
      next.tv_nsec += pace_ms % 1000 * 1000000;
      next.tv_sec += pace_ms / 1000 + next.tv_nsec / 1000000000;
      next.tv_nsec %= 1000000000;
      while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, nullptr) == EINTR) {
      }
    }
    const size_t n = job.rank == fault_rank && it == fault_at ? count / 2 : count;
    tsprog::check(ncclAllReduce(buf.data(), buf.data(), n, ncclFloat32, ncclAvg, comm, nullptr), "allreduce");
    if (mix) {
      tsprog::check(ncclBroadcast(buf.data(), buf.data(), count, ncclFloat32, 0, comm, nullptr), "broadcast");
      tsprog::check(ncclAllGather(buf.data(), gathered.data(), count, ncclFloat32, comm, nullptr), "allgather");
      tsprog::check(ncclReduceScatter(gathered.data(), buf.data(), count, ncclFloat32, ncclAvg, comm, nullptr),
                    "reducescatter");
      tsprog::check(ncclGroupStart(), "group start");
      tsprog::check(ncclSend(buf.data(), count, ncclFloat32, right, comm, nullptr), "send");
      tsprog::check(ncclRecv(received.data(), count, ncclFloat32, left, comm, nullptr), "recv");
      tsprog::check(ncclGroupEnd(), "group end");
    }
    if (it == 0 && job.rank == 0 && open_count > 0) {
      if (!tsprog::wait_for_file(after.c_str())) tsprog::fail(("waiting for " + after).c_str(), 0);
      emfile = open_files(open_count);
    }
  }
  tsprog::check(ncclCommDestroy(comm), "destroy");
  std::printf("rank %d done %g\n", job.rank, static_cast<double>(buf[0]));
  return emfile > 0 ? 3 : 0;
}
