// Reads flight recorder files (format in flight_record_format.h) back for the tools, trusting nothing in them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/flight_record_format.h"

namespace trainscope::recorder {

// One committed record and the index it was appended under.
struct RecordedCall {
  uint64_t index = 0;
  Record record{};
  // The call had not returned when the file was read: it hung, or its process died inside it.
  bool pending() const { return record.result == kResultPending; }
};

// Whether a launch's kernel is known to have finished (from the stream table; a record never says).
enum class LaunchState {
  kFinished,     // its stream's completed_seq reaches it: done by `at_ns` (completed_ns)
  kNotFinished,  // completion was brought up to date at `at_ns` (header.completions_ns), after it started, and it
                 // was not done then
  kNotKnown,     // nothing says: no completion tracking (launch mode), its stream not in the table, or it started
                 // after the last update
  kNotLaunched,  // the launch call returned an error: no kernel was queued, so none can finish
};
struct LaunchProgress {
  LaunchState state = LaunchState::kNotKnown;
  uint64_t at_ns = 0;  // kFinished: known done by then; kNotFinished: not done as of then; kUnknown: 0
};

// Everything trustworthy in one recorder file, of format version 1, 2 or 3, in version 3's terms: a version 1 file
// has no sites (every record's site is 0, its redop read from the old int32 field) and zeros in the header's version 2
// fields (max_sites, sites_used, python_major/minor, python_note); a version 1 or 2 file has zeros in every version
// 3 field (no names, no streams, launch_mode kNone, no CUDA errors).
struct RecorderFile {
  std::string path;
  FileHeader header{};           // strings NUL-terminated by the reader; python_major/minor 0 or positive
  std::vector<CommEntry> comms;  // committed comm entries, in slot order
  // The claimed site slots, in slot order: sites[i] is site id i + 1. A slot never committed, or holding what no
  // writer writes (more than two Python frames), is kept as all zeros (commit 0) so that ids still index directly;
  // site() skips it. Every string in an entry is NUL-terminated, and frames past python_frames are zeroed.
  std::vector<SiteEntry> sites;
  // The claimed name slots, in slot order: names[i] is name id i + 1; a torn one is kept as zeros (commit 0) so that
  // ids still index. Every text is NUL-terminated.
  std::vector<NameEntry> names;
  std::vector<StreamEntry> streams;   // committed stream entries, in slot order (completed_seq <= launched_seq not
                                      // assumed: a kernel's activity can be read before its launch's exit)
  std::vector<RecordedCall> records;  // committed records, strictly increasing index
  uint64_t torn_records = 0;          // slots of the last `capacity` claims holding no valid record
  uint64_t torn_comms = 0;            // claimed comm slots never committed
  uint64_t torn_sites = 0;            // claimed site slots never committed, or invalid
  uint64_t torn_names = 0;            // claimed name slots never committed
  uint64_t torn_streams = 0;          // claimed stream slots never committed

  uint64_t records_total() const { return header.next; }  // every record ever claimed by the process
  int32_t global_rank() const { return header.global_rank; }
  int32_t pid() const { return header.pid; }
  // The committed site with this id (Record::site), or nullptr: 0, beyond the table, or torn.
  const SiteEntry* site(uint32_t id) const {
    if (id == 0 || id > sites.size() || sites[id - 1].commit != id) return nullptr;
    return &sites[id - 1];
  }
  // The committed name with this id (Record::peer of a launch record), or "" when there is none.
  const char* name(uint32_t id) const {
    if (id == 0 || id > names.size() || names[id - 1].commit != id) return "";
    return names[id - 1].text;
  }
  // The stream entry of a launch on `stream` in `context` (Record::stream, Record::aux), or nullptr.
  const StreamEntry* stream_entry(uint64_t stream, uint64_t context) const;
  // Whether the kernel(s) of a kKernelLaunch / kGraphLaunch record are known to have finished.
  LaunchProgress launch_progress(const Record& launch) const;
  // The process's first CUDA error (header.first_error_index names a committed kCudaError record), or nullptr: none,
  // or its record was overwritten by the ring.
  const RecordedCall* first_error() const;
  // The record appended under this ring index, or nullptr (torn, or lapped).
  const RecordedCall* at_index(uint64_t index) const;
};

// "none", "callbacks", "completions", "unavailable", or "unknown (N)".
std::string launch_mode_name(uint32_t mode);

// What read_recorder_file() reads of a file: by default all of it.
struct ReadLimits {
  uint64_t max_records = UINT64_MAX;  // only the newest this many claims of the ring (older ones are neither read nor
                                      // counted torn): a live process's tail, read quickly
  bool follow_links = true;           // false: a symbolic link is refused (O_NOFOLLOW)
};

// Reads and validates one file. On failure returns false and sets `error` to "<path>: <what is wrong>";
// `out` is then unspecified.
bool read_recorder_file(const std::string& path, RecorderFile* out, std::string* error, const ReadLimits& limits = {});

struct FileError {
  std::string path;
  std::string message;  // as from read_recorder_file, path included
};

// Every *.tsrec file of one run directory.
struct RunDirectory {
  std::string path;
  std::vector<RecorderFile> files;  // by global rank (unknown ranks last), then pid, then path
  std::vector<FileError> errors;    // files that could not be read, by path
};

// Reads every *.tsrec file in `dir`. Returns false (and sets `error`, naming the directory) only when the
// directory itself is unusable: missing, not a directory, unlistable, or holding no *.tsrec file.
// Unreadable individual files land in `out->errors` and do not fail the call.
bool read_run_directory(const std::string& dir, RunDirectory* out, std::string* error);

}  // namespace trainscope::recorder
