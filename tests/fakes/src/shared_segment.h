// Layout of the POSIX shared-memory segment one communicator's ranks meet in, and how they wait on it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include <nccl.h>

namespace tsfake {

inline constexpr std::uint64_t kUniqueIdMagic = 0x3130454b41465354ull;  // "TSFAKE01"
inline constexpr std::size_t kUniqueIdNameOffset = 8;
inline constexpr std::uint64_t kSegmentMagic = 0x544e454d47455354ull;
inline constexpr int kMaxRanks = 64;
// Small on purpose: tests cross chunk boundaries with modest buffers, and a 64-rank segment stays a sparse 80 MB.
inline constexpr std::size_t kStagingBytes = 16 * 1024;
inline constexpr std::size_t kChannelRingBytes = 16 * 1024;
inline constexpr std::uint64_t kMaxMessagesInFlight = 64;
inline constexpr std::size_t kStuckReasonBytes = 256;

// What a rank announces before a collective so that every member can check they agree.
struct CollectiveDescriptor {
  std::uint64_t sequence;  // 1-based; 0 means "nothing posted yet"
  std::uint32_t kind;
  std::uint32_t datatype;
  std::uint32_t op_kind;
  std::int32_t root;
  std::uint64_t count;
};

struct MessageDescriptor {
  std::uint64_t count;
  std::uint64_t datatype;
};

enum class BlockState : std::uint32_t { kRunning = 0, kWaiting = 1 };

struct alignas(64) RankSlot {
  std::uint32_t arrived;
  std::uint32_t block_state;
  std::uint64_t posted_ticket;          // staging chunks this rank has published
  std::uint64_t consumed_ticket;        // staging chunks this rank has finished reading
  CollectiveDescriptor descriptors[2];  // indexed by sequence parity; peers can lag by at most one collective
  char stuck_reason[kStuckReasonBytes];
  alignas(64) unsigned char staging[kStagingBytes];
};

// One direction of a rank pair: messages from src to dst stream in order through a byte ring.
struct alignas(64) Channel {
  std::uint64_t sends_posted;  // descriptors of messages 0..sends_posted-1 are readable
  std::uint64_t recvs_done;    // messages fully received; also the index of the message allowed to stream
  std::uint64_t bytes_written;
  std::uint64_t bytes_read;
  MessageDescriptor send_descriptors[kMaxMessagesInFlight];
  alignas(64) unsigned char ring[kChannelRingBytes];
};

struct alignas(64) SegmentHeader {
  std::uint64_t magic;
  std::uint32_t initialised;  // futex word: late joiners sleep on it until the creator has laid the segment out
  std::uint32_t doorbell;     // futex word: bumped after every state change anyone may be waiting for
  std::uint32_t sleepers;
  std::int32_t nranks;
  std::uint32_t attached;  // mappings alive; the last one to detach unlinks the name
  std::uint32_t padding;
};

std::size_t segment_bytes(int nranks);

template <typename T>
T load_acquire(const T& field) {
  return std::atomic_ref<T>(const_cast<T&>(field)).load(std::memory_order_acquire);
}
template <typename T>
void store_release(T& field, T value) {
  std::atomic_ref<T>(field).store(value, std::memory_order_release);
}

// A mapping of one segment by one communicator (in-process communicators each hold their own mapping).
class SharedSegment {
 public:
  // Creates the segment if this caller is first, otherwise opens it and waits (bounded) until it is laid out.
  static ncclResult_t join(const std::string& name, int nranks, SharedSegment** out, std::string* error);
  // Read-only observer used by the debug hook; returns nullptr when the segment does not exist or is not ready.
  static SharedSegment* observe(const std::string& name);
  ~SharedSegment();
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;

  // Drops this mapping's reference; the last reference unlinks the name so nothing is left in /dev/shm.
  void detach();

  int nranks() const { return nranks_; }
  const std::string& name() const { return name_; }
  SegmentHeader& header() { return *reinterpret_cast<SegmentHeader*>(base_); }
  RankSlot& rank(int r);
  Channel& channel(int src, int dst);

  std::uint32_t doorbell_value();
  void ring_doorbell();
  // Sleeps until the doorbell moves away from `seen` or the timeout passes; never spins.
  void wait_doorbell(std::uint32_t seen, int timeout_ms);

  void set_blocked(int rank, const char* reason);
  void clear_blocked(int rank);

 private:
  SharedSegment(std::string name, void* base, std::size_t bytes, int nranks);
  std::string name_;
  void* base_;
  std::size_t bytes_;
  int nranks_;
  bool detached_ = false;
};

int futex_wait(std::uint32_t* word, std::uint32_t expected, int timeout_ms);
void futex_wake_all(std::uint32_t* word);

}  // namespace tsfake
