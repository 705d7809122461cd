// Reading this process's own flight recorder while the job's threads write it: the engine's background threads
// (the exchange, the frame watcher) each tail the ring with a cursor of their own.
//
// The ring is a lock-free bounded queue: a record is final once its commit word equals its index + 1, and a slot
// is reused when the writers lap the ring. Readers never block writers; a record overwritten before it is read is
// lost and counted.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/flight_record_format.h"
#include "base/thread_fence.h"

namespace trainscope::engine {

inline const recorder::Record* ring_of(const recorder::FileHeader* header) {
  return reinterpret_cast<const recorder::Record*>(reinterpret_cast<const char*>(header) +
                                                   recorder::ring_offset(*header));
}

inline const recorder::CommEntry* comms_of(const recorder::FileHeader* header) {
  return reinterpret_cast<const recorder::CommEntry*>(reinterpret_cast<const char*>(header) +
                                                      recorder::comm_table_offset());
}

// Reads a committed record from the live ring; false if the slot does not (or no longer) hold record `index`.
// The fields a job thread may still change (result, end time) are read atomically, the others are final once
// committed; the commit is checked again after the copy so a slot reused meanwhile is not misread.
// Not instrumented by ThreadSanitizer: this is a seqlock read, racing by design with a writer that laps the ring;
// the commit re-check and the checksum reject whatever such a race tore.
__attribute__((no_sanitize_thread)) inline bool read_live_record(const recorder::FileHeader* header, uint64_t index,
                                                                 recorder::Record* out) {
  using recorder::Record;
  const Record* slot = &ring_of(header)[index % header->capacity];
  if (__atomic_load_n(&slot->commit, __ATOMIC_ACQUIRE) != index + 1) return false;
  // Word by word with relaxed atomic loads: a memcpy here would be intercepted (and reported) by TSan anyway.
  static_assert(offsetof(Record, checksum) % sizeof(uint64_t) == 0);
  const auto* from = reinterpret_cast<const uint64_t*>(slot);
  auto* to = reinterpret_cast<uint64_t*>(out);
  for (size_t i = 0; i < offsetof(Record, checksum) / sizeof(uint64_t); ++i)
    to[i] = __atomic_load_n(&from[i], __ATOMIC_RELAXED);
  out->checksum = __atomic_load_n(&slot->checksum, __ATOMIC_RELAXED);
  out->result = __atomic_load_n(&slot->result, __ATOMIC_ACQUIRE);
  out->end_ns = __atomic_load_n(&slot->end_ns, __ATOMIC_RELAXED);
  TS_THREAD_FENCE(__ATOMIC_ACQUIRE);
  if (__atomic_load_n(&slot->commit, __ATOMIC_RELAXED) != index + 1) return false;
  return recorder::record_checksum(*out) == out->checksum;
}

// The result of record `index` as it is now: kResultPending while the call runs, kResultPending - 1 when the slot
// was reused (the record is gone).
__attribute__((no_sanitize_thread)) inline int32_t live_result(const recorder::FileHeader* header, uint64_t index) {
  const recorder::Record* slot = &ring_of(header)[index % header->capacity];
  const int32_t result = __atomic_load_n(&slot->result, __ATOMIC_ACQUIRE);
  if (__atomic_load_n(&slot->commit, __ATOMIC_ACQUIRE) != index + 1) return recorder::kResultPending - 1;  // lapped
  return result;
}

// One reader's position in the ring. poll() hands every record committed since the last poll to `fn(index, r)` in
// order and stops at the first slot still being written (it is read on the next poll).
class RingCursor {
 public:
  template <typename Fn>
  void poll(const recorder::FileHeader* header, Fn&& fn) {
    if (header == nullptr) return;
    const uint64_t next = __atomic_load_n(&header->next, __ATOMIC_ACQUIRE);
    poll_until(header, next, fn);
  }

  // As poll(), up to `next` (a value of header->next read by the caller).
  template <typename Fn>
  void poll_until(const recorder::FileHeader* header, uint64_t next, Fn&& fn) {
    if (next > cursor_ + header->capacity) {
      dropped_ += next - header->capacity - cursor_;  // lapped before we read them
      cursor_ = next - header->capacity;
    }
    while (cursor_ < next) {
      recorder::Record r{};  // zeroed: GCC cannot see read_live_record's word-wise copy fill it
      if (!read_live_record(header, cursor_, &r)) {
        if (next - cursor_ >= header->capacity) {  // overwritten meanwhile: lost, move on
          ++dropped_;
          ++cursor_;
          continue;
        }
        return;  // still being written
      }
      fn(cursor_, r);
      ++cursor_;
    }
  }

  uint64_t position() const { return cursor_; }
  uint64_t dropped() const { return dropped_; }

 private:
  uint64_t cursor_ = 0;
  uint64_t dropped_ = 0;
};

}  // namespace trainscope::engine
