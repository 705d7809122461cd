// Whether a file `trainscope report` is asked to write (--trace FILE, --html FILE) would overwrite the run it reads:
// the run directory itself, or one of its files — by its path, or through a symbolic link, `..` or another hard link
// (compared by device and inode). A new name in the run directory is fine unless the run's readers would take a file
// of that name as the run's own (a *.tsrec, a report, the manifest: analysis/run_summary.h, is_run_file_name).
//
//   std::string why = output_overwrites_run(run_dir, "run/manifest.json");
//   // "'run/manifest.json' is the run's own manifest.json (in the run directory 'run'): writing it would destroy
//   // what the run left"
#pragma once

#include <string>

namespace trainscope::reports {

// "" when writing `output` leaves every file of `run_dir` as it is; else what it would overwrite, naming both.
// A `run_dir` that is not a folder is not judged here (the readers say what is wrong with it): "".
std::string output_overwrites_run(const std::string& run_dir, const std::string& output);

}  // namespace trainscope::reports
