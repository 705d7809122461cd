// Rank identity and ncclUniqueId distribution for the test programs, the way a launcher's store would do it.
//
// Programs are started by ts-launch, which sets RANK/WORLD_SIZE and hands each rank a pipe: rank 0 writes the
// unique id it got from ncclGetUniqueId, the launcher forwards it to the other ranks. Blocking reads, no
// polling; the launcher's deadline bounds every wait. Without the launcher a program runs as a single rank.
#pragma once

#include <nccl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tsprog {

struct Job {
  int rank = 0;
  int world = 1;
};

inline int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

// Waits (at most 60 s, polling every 10 ms) for `path` to exist: a test's signal to go on. False when it never does.
inline bool wait_for_file(const char* path) {
  struct stat status {};
  for (int i = 0; i < 6000; ++i) {
    if (stat(path, &status) == 0) return true;
    usleep(10000);
  }
  return false;
}

inline Job job() { return Job{env_int("RANK", 0), env_int("WORLD_SIZE", 1)}; }

[[noreturn]] inline void fail(const char* what, int code) {
  std::fprintf(stderr, "test program: %s failed (%d)\n", what, code);
  std::exit(3);
}

inline void check(ncclResult_t result, const char* what) {
  if (result != ncclSuccess) fail(what, static_cast<int>(result));
}

// Every rank gets the same id: rank 0 creates it (with `get_unique_id`: a program that looks NCCL up at run time
// passes the function it found), the launcher relays it.
inline ncclUniqueId shared_unique_id(const Job& job, ncclResult_t (*get_unique_id)(ncclUniqueId*) = ncclGetUniqueId) {
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (job.world == 1 && std::getenv("TS_UID_WRITE_FD") == nullptr) {
    check(get_unique_id(&id), "ncclGetUniqueId");
    return id;
  }
  if (job.rank == 0) {
    check(get_unique_id(&id), "ncclGetUniqueId");
    const int fd = env_int("TS_UID_WRITE_FD", -1);
    if (fd < 0 || write(fd, &id, sizeof(id)) != static_cast<ssize_t>(sizeof(id))) fail("writing the unique id", fd);
    close(fd);
  } else {
    const int fd = env_int("TS_UID_READ_FD", -1);
    size_t got = 0;
    while (fd >= 0 && got < sizeof(id)) {
      const ssize_t n = read(fd, reinterpret_cast<char*>(&id) + got, sizeof(id) - got);
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    if (got != sizeof(id)) fail("reading the unique id", fd);
    close(fd);
  }
  return id;
}

// A stable digest of result buffers, printed so runs with and without the shim can be compared byte for byte.
inline unsigned long long digest(const void* data, size_t bytes, unsigned long long h = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace tsprog
