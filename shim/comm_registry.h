// What the shim knows about each live communicator: its id, rank, size and per-communicator call counters.
//
// A fixed open-addressing table keyed by the ncclComm_t pointer. Lookups (on every intercepted call) are
// lock-free; registration happens at communicator creation under a lock. Freestanding: libc only; the per-peer
// send/recv counters are mmap()ed at registration, never on the hot path.
#pragma once

#include <atomic>
#include <cstdint>

#include "base/flight_record_format.h"

namespace trainscope::shim {

struct CommInfo {
  std::atomic<uintptr_t> handle;  // ncclComm_t; 0 = empty slot
  uint64_t id;
  uint64_t parent_id;
  int32_t rank;
  int32_t nranks;
  std::atomic<uint64_t> collective_seq;  // last collective sequence number handed out (1-based)
  std::atomic<uint64_t> split_count;     // ncclCommSplit/ncclCommShrink calls on this communicator
  std::atomic<uint64_t>* peer_seq;       // 2 * nranks counters: [peer] sends, [nranks + peer] receives
  recorder::CommEntry* entry;            // its row in the flight recorder, or nullptr
  bool nonblocking;
  bool adopted;  // first seen in a call, not at creation (created before we started)
};

inline constexpr int kMaxLiveComms = 4096;

// Finds the communicator; nullptr if unknown.
CommInfo* find_comm(const void* handle);

// Registers (or re-registers, when NCCL reuses a freed pointer) a communicator. Returns nullptr when the table
// is full (the call is still recorded, without per-communicator numbering).
CommInfo* register_comm(const void* handle, uint64_t id, uint64_t parent_id, int32_t rank, int32_t nranks,
                        bool nonblocking);

// Next sequence number for a collective, or for a send to / receive from `peer` (1-based).
uint64_t next_collective_seq(CommInfo* comm);
uint64_t next_peer_seq(CommInfo* comm, int32_t peer, bool receive);

// Forgets the communicator (destroyed or aborted); its slot may be reused.
void unregister_comm(const void* handle);

// How many communicators were registered since the start (or the fork), ended ones included.
uint64_t comms_registered();

// Forgets everything without freeing (a forked child: its parent's communicators are not its own).
void reset_comm_registry();

// Ids (DESIGN "Identity"): a 64-bit hash of a unique id's bytes; children derived from parent, split count, color.
uint64_t comm_id_from_unique_ids(const void* bytes, uint64_t length);
uint64_t comm_id_for_child(uint64_t parent_id, uint64_t split_count, int64_t color);
inline constexpr int64_t kShrinkColor = -0x5348524BLL;  // children of ncclCommShrink (no color of their own)

}  // namespace trainscope::shim
