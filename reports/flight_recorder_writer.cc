// Writes one process's flight recorder file: freestanding (libc only), lock-free append, crash-safe commits.
#include "reports/flight_recorder_writer.h"

#include "reports/private_files.h"
#include "reports/thread_fence.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

namespace trainscope::recorder {
namespace {

// Copies a C string into a fixed field, always leaving it NUL-terminated; nullptr leaves the field empty.
void copy_field(char* field, size_t field_size, const char* text) {
  if (text == nullptr) return;
  size_t n = strnlen(text, field_size - 1);
  memcpy(field, text, n);
  field[n] = '\0';
}

// Closes the fd and removes the half-made file, keeping the errno that stopped open().
int fail_open(int error, int fd, const char* path, void* map, size_t bytes) {
  if (map != nullptr) munmap(map, bytes);
  if (fd >= 0) ::close(fd);
  unlink(path);
  return error;
}

}  // namespace

int Writer::open(const WriterOptions& options) {
  if (header_ != nullptr) return EBUSY;
  if (options.path == nullptr || options.path[0] == '\0' || options.capacity == 0) return EINVAL;
  // Reject a capacity whose file size would overflow size_t (and off_t) instead of mapping a wrapped size.
  const uint64_t max_records = (uint64_t{1} << 62) / sizeof(Record);
  if (options.capacity > max_records) return EFBIG;
  const size_t bytes = file_bytes(options.max_comms, options.max_sites, options.capacity);

  const int fd = files::create_file(options.path, O_RDWR);
  if (fd < 0) return -fd;  // O_EXCL: an existing file is someone else's; never unlink it
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) return fail_open(errno, fd, options.path, nullptr, 0);
  // Reserve the blocks now: a full disk must fail here, not as SIGBUS on a store into the mapping mid-job.
  // Filesystems without fallocate support keep the sparse file (glibc emulates where it can).
  const int falloc = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (falloc != 0 && falloc != EOPNOTSUPP && falloc != ENOSYS && falloc != EINVAL) {
    return fail_open(falloc, fd, options.path, nullptr, 0);
  }
  void* map = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) return fail_open(errno, fd, options.path, nullptr, 0);
  ::close(fd);  // the mapping keeps the file alive

  // The file is all zeros from ftruncate; fill every field, then the magic last, so a reader that sees the
  // magic sees a complete header even if this process dies half-way through open().
  auto* header = static_cast<FileHeader*>(map);
  header->version = kFormatVersion;
  header->header_bytes = kHeaderBytes;
  header->record_bytes = sizeof(Record);
  header->comm_bytes = sizeof(CommEntry);
  header->capacity = options.capacity;
  header->max_comms = options.max_comms;
  header->pid = options.pid;
  header->launcher_rank = options.launcher_rank;
  header->launcher_world = options.launcher_world;
  header->local_rank = options.local_rank;
  header->global_rank = options.launcher_rank;
  header->nccl_version = 0;
  header->state = static_cast<uint32_t>(ProcessState::kRunning);
  header->start_ns = options.start_ns;
  header->next = 0;
  header->comms_used = 0;
  header->sites_used = 0;
  header->exit_ns = 0;
  copy_field(header->host, sizeof(header->host), options.host);
  copy_field(header->run_id, sizeof(header->run_id), options.run_id);
  copy_field(header->exe, sizeof(header->exe), options.exe);
  header->max_sites = options.max_sites;
  header->python_major = 0;
  header->python_minor = 0;
  TS_THREAD_FENCE(__ATOMIC_RELEASE);
  memcpy(header->magic, kMagic, sizeof(kMagic));

  header_ = header;
  comms_ = reinterpret_cast<CommEntry*>(static_cast<char*>(map) + comm_table_offset());
  sites_ = reinterpret_cast<SiteEntry*>(static_cast<char*>(map) + site_table_offset(options.max_comms));
  ring_ = reinterpret_cast<Record*>(static_cast<char*>(map) + ring_offset(options.max_comms, options.max_sites));
  capacity_ = options.capacity;
  max_comms_ = options.max_comms;
  max_sites_ = options.max_sites;
  mapped_bytes_ = bytes;
  dropped_comms_ = 0;
  dropped_sites_ = 0;
  return 0;
}

void Writer::close(uint64_t exit_ns) {
  if (header_ == nullptr) return;
  __atomic_store_n(&header_->exit_ns, exit_ns, __ATOMIC_RELAXED);
  __atomic_store_n(&header_->state, static_cast<uint32_t>(ProcessState::kExited), __ATOMIC_RELEASE);
  abandon();
}

void Writer::abandon() {
  if (header_ == nullptr) return;
  munmap(header_, mapped_bytes_);
  header_ = nullptr;
  comms_ = nullptr;
  sites_ = nullptr;
  ring_ = nullptr;
  capacity_ = 0;
  max_comms_ = 0;
  max_sites_ = 0;
  mapped_bytes_ = 0;
}

Pending Writer::append(const Record& r) {
  if (header_ == nullptr) return {nullptr, 0};
  // Relaxed is enough to claim: publication of the slot's contents is the commit store below.
  const uint64_t index = __atomic_fetch_add(&header_->next, 1, __ATOMIC_RELAXED);
  // Power-of-two rings (the default sizes) avoid a 64-bit division on every call.
  const uint64_t mask = capacity_ - 1;
  Record* slot = &ring_[(capacity_ & mask) == 0 ? index & mask : index % capacity_];

  // Invalidate first, fenced, so no reader (or post-mortem look after SIGKILL) pairs the old commit with a
  // mix of old and new fields.
  __atomic_store_n(&slot->commit, uint64_t{0}, __ATOMIC_RELAXED);
  TS_THREAD_FENCE(__ATOMIC_RELEASE);
  memcpy(reinterpret_cast<char*>(slot) + kChecksummedBegin, reinterpret_cast<const char*>(&r) + kChecksummedBegin,
         kChecksummedEnd - kChecksummedBegin);
  // Checksum the caller's copy, not the slot: if a lapping writer scribbles on the slot meanwhile, the two
  // disagree and the reader drops the slot instead of trusting a mixture.
  slot->checksum = record_checksum(r);
  slot->end_ns = 0;
  slot->result = kResultPending;
  const uint64_t commit = index + 1;
  __atomic_store_n(&slot->commit, commit, __ATOMIC_RELEASE);
  return {slot, commit};
}

void Writer::complete(const Pending& pending, int32_t result, uint64_t end_ns) {
  if (pending.slot == nullptr) return;
  // A slot lapped by the ring belongs to a newer call; writing our result there would lie about it.
  if (__atomic_load_n(&pending.slot->commit, __ATOMIC_ACQUIRE) != pending.commit) return;
  __atomic_store_n(&pending.slot->end_ns, end_ns, __ATOMIC_RELAXED);
  // Release: a reader that sees the result also sees end_ns.
  __atomic_store_n(&pending.slot->result, result, __ATOMIC_RELEASE);
}

CommEntry* Writer::add_comm(const CommEntry& entry) {
  if (header_ == nullptr) return nullptr;
  // CAS instead of fetch_add so comms_used never counts past the table and readers can trust it.
  uint32_t index = __atomic_load_n(&header_->comms_used, __ATOMIC_RELAXED);
  do {
    if (index >= max_comms_) {
      __atomic_fetch_add(&dropped_comms_, 1, __ATOMIC_RELAXED);
      return nullptr;
    }
  } while (
      !__atomic_compare_exchange_n(&header_->comms_used, &index, index + 1, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
  CommEntry* slot = &comms_[index];
  __atomic_store_n(&slot->commit, uint64_t{0}, __ATOMIC_RELAXED);
  TS_THREAD_FENCE(__ATOMIC_RELEASE);
  memcpy(reinterpret_cast<char*>(slot) + sizeof(slot->commit),
         reinterpret_cast<const char*>(&entry) + sizeof(entry.commit), sizeof(CommEntry) - sizeof(entry.commit));
  __atomic_store_n(&slot->commit, uint64_t{index} + 1, __ATOMIC_RELEASE);
  return slot;
}

uint32_t Writer::add_site(const SiteEntry& entry) {
  if (header_ == nullptr) return 0;
  // As add_comm(): a CAS, so sites_used never counts past the table.
  uint32_t index = __atomic_load_n(&header_->sites_used, __ATOMIC_RELAXED);
  do {
    if (index >= max_sites_) {
      __atomic_fetch_add(&dropped_sites_, 1, __ATOMIC_RELAXED);
      return 0;
    }
  } while (
      !__atomic_compare_exchange_n(&header_->sites_used, &index, index + 1, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
  SiteEntry* slot = &sites_[index];
  __atomic_store_n(&slot->commit, uint64_t{0}, __ATOMIC_RELAXED);
  TS_THREAD_FENCE(__ATOMIC_RELEASE);
  memcpy(reinterpret_cast<char*>(slot) + sizeof(slot->commit),
         reinterpret_cast<const char*>(&entry) + sizeof(entry.commit), sizeof(SiteEntry) - sizeof(entry.commit));
  // The caller's strings may fill their fields: the last byte of each is NUL in the file whatever they held.
  if (slot->python_frames > 2) slot->python_frames = 2;
  for (SiteFrame& frame : slot->frames) {
    frame.function[sizeof(frame.function) - 1] = '\0';
    frame.file[sizeof(frame.file) - 1] = '\0';
  }
  const uint32_t id = index + 1;
  __atomic_store_n(&slot->commit, uint64_t{id}, __ATOMIC_RELEASE);
  return id;
}

void Writer::set_python(int major, int minor, const char* note) {
  if (header_ == nullptr) return;
  copy_field(header_->python_note, sizeof(header_->python_note), note == nullptr ? "" : note);
  __atomic_store_n(&header_->python_minor, static_cast<int16_t>(minor), __ATOMIC_RELAXED);
  __atomic_store_n(&header_->python_major, static_cast<int16_t>(major), __ATOMIC_RELEASE);
}

void Writer::set_comm_state(CommEntry* entry, CommState state, uint64_t ended_ns) {
  if (entry == nullptr) return;
  __atomic_store_n(&entry->ended_ns, ended_ns, __ATOMIC_RELAXED);
  __atomic_store_n(&entry->state, static_cast<uint16_t>(state), __ATOMIC_RELEASE);
}

void Writer::set_global_rank(int32_t rank) {
  if (header_ != nullptr) __atomic_store_n(&header_->global_rank, rank, __ATOMIC_RELAXED);
}

void Writer::set_nccl_version(int32_t version) {
  if (header_ != nullptr) __atomic_store_n(&header_->nccl_version, version, __ATOMIC_RELAXED);
}

}  // namespace trainscope::recorder
