// Writes one process's flight recorder file: freestanding (libc only), lock-free append, crash-safe commits.
#include "base/flight_recorder_writer.h"

#include "base/private_files.h"
#include "base/thread_fence.h"

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

// Claims the next slot of a table whose `used` counter is in the header. A CAS instead of fetch_add, so `used` never
// counts past the table and readers can trust it. False (and `dropped` grows) when the table is full.
bool claim_slot(uint32_t* used, uint32_t max, uint64_t* dropped, uint32_t* index) {
  uint32_t at = __atomic_load_n(used, __ATOMIC_RELAXED);
  do {
    if (at >= max) {
      __atomic_fetch_add(dropped, 1, __ATOMIC_RELAXED);
      return false;
    }
  } while (!__atomic_compare_exchange_n(used, &at, at + 1, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
  *index = at;
  return true;
}

// Copies `text` into a fixed field, NUL-terminated; a text too long for it is cut and ends "..." so a reader knows.
void copy_cut_text(char* field, size_t field_size, const char* text) {
  if (text == nullptr) text = "";
  const size_t n = strnlen(text, field_size);
  if (n < field_size) {
    memcpy(field, text, n + 1);
    return;
  }
  const size_t kept = field_size - 4;  // room for "..." and the NUL
  memcpy(field, text, kept);
  memcpy(field + kept, "...", 4);
}

}  // namespace

int Writer::open(const WriterOptions& options) {
  if (header_ != nullptr) return EBUSY;
  if (options.path == nullptr || options.path[0] == '\0' || options.capacity == 0) return EINVAL;
  // Reject a capacity whose file size would overflow size_t (and off_t) instead of mapping a wrapped size.
  const uint64_t max_records = (uint64_t{1} << 62) / sizeof(Record);
  if (options.capacity > max_records) return EFBIG;
  const size_t bytes =
      file_bytes(options.max_comms, options.max_sites, options.capacity, options.max_names, options.max_streams);

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
  header->max_names = options.max_names;
  header->max_streams = options.max_streams;
  header->launch_mode = static_cast<uint32_t>(LaunchMode::kNone);
  TS_THREAD_FENCE(__ATOMIC_RELEASE);
  memcpy(header->magic, kMagic, sizeof(kMagic));

  use_mapping(header);
  attached_ = false;
  mapped_bytes_ = bytes;
  return 0;
}

void Writer::use_mapping(FileHeader* header) {
  char* base = reinterpret_cast<char*>(header);
  const uint32_t max_sites = max_sites_of(*header);
  const uint32_t max_names = max_names_of(*header);
  header_ = header;
  comms_ = reinterpret_cast<CommEntry*>(base + comm_table_offset());
  sites_ = reinterpret_cast<SiteEntry*>(base + site_table_offset(header->max_comms));
  names_ = reinterpret_cast<NameEntry*>(base + name_table_offset(header->max_comms, max_sites));
  streams_ = reinterpret_cast<StreamEntry*>(base + stream_table_offset(header->max_comms, max_sites, max_names));
  ring_ = reinterpret_cast<Record*>(base + ring_offset(*header));
  capacity_ = header->capacity;
  max_comms_ = header->max_comms;
  max_sites_ = max_sites;
  max_names_ = max_names;
  max_streams_ = max_streams_of(*header);
  dropped_comms_ = 0;
  dropped_sites_ = 0;
  dropped_names_ = 0;
  dropped_streams_ = 0;
}

bool Writer::attach(FileHeader* header) {
  if (header_ != nullptr || header == nullptr) return false;
  // Only a header this build's writer made: the layout below is computed from it and then written through.
  if (memcmp(header->magic, kMagic, sizeof(kMagic)) != 0 || header->version != kFormatVersion ||
      header->header_bytes != kHeaderBytes || header->record_bytes != sizeof(Record) ||
      header->comm_bytes != sizeof(CommEntry) || header->capacity == 0) {
    return false;
  }
  use_mapping(header);
  attached_ = true;
  mapped_bytes_ = 0;
  return true;
}

void Writer::close(uint64_t exit_ns) {
  if (header_ == nullptr) return;
  if (attached_) {  // the owner says when the process exited
    abandon();
    return;
  }
  __atomic_store_n(&header_->exit_ns, exit_ns, __ATOMIC_RELAXED);
  __atomic_store_n(&header_->state, static_cast<uint32_t>(ProcessState::kExited), __ATOMIC_RELEASE);
  abandon();
}

void Writer::abandon() {
  if (header_ == nullptr) return;
  if (!attached_) munmap(header_, mapped_bytes_);  // an attached writer's mapping is its owner's
  header_ = nullptr;
  comms_ = nullptr;
  sites_ = nullptr;
  names_ = nullptr;
  streams_ = nullptr;
  ring_ = nullptr;
  capacity_ = 0;
  max_comms_ = 0;
  max_sites_ = 0;
  max_names_ = 0;
  max_streams_ = 0;
  mapped_bytes_ = 0;
  attached_ = false;
}

Pending Writer::append(const Record& r, int32_t result, uint64_t end_ns) {
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
  slot->end_ns = end_ns;
  slot->result = result;
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
  uint32_t index = 0;
  if (!claim_slot(&header_->comms_used, max_comms_, &dropped_comms_, &index)) return nullptr;
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
  uint32_t index = 0;
  if (!claim_slot(&header_->sites_used, max_sites_, &dropped_sites_, &index)) return 0;
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

uint32_t Writer::add_name(uint64_t key, const char* text) {
  if (header_ == nullptr) return 0;
  uint32_t index = 0;
  if (!claim_slot(&header_->names_used, max_names_, &dropped_names_, &index)) return 0;
  NameEntry* slot = &names_[index];
  __atomic_store_n(&slot->commit, uint64_t{0}, __ATOMIC_RELAXED);
  TS_THREAD_FENCE(__ATOMIC_RELEASE);
  slot->key = key;
  copy_cut_text(slot->text, sizeof(slot->text), text);
  const uint32_t id = index + 1;
  __atomic_store_n(&slot->commit, uint64_t{id}, __ATOMIC_RELEASE);
  return id;
}

StreamEntry* Writer::add_stream(uint64_t stream, uint64_t context) {
  if (header_ == nullptr) return nullptr;
  uint32_t index = 0;
  if (!claim_slot(&header_->streams_used, max_streams_, &dropped_streams_, &index)) return nullptr;
  StreamEntry* slot = &streams_[index];
  __atomic_store_n(&slot->commit, uint64_t{0}, __ATOMIC_RELAXED);
  TS_THREAD_FENCE(__ATOMIC_RELEASE);
  slot->stream = stream;
  slot->context = context;
  slot->launched_seq = 0;
  slot->completed_seq = 0;
  slot->completed_ns = 0;
  slot->checked_ns = 0;
  slot->launches = 0;
  slot->reserved = 0;
  __atomic_store_n(&slot->commit, uint64_t{index} + 1, __ATOMIC_RELEASE);
  return slot;
}

void Writer::set_stream_launched(StreamEntry* entry, uint64_t seq) {
  if (entry == nullptr) return;
  __atomic_store_n(&entry->launched_seq, seq, __ATOMIC_RELAXED);
  __atomic_fetch_add(&entry->launches, 1u, __ATOMIC_RELAXED);
}

void Writer::set_stream_completed(StreamEntry* entry, uint64_t seq, uint64_t completed_ns, uint64_t checked_ns) {
  if (entry == nullptr) return;
  // completed_seq only grows: an activity record delivered late (an older kernel) must not take back what a later
  // one or a synchronisation already proved. Its time moves with it, so the pair stays consistent for a reader
  // that sees the new seq.
  uint64_t known = __atomic_load_n(&entry->completed_seq, __ATOMIC_RELAXED);
  while (seq > known) {
    if (__atomic_compare_exchange_n(&entry->completed_seq, &known, seq, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
      __atomic_store_n(&entry->completed_ns, completed_ns, __ATOMIC_RELAXED);
      break;
    }
  }
  __atomic_store_n(&entry->checked_ns, checked_ns, __ATOMIC_RELEASE);
}

void Writer::set_launch_mode(LaunchMode mode, const char* note) {
  if (header_ == nullptr) return;
  copy_field(header_->launch_note, sizeof(header_->launch_note), note == nullptr ? "" : note);
  __atomic_store_n(&header_->launch_mode, static_cast<uint32_t>(mode), __ATOMIC_RELEASE);
}

bool Writer::count_cuda_error() {
  if (header_ == nullptr) return false;
  return __atomic_fetch_add(&header_->cuda_errors, 1u, __ATOMIC_RELAXED) == 0;
}

void Writer::set_first_error(uint64_t index) {
  if (header_ != nullptr) __atomic_store_n(&header_->first_error_index, index, __ATOMIC_RELEASE);
}

void Writer::set_completions_checked(uint64_t ns) {
  if (header_ != nullptr) __atomic_store_n(&header_->completions_ns, ns, __ATOMIC_RELEASE);
}

void Writer::count_dropped_launch() {
  if (header_ != nullptr) __atomic_fetch_add(&header_->dropped_launches, uint64_t{1}, __ATOMIC_RELAXED);
}

void Writer::set_global_rank(int32_t rank) {
  if (header_ != nullptr) __atomic_store_n(&header_->global_rank, rank, __ATOMIC_RELAXED);
}

void Writer::set_nccl_version(int32_t version) {
  if (header_ != nullptr) __atomic_store_n(&header_->nccl_version, version, __ATOMIC_RELAXED);
}

}  // namespace trainscope::recorder
