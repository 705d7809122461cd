// A bounded multi-producer, multi-consumer queue of trivially copyable values without locks (Dmitry Vyukov's:
// each cell carries a sequence number that says whose turn it is). Neither side ever waits: push() on a full queue
// and pop() on an empty one return false at once, and so does pop() on a cell whose producer has claimed it but not
// yet filled it (a thread preempted in between): the caller does without, rather than wait on another thread.
// That is what a job's thread needs from a structure it shares with trainscope's own, lower-priority threads.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>

namespace trainscope::engine {

template <typename T>
class BoundedQueue {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  // `capacity` is rounded up to a power of two.
  explicit BoundedQueue(size_t capacity) : mask_(round_up(capacity) - 1), cells_(new Cell[mask_ + 1]) {
    for (size_t i = 0; i <= mask_; ++i) cells_[i].turn.store(i, std::memory_order_relaxed);
  }
  BoundedQueue(const BoundedQueue&) = delete;
  BoundedQueue& operator=(const BoundedQueue&) = delete;

  bool push(T value) {
    size_t at = tail_.load(std::memory_order_relaxed);
    for (;;) {
      Cell& cell = cells_[at & mask_];
      const size_t turn = cell.turn.load(std::memory_order_acquire);
      const auto ahead = static_cast<std::ptrdiff_t>(turn - at);
      if (ahead == 0) {
        if (tail_.compare_exchange_weak(at, at + 1, std::memory_order_relaxed)) {
          cell.value = value;
          cell.turn.store(at + 1, std::memory_order_release);
          return true;
        }
      } else if (ahead < 0) {
        return false;  // full
      } else {
        at = tail_.load(std::memory_order_relaxed);
      }
    }
  }

  bool pop(T* value) {
    size_t at = head_.load(std::memory_order_relaxed);
    for (;;) {
      Cell& cell = cells_[at & mask_];
      const size_t turn = cell.turn.load(std::memory_order_acquire);
      const auto ahead = static_cast<std::ptrdiff_t>(turn - (at + 1));
      if (ahead == 0) {
        if (head_.compare_exchange_weak(at, at + 1, std::memory_order_relaxed)) {
          *value = cell.value;
          cell.turn.store(at + mask_ + 1, std::memory_order_release);
          return true;
        }
      } else if (ahead < 0) {
        return false;  // empty, or its next value not written yet
      } else {
        at = head_.load(std::memory_order_relaxed);
      }
    }
  }

  size_t capacity() const { return mask_ + 1; }

 private:
  struct Cell {
    std::atomic<size_t> turn;
    T value;
  };
  static size_t round_up(size_t n) {
    size_t p = 1;
    while (p < n) p <<= 1;
    return p;
  }

  const size_t mask_;
  std::unique_ptr<Cell[]> cells_;
  alignas(64) std::atomic<size_t> head_{0};
  alignas(64) std::atomic<size_t> tail_{0};
};

}  // namespace trainscope::engine
