// A run that lives on several hosts, read as one.
//
// Each host of a multi-node job writes its ranks' flight recorders and reports into its own TRAINSCOPE_DIR/<run id>
// (there is no shared file system to rely on). Copied back to one place, `trainscope report DIR1 DIR2 ...` reads
// them as one run: one summary, one table of recorders, one timeline and one page, with the ranks whose recorders are
// in none of the folders named (RunSummary::missing_ranks).
#pragma once

#include <string>
#include <vector>

#include "analysis/run_summary.h"
#include "base/flight_recorder_reader.h"
#include "reports/recorder_report.h"

namespace trainscope::reports {

// Expands the command's arguments into run folders. An argument that is a run folder (it holds a flight recorder or
// a report of a run) is taken as it is. Any other folder is searched one level down, then two (a TRAINSCOPE_DIR, or
// a parent of the hosts' copies: collected/node1/<run id>, collected/node2/<run id>), and the run folders found
// there must be copies of one run (one folder name): several runs there are refused, naming them. A folder given
// or found twice is read once. An argument that is not a folder, or holds no run at all, is kept as it is for the
// reader to say what it is. False (setting `error`, naming the argument and what is accepted) when a folder holds
// several runs.
bool find_run_folders(const std::vector<std::string>& args, std::vector<std::string>* folders, std::string* error);

// What `trainscope report` reads of a run.
struct RunRead {
  recorder::RunDirectory run;  // every folder's recorders; a process's recorder found in two folders is read once
  RunSummary summary;          // every folder's reports, traces and notes, with note_recorders() applied
  bool has_recorders = false;  // some folder holds a *.tsrec file
};

// Reads one or several run folders as one run. A single folder is read exactly as before: `summary.folders` stays
// empty and paths stay as given. With several, each report keeps the folder it came from (a report found in two
// folders with the same contents is shown once), unreadable files are named with their folder, and
// `summary.folders` says what each folder held. False (setting `error`) when a folder holds nothing of a run (no
// recorder and no report) or cannot be read at all.
bool read_run(const std::vector<std::string>& folders, const recorder::ReportOptions& options, RunRead* out,
              std::string* error);

}  // namespace trainscope::reports
