// Writing a report's pair of files (<base>.txt and <base>.json) and the files reports are made of, with the
// guarantees each kind of report needs, side by side:
//   - write_report: a verdict's report (mismatch, desync, vanished), never written over: a second one of the same
//     name gets "-2"; both files published with link(), the JSON first, so whoever sees the text sees both.
//   - replace_report: a process's own report (nonfinite, near-overflow, stop, step-skipped, cuda-error), rewritten
//   whole
//     as it learns more; the JSON replaced first, then the text, so whoever sees the new text sees its JSON.
//   - replace_file / append_file: single files that grow (the origin, the manifest, traces).
// Files are mode 0600 in a private run directory, never written through a link (base/private_files.h).
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "reports/unwritten_report.h"

namespace trainscope::reports {

struct WrittenReport {
  std::string text_path;
  std::string json_path;
  std::string error;          // empty on success; else the message for a log, with the path
  UnwrittenReport unwritten;  // with `error`: the report's file name and why, for whoever keeps note (`by` is left
                              // to the caller)
};

// Creates the run directory and its missing parents (0700) and makes sure it is private (files::make_private_directory:
// not a link; ours and open to others: made 0700, said in `notice` when given; another user's that others can write
// to: refused). False with `error` saying why.
bool make_report_directory(const std::string& dir, std::string* error, std::string* notice = nullptr);

// Writes <dir>/<base>.txt and <dir>/<base>.json, files mode 0600, creating dir (0700) when missing. An existing
// file (or link, or anything else) is never overwritten: the name gets a "-2", "-3", ... suffix instead. Each file
// appears whole, the JSON before the text: whoever sees the text sees both.
WrittenReport write_report(const std::string& dir, const std::string& base_name, const std::string& text,
                           const nlohmann::json& json);

// Replaces <dir>/<base>.json, then <dir>/<base>.txt, each whole (replace_file below). The directory must exist. On
// failure `error` says what and why and `unwritten` names the file (`by` left to the caller).
WrittenReport replace_report(const std::string& dir, const std::string& base_name, const std::string& text,
                             const nlohmann::json& json);

// Replaces `path` atomically with `content` (files::replace_file: mode 0600, written beside it, then renamed; a link or
// a file we did not create is never replaced): a reader, or a crash, never leaves half a file. Reports that grow
// (near-overflow warnings, the origin, the manifest) are rewritten this way. Returns 0 or files::'s error (an errno
// value or a refusal; files::error_text says it).
int replace_file(const std::string& path, const std::string& content);
// Appends `content` to `path` (files::append_file: created 0600; a link or a file we did not create is refused): the
// trace, frame by frame. Returns 0 or files::'s error.
int append_file(const std::string& path, const std::string& content);

}  // namespace trainscope::reports
