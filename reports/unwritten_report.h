// A report that could not be written (a full disk), and who says so: the coordinator hands it on as this struct
// (CoordinatorServerOptions::on_unwritten), the engine keeps it in its process's recorder, `trainscope run` and the
// run summary name it.
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

}  // namespace trainscope::reports
