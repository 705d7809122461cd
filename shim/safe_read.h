// Reads of this process's memory that fail instead of faulting, for pointers that have not been validated yet.
//
// Freestanding. Each read is a system call: for first sight and validation, never for a hot path.
#pragma once

#include <cstddef>
#include <cstdint>

namespace trainscope::shim {

// Reads through process_vm_readv on this process; where that system call is refused (a seccomp filter), through a
// pipe: write() copies from our memory and fails with EFAULT on an unreadable address, read() takes it back.
// Small reads fetch their whole aligned 256-byte block and keep the last few: a walk reads several fields of the same
// frame or object, and pays one system call for them. (A block never straddles two pages, and readability is per
// page, so a block holding readable bytes is readable.) The cache lives as long as the reader: one reader per walk,
// over memory that does not change during it, on one thread (it owns its pipe); never shared.
class SafeReader {
 public:
  SafeReader();
  ~SafeReader();
  SafeReader(const SafeReader&) = delete;
  SafeReader& operator=(const SafeReader&) = delete;

  // Copies n bytes at address `from` into `to`; false (and `to` unspecified) when any of them is not readable, or
  // when the reader could not check (then unavailable() is true).
  bool read(uintptr_t from, void* to, size_t n);

  // True once a read failed for want of resources (no file descriptor for the pipe, no kernel memory), which says
  // nothing about the address: the caller should try again later rather than conclude the memory is bad.
  bool unavailable() const { return unavailable_; }

  template <class T>
  bool get(uintptr_t from, T* value) {
    return read(from, value, sizeof(T));
  }

 private:
  static constexpr size_t kBlock = 256;
  static constexpr int kBlocks = 8;
  bool read_direct(uintptr_t from, void* to, size_t n);
  bool read_through_pipe(uintptr_t from, void* to, size_t n);
  const uint8_t* block(uintptr_t start);
  uintptr_t starts_[kBlocks] = {};  // 0: empty
  uint8_t blocks_[kBlocks][kBlock];
  int next_ = 0;
  int pid_;
  int pipe_[2] = {-1, -1};
  bool unavailable_ = false;
};

// Tests only: makes every SafeReader use the pipe (as where process_vm_readv is refused), or not.
void force_safe_reads_through_pipe(bool on);

}  // namespace trainscope::shim
