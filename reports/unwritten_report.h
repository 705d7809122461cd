// A report that could not be written (a full disk), and who says so: the coordinator logs it, the engine keeps it in
// its process's recorder, `trainscope run` and the run summary name it.
#pragma once

#include <string>
#include <string_view>

namespace trainscope::reports {

// A report that could not be written, and why.
struct UnwrittenReport {
  std::string report;  // its file name in the run directory ("mismatch-3f2a9c-5.json")
  std::string cause;   // strerror's text ("No space left on device"); "" when not known
  std::string by;      // who tried: "the coordinator", "rank 2", "trainscope run"
};

// A failed write as the coordinator logs it: "coordinator: cannot write <path>: <why>", "coordinator: cannot write
// <a> or <b>", "coordinator: cannot create <dir>: <why>". Sets `out->report` to the file's name (a temporary's name
// mapped back to its report's: ".mismatch-3f2a9c-5.812.0.part-json" -> "mismatch-3f2a9c-5.json"), `out->cause` to
// why ("" when the message does not say) and `out->by` to "the coordinator". False for any other message.
bool parse_coordinator_write_error(std::string_view message, UnwrittenReport* out);

}  // namespace trainscope::reports
