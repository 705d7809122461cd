// Reads flight recorder files (format in flight_record_format.h) back for the tools, trusting nothing in them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "reports/flight_record_format.h"

namespace trainscope::recorder {

// One committed record and the index it was appended under.
struct RecordedCall {
  uint64_t index = 0;
  Record record{};
  // The call had not returned when the file was read: it hung, or its process died inside it.
  bool pending() const { return record.result == kResultPending; }
};

// Everything trustworthy in one recorder file, of format version 1 or 2, in version 2's terms: a version 1 file has
// no sites (every record's site is 0, its redop read from the old int32 field) and zeros in the header's version 2
// fields (max_sites, sites_used, python_major/minor, python_note).
struct RecorderFile {
  std::string path;
  FileHeader header{};           // strings NUL-terminated by the reader; python_major/minor 0 or positive
  std::vector<CommEntry> comms;  // committed comm entries, in slot order
  // The claimed site slots, in slot order: sites[i] is site id i + 1. A slot never committed, or holding what no
  // writer writes (more than two Python frames), is kept as all zeros (commit 0) so that ids still index directly;
  // site() skips it. Every string in an entry is NUL-terminated, and frames past python_frames are zeroed.
  std::vector<SiteEntry> sites;
  std::vector<RecordedCall> records;  // committed records, strictly increasing index
  uint64_t torn_records = 0;          // slots of the last `capacity` claims holding no valid record
  uint64_t torn_comms = 0;            // claimed comm slots never committed
  uint64_t torn_sites = 0;            // claimed site slots never committed, or invalid

  uint64_t records_total() const { return header.next; }  // every record ever claimed by the process
  int32_t global_rank() const { return header.global_rank; }
  int32_t pid() const { return header.pid; }
  // The committed site with this id (Record::site), or nullptr: 0, beyond the table, or torn.
  const SiteEntry* site(uint32_t id) const {
    if (id == 0 || id > sites.size() || sites[id - 1].commit != id) return nullptr;
    return &sites[id - 1];
  }
};

// Reads and validates one file. On failure returns false and sets `error` to "<path>: <what is wrong>";
// `out` is then unspecified.
bool read_recorder_file(const std::string& path, RecorderFile* out, std::string* error);

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
