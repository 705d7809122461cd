// Writes one process's flight recorder file (format in flight_record_format.h).
//
// Freestanding (libc only, no allocation after open, no locks, no exceptions): it runs inside the preloaded shim
// on the job's threads. append() is lock-free and safe from any number of threads.
#pragma once

#include <cstdint>

#include "base/flight_record_format.h"

namespace trainscope::recorder {

struct WriterOptions {
  const char* path;      // file to create; must not exist (O_EXCL)
  uint64_t capacity;     // record slots
  uint32_t max_comms;    // comm slots
  uint32_t max_sites;    // site slots (kDefaultMaxSites); 0: no site table, add_site() always returns 0
  uint32_t max_names;    // name slots (kDefaultMaxNames); 0: no name table, add_name() always returns 0
  uint32_t max_streams;  // stream slots (kDefaultMaxStreams); 0: no stream table, add_stream() returns nullptr
  int32_t pid;
  int32_t launcher_rank;
  int32_t launcher_world;
  int32_t local_rank;
  const char* host;
  const char* run_id;
  const char* exe;
  uint64_t start_ns;
};

// What append() hands back so the caller can later store the call's result into the same slot.
struct Pending {
  Record* slot;     // nullptr when the writer is not open
  uint64_t commit;  // index + 1 the slot was committed with; complete() checks it so a lapped slot is left alone
};

class Writer {
 public:
  // Creates the file (files::create_file: mode 0600, O_EXCL, never through a link), sizes it, maps it MAP_SHARED and
  // writes the header. Returns 0 on success or an errno value (EEXIST: the name is taken) or a files:: refusal
  // (files::error_text says which); on failure the writer stays closed.
  int open(const WriterOptions& options);

  // Marks the process as exited in the header and unmaps the file.
  void close(uint64_t exit_ns);

  // For a forked child: drops the mapping without writing to it (the parent still owns the file).
  void abandon();

  bool is_open() const { return header_ != nullptr; }
  FileHeader* header() const { return header_; }

  // Claims the next slot, copies `r` into it (commit, checksum, result and end_ns are set here: result to
  // kResultPending for a call still running) and commits it. Returns {nullptr, 0} when closed.
  Pending append(const Record& r) { return append(r, kResultPending, 0); }
  // The same for something recorded once it has ended (a kernel launch, recorded at its API call's exit): the result
  // and end time are in the slot when it is committed, so no reader ever sees it pending.
  Pending append(const Record& r, int32_t result, uint64_t end_ns);

  // Stores the call's result and end time into the slot, if it still holds the same record.
  static void complete(const Pending& pending, int32_t result, uint64_t end_ns);

  // Claims a comm slot and commits `entry` into it. Returns nullptr when closed or when the table is full
  // (then dropped_comms() grows).
  CommEntry* add_comm(const CommEntry& entry);
  static void set_comm_state(CommEntry* entry, CommState state, uint64_t ended_ns);
  uint64_t dropped_comms() const { return __atomic_load_n(&dropped_comms_, __ATOMIC_RELAXED); }

  // Claims the next site slot, copies `entry` into it (its commit is set here) and commits it: lock-free, like
  // add_comm(). Returns the site's id (slot index + 1, what Record::site holds), or 0 when closed or when the table
  // is full (then dropped_sites() grows). The caller keeps the ids it got: nothing here looks an entry up.
  uint32_t add_site(const SiteEntry& entry);
  uint64_t dropped_sites() const { return __atomic_load_n(&dropped_sites_, __ATOMIC_RELAXED); }

  // The Python this process runs (major 0: none) and why Python stacks are not available (nullptr or "": they are).
  // Call once Python is known; the note is stored before the version, so a reader that sees the version sees the
  // whole note.
  void set_python(int major, int minor, const char* note);

  // ---- Version 3: the launch collector (it runs in the engine, over the shim's mapping: see attach()) ----
  // Writes into the file another Writer of this process opened (the engine gets the shim's header): every pointer is
  // found from the header; nothing is owned, so close() and abandon() of an attached writer only forget the mapping.
  // Returns false (and stays closed) for a header that is not a version 3 recorder.
  bool attach(FileHeader* header);
  // Claims the next name slot for `key` (NameEntry) and commits `text` (cut to fit, ending "..." when cut). Returns
  // the name's id (slot index + 1), or 0 when closed or full (dropped_names() grows). The caller keeps the ids.
  uint32_t add_name(uint64_t key, const char* text);
  uint64_t dropped_names() const { return __atomic_load_n(&dropped_names_, __ATOMIC_RELAXED); }
  // Claims a stream slot at a stream's first launch. nullptr when closed or full (dropped_streams() grows).
  StreamEntry* add_stream(uint64_t stream, uint64_t context);
  uint64_t dropped_streams() const { return __atomic_load_n(&dropped_streams_, __ATOMIC_RELAXED); }
  // A launch with correlation id `seq` was recorded on the stream.
  static void set_stream_launched(StreamEntry* entry, uint64_t seq);
  // Every launch up to `seq` is known to have finished by `completed_ns`; checked at `checked_ns`. `seq` only grows.
  static void set_stream_completed(StreamEntry* entry, uint64_t seq, uint64_t completed_ns, uint64_t checked_ns);
  // What the launch collector can do here; `note` (nullptr or "") says why not more. Stored note first.
  void set_launch_mode(LaunchMode mode, const char* note);
  // A CUDA API call returned an error: counts it; true for the process's first one (whose kCudaError record the
  // caller appends, then names with set_first_error()).
  bool count_cuda_error();
  // `index`: the ring index + 1 of that record (the Pending::commit append() returned for it).
  void set_first_error(uint64_t index);
  // The engine brought completion up to date at `ns` (every stream it could).
  void set_completions_checked(uint64_t ns);
  void count_dropped_launch();

  // Best known global rank / NCCL version, stored into the header (relaxed atomic stores).
  void set_global_rank(int32_t rank);
  void set_nccl_version(int32_t version);

 private:
  // Points every table at its place in the mapping that starts with `header` (its version's layout).
  void use_mapping(FileHeader* header);

  FileHeader* header_ = nullptr;
  CommEntry* comms_ = nullptr;
  Record* ring_ = nullptr;
  uint64_t capacity_ = 0;
  uint32_t max_comms_ = 0;
  SiteEntry* sites_ = nullptr;
  uint32_t max_sites_ = 0;
  uint64_t mapped_bytes_ = 0;
  uint64_t dropped_comms_ = 0;
  uint64_t dropped_sites_ = 0;
  NameEntry* names_ = nullptr;
  uint32_t max_names_ = 0;
  StreamEntry* streams_ = nullptr;
  uint32_t max_streams_ = 0;
  bool attached_ = false;
  uint64_t dropped_names_ = 0;
  uint64_t dropped_streams_ = 0;
};

}  // namespace trainscope::recorder
