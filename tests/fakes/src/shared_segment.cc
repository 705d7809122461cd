// Creating, joining and sleeping on the shared-memory segment that carries a communicator's state.
#include "shared_segment.h"

#include <cerrno>
#include <climits>
#include <cstring>
#include <ctime>

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace tsfake {
namespace {

constexpr int kJoinAttempts = 2000;  // each attempt sleeps up to 5 ms: a creator that vanished fails the join in ~10 s
constexpr int kJoinAttemptMs = 5;

std::size_t round_up(std::size_t value, std::size_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

std::size_t header_bytes() { return round_up(sizeof(SegmentHeader), 64); }
std::size_t slots_bytes(int nranks) { return sizeof(RankSlot) * static_cast<std::size_t>(nranks); }

void sleep_ms(int ms) {
  timespec ts{ms / 1000, static_cast<long>(ms % 1000) * 1000000L};
  nanosleep(&ts, nullptr);
}

}  // namespace

int futex_wait(std::uint32_t* word, std::uint32_t expected, int timeout_ms) {
  timespec ts{timeout_ms / 1000, static_cast<long>(timeout_ms % 1000) * 1000000L};
  // Not FUTEX_PRIVATE: the word is shared with other processes (and other mappings in this one).
  return static_cast<int>(syscall(SYS_futex, word, FUTEX_WAIT, expected, &ts, nullptr, 0));
}

void futex_wake_all(std::uint32_t* word) { syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0); }

std::size_t segment_bytes(int nranks) {
  return header_bytes() + slots_bytes(nranks) + sizeof(Channel) * static_cast<std::size_t>(nranks) * nranks;
}

SharedSegment::SharedSegment(std::string name, void* base, std::size_t bytes, int nranks)
    : name_(std::move(name)), base_(base), bytes_(bytes), nranks_(nranks) {}

SharedSegment::~SharedSegment() {
  if (base_ != nullptr) munmap(base_, bytes_);
}

RankSlot& SharedSegment::rank(int r) {
  auto* slots = reinterpret_cast<RankSlot*>(static_cast<char*>(base_) + header_bytes());
  return slots[r];
}

Channel& SharedSegment::channel(int src, int dst) {
  auto* channels = reinterpret_cast<Channel*>(static_cast<char*>(base_) + header_bytes() + slots_bytes(nranks_));
  return channels[static_cast<std::size_t>(src) * nranks_ + dst];
}

ncclResult_t SharedSegment::join(const std::string& name, int nranks, SharedSegment** out, std::string* error) {
  const std::size_t bytes = segment_bytes(nranks);
  int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd >= 0) {
    if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      *error = "ftruncate of " + name + " failed: " + std::strerror(errno);
      close(fd);
      shm_unlink(name.c_str());
      return ncclSystemError;
    }
    void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED) {
      *error = "mmap of " + name + " failed: " + std::strerror(errno);
      shm_unlink(name.c_str());
      return ncclSystemError;
    }
    auto* segment = new SharedSegment(name, base, bytes, nranks);
    SegmentHeader& header = segment->header();  // fresh pages are zero, which is every field's starting value
    header.magic = kSegmentMagic;
    header.nranks = nranks;
    std::atomic_ref<std::uint32_t>(header.attached).fetch_add(1, std::memory_order_acq_rel);
    store_release(header.initialised, 1u);
    futex_wake_all(&header.initialised);
    *out = segment;
    return ncclSuccess;
  }
  if (errno != EEXIST) {
    *error = "shm_open of " + name + " failed: " + std::strerror(errno);
    return ncclSystemError;
  }
  // Someone else is creating it: wait for the size, then for the initialised flag, a bounded number of times.
  for (int attempt = 0; attempt < kJoinAttempts; ++attempt) {
    fd = shm_open(name.c_str(), O_RDWR, 0600);
    if (fd < 0) {
      sleep_ms(kJoinAttemptMs);
      continue;
    }
    struct stat st {};
    if (fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) < header_bytes()) {
      close(fd);
      sleep_ms(kJoinAttemptMs);
      continue;
    }
    if (static_cast<std::size_t>(st.st_size) != bytes) {
      close(fd);
      *error = "segment " + name + " was created for a different number of ranks than " + std::to_string(nranks);
      return ncclInvalidUsage;
    }
    void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED) {
      *error = "mmap of " + name + " failed: " + std::strerror(errno);
      return ncclSystemError;
    }
    auto* segment = new SharedSegment(name, base, bytes, nranks);
    SegmentHeader& header = segment->header();
    for (; attempt < kJoinAttempts && load_acquire(header.initialised) == 0; ++attempt) {
      futex_wait(&header.initialised, 0, kJoinAttemptMs);
    }
    if (load_acquire(header.initialised) == 0 || header.magic != kSegmentMagic) {
      delete segment;
      *error = "segment " + name + " was never initialised by its creator";
      return ncclSystemError;
    }
    std::atomic_ref<std::uint32_t>(header.attached).fetch_add(1, std::memory_order_acq_rel);
    *out = segment;
    return ncclSuccess;
  }
  *error = "timed out joining segment " + name;
  return ncclSystemError;
}

SharedSegment* SharedSegment::observe(const std::string& name) {
  int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) return nullptr;
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) < header_bytes()) {
    close(fd);
    return nullptr;
  }
  const auto bytes = static_cast<std::size_t>(st.st_size);
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) return nullptr;
  auto* header = static_cast<SegmentHeader*>(base);
  const int nranks = header->nranks;
  if (load_acquire(header->initialised) == 0 || nranks <= 0 || nranks > kMaxRanks || segment_bytes(nranks) != bytes) {
    munmap(base, bytes);
    return nullptr;
  }
  auto* segment = new SharedSegment(name, base, bytes, nranks);
  segment->detached_ = true;  // observers hold no reference, so they never unlink
  return segment;
}

void SharedSegment::detach() {
  if (detached_) return;
  detached_ = true;
  if (std::atomic_ref<std::uint32_t>(header().attached).fetch_sub(1, std::memory_order_acq_rel) == 1) {
    shm_unlink(name_.c_str());
  }
}

std::uint32_t SharedSegment::doorbell_value() {
  return std::atomic_ref<std::uint32_t>(header().doorbell).load(std::memory_order_seq_cst);
}

void SharedSegment::ring_doorbell() {
  SegmentHeader& h = header();
  std::atomic_ref<std::uint32_t>(h.doorbell).fetch_add(1, std::memory_order_seq_cst);
  if (std::atomic_ref<std::uint32_t>(h.sleepers).load(std::memory_order_seq_cst) != 0) futex_wake_all(&h.doorbell);
}

void SharedSegment::wait_doorbell(std::uint32_t seen, int timeout_ms) {
  SegmentHeader& h = header();
  std::atomic_ref<std::uint32_t> sleepers(h.sleepers);
  sleepers.fetch_add(1, std::memory_order_seq_cst);
  if (std::atomic_ref<std::uint32_t>(h.doorbell).load(std::memory_order_seq_cst) == seen) {
    futex_wait(&h.doorbell, seen, timeout_ms);
  }
  sleepers.fetch_sub(1, std::memory_order_seq_cst);
}

void SharedSegment::set_blocked(int r, const char* reason) {
  RankSlot& slot = rank(r);
  // Byte-wise atomic stores: an observer may read the text while it changes and must not see a data race.
  std::size_t i = 0;
  for (; i + 1 < kStuckReasonBytes && reason[i] != '\0'; ++i) {
    std::atomic_ref<char>(slot.stuck_reason[i]).store(reason[i], std::memory_order_relaxed);
  }
  std::atomic_ref<char>(slot.stuck_reason[i]).store('\0', std::memory_order_relaxed);
  store_release(slot.block_state, static_cast<std::uint32_t>(BlockState::kWaiting));
}

void SharedSegment::clear_blocked(int r) {
  store_release(rank(r).block_state, static_cast<std::uint32_t>(BlockState::kRunning));
}

}  // namespace tsfake
