// Fault-free reads of our own memory (see safe_read.h).
#include "shim/safe_read.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

namespace trainscope::shim {

namespace {

// Set once process_vm_readv has been refused: every later read goes through a pipe.
std::atomic<bool> g_use_pipe{false};

}  // namespace

void force_safe_reads_through_pipe(bool on) { g_use_pipe.store(on, std::memory_order_relaxed); }

// The pid is taken per reader, not cached for the process: after a fork, process_vm_readv on the parent's pid would
// read the parent's memory and validate addresses for the wrong process.
SafeReader::SafeReader() : pid_(static_cast<int>(getpid())) {}

SafeReader::~SafeReader() {
  if (pipe_[0] >= 0) close(pipe_[0]);
  if (pipe_[1] >= 0) close(pipe_[1]);
}

bool SafeReader::read(uintptr_t from, void* to, size_t n) {
  if (n == 0) return true;
  // The first page is never mapped (mmap_min_addr), which also keeps block start 0 free to mean "empty".
  if (from < 4096 || from + n < from) return false;
  uintptr_t start = from & ~(kBlock - 1);
  if (from + n > start + kBlock) return read_direct(from, to, n);
  const uint8_t* cached = block(start);
  if (cached == nullptr) return false;
  std::memcpy(to, cached + (from - start), n);
  return true;
}

const uint8_t* SafeReader::block(uintptr_t start) {
  for (int i = 0; i < kBlocks; ++i) {
    if (starts_[i] == start) return blocks_[i];
  }
  int slot = next_;
  next_ = (next_ + 1) % kBlocks;
  starts_[slot] = 0;
  if (!read_direct(start, blocks_[slot], kBlock)) return nullptr;
  starts_[slot] = start;
  return blocks_[slot];
}

bool SafeReader::read_direct(uintptr_t from, void* to, size_t n) {
  if (!g_use_pipe.load(std::memory_order_relaxed)) {
    iovec local{to, n};
    iovec remote{reinterpret_cast<void*>(from), n};
    ssize_t got = process_vm_readv(pid_, &local, 1, &remote, 1, 0);
    if (got == static_cast<ssize_t>(n)) return true;
    if (got >= 0 || errno == EFAULT) return false;  // a short read or EFAULT: the address is bad
    if (errno == ENOMEM || errno == EINTR) {
      unavailable_ = true;
      return false;
    }
    g_use_pipe.store(true, std::memory_order_relaxed);  // ENOSYS, EPERM (a seccomp filter): refused for good
  }
  return read_through_pipe(from, to, n);
}

bool SafeReader::read_through_pipe(uintptr_t from, void* to, size_t n) {
  if (pipe_[0] < 0 && pipe2(pipe_, O_CLOEXEC | O_NONBLOCK) != 0) {
    pipe_[0] = pipe_[1] = -1;
    unavailable_ = true;
    return false;
  }
  auto* out = static_cast<char*>(to);
  while (n > 0) {
    size_t chunk = n < 4096 ? n : 4096;  // well below a pipe's capacity, so write() never blocks
    ssize_t put = write(pipe_[1], reinterpret_cast<const void*>(from), chunk);
    if (put < 0 && errno != EFAULT) unavailable_ = true;  // EINTR, ENOMEM: says nothing about the address
    if (put <= 0) return false;                           // EFAULT: the first byte is unreadable
    // Take back what was written, even on a short write (a fault part-way), so the pipe is empty for the next read.
    ssize_t back = ::read(pipe_[0], out, static_cast<size_t>(put));
    if (back != put || static_cast<size_t>(put) != chunk) return false;
    from += chunk;
    out += chunk;
    n -= chunk;
  }
  return true;
}

}  // namespace trainscope::shim
