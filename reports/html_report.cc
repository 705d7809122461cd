#include "reports/html_report.h"

namespace trainscope::reports {

bool write_html_report(const recorder::RunDirectory& /*run*/, const RunSummary& /*summary*/, const std::string& path,
                       std::string* error) {
  *error = path + ": not written yet (stub)";
  return false;
}

}  // namespace trainscope::reports
