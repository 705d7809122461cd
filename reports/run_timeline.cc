#include "reports/run_timeline.h"

namespace trainscope::reports {

void write_run_timeline(const recorder::RunDirectory& /*run*/, const RunSummary& /*summary*/,
                        const std::function<void(std::string_view)>& sink) {
  sink(R"({"traceEvents": [], "displayTimeUnit": "ms", "otherData": {}})");
}

bool write_run_timeline_file(const recorder::RunDirectory& /*run*/, const RunSummary& /*summary*/,
                             const std::string& path, std::string* error) {
  *error = path + ": not written yet (stub)";
  return false;
}

}  // namespace trainscope::reports
