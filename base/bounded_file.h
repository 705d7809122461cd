// Reading a small file whole, bounded: the one reader of reports, traces, manifests and the doctor's system files.
//
// Opened non-blocking (a FIFO planted where a report should be never blocks the reader), checked to be a regular file
// on the descriptor it then reads (no race between the check and the read), and read up to a limit (a huge file costs
// nothing past it). What happened is returned as values (base/errors.h); each caller says it in its own words.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>

namespace trainscope::files {

enum class ReadOutcome {
  kRead,        // `text` holds the file, or its first `limit` bytes when `truncated`
  kMissing,     // no such file (ENOENT, ENOTDIR: a missing folder on the way)
  kNotRegular,  // a folder, a FIFO, a device, a socket (`mode` says which); with follow_links false, a link too
  kFailed,      // opening or reading failed otherwise (`error`)
};

struct BoundedRead {
  ReadOutcome outcome = ReadOutcome::kFailed;
  int error = 0;    // errno for kMissing and kFailed
  mode_t mode = 0;  // the file's type bits for kNotRegular
  bool truncated = false;
};

// The first `limit` bytes of the regular file at `path` into `text` (cleared first). With `follow_links` false a
// symbolic link is kNotRegular (error ELOOP), never followed.
BoundedRead read_bounded(const std::string& path, size_t limit, bool follow_links, std::string* text);

// What a file that is not a regular one is, for an error: "a folder", "a FIFO", "a socket", "a character device",
// "a block device", "a link".
const char* file_type_name(mode_t mode);

}  // namespace trainscope::files
