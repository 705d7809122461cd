// Compares what `trainscope report` would write with the run directory's own entries, by device and inode.
#include "analysis/run_output_guard.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

#include "analysis/run_summary.h"
#include "base/printable.h"

namespace trainscope::reports {
namespace {

bool same_file(const struct stat& a, const struct stat& b) { return a.st_dev == b.st_dev && a.st_ino == b.st_ino; }

// The entry of the run directory that is the file `target` (its own name or another hard link's), among those the
// run's readers take as the run's own; "" when none is.
std::string run_file_that_is(const std::string& run_dir, const struct stat& target) {
  DIR* dir = opendir(run_dir.c_str());
  if (dir == nullptr) return "";
  std::string found;
  while (const struct dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name == "." || name == ".." || !is_run_file_name(name)) continue;
    struct stat st {};
    if (fstatat(dirfd(dir), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && same_file(st, target)) {
      found = name;
      break;
    }
  }
  closedir(dir);
  return found;
}

// "out/page.html" -> "out"; "page.html" -> "."; "/page.html" -> "/". Trailing slashes are the name's, not a folder.
std::string folder_of(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string name_of(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

std::string output_overwrites_run(const std::string& run_dir, const std::string& output) {
  struct stat run {};
  if (stat(run_dir.c_str(), &run) != 0 || !S_ISDIR(run.st_mode)) return "";
  const std::string quoted_output = "'" + printable(output) + "'";
  const std::string quoted_run = "'" + printable(run_dir) + "'";
  struct stat existing {};
  if (stat(output.c_str(), &existing) == 0) {  // through links: what would be written over
    if (same_file(existing, run)) return quoted_output + " is the run directory " + quoted_run + " itself";
    const std::string entry = run_file_that_is(run_dir, existing);
    if (!entry.empty()) {
      return quoted_output + " is the run's own " + printable(entry) + " (in the run directory " + quoted_run +
             "): writing it would destroy what the run left";
    }
  }
  // A new file, or one that is not the run's: refused where the run's readers would take it for one of the run's.
  struct stat folder {};
  const std::string name = name_of(output);
  if (stat(folder_of(output).c_str(), &folder) == 0 && same_file(folder, run) && is_run_file_name(name)) {
    return quoted_output + " would be taken for one of the run's own files: " + printable(name) +
           " is a name trainscope gives the files of the run directory " + quoted_run;
  }
  return "";
}

}  // namespace trainscope::reports
