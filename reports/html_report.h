// `trainscope report RUN_DIR --html FILE`: the whole run on one self-contained page (no network at view time): the
// summary, the timeline of every rank (where each one was when the job stopped), every report, and the per-batch
// abs-max of the watched tensors as plots (the seed's per-batch tracing, seen).
#pragma once

#include <string>

#include "reports/flight_recorder_reader.h"
#include "reports/run_summary.h"

namespace trainscope::reports {

// Writes the page to `path` (created private, replaced if it exists). False, with `error` naming the file and why,
// when it cannot be written.
bool write_html_report(const recorder::RunDirectory& run, const RunSummary& summary, const std::string& path,
                       std::string* error);

}  // namespace trainscope::reports
