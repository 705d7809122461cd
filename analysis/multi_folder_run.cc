#include "analysis/multi_folder_run.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <string_view>
#include <tuple>
#include <utility>

namespace trainscope::reports {
namespace {

namespace fs = std::filesystem;

// A folder is a run folder when it holds a file a run leaves (a recorder, a report, the manifest, a trace, a log);
// hidden names do not count here, since every dot file would (the writers' temporaries start with a dot).
bool holds_run_files(const fs::path& dir) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name.front() == '.') continue;
    std::error_code type_ec;
    if (it->is_directory(type_ec)) continue;
    if (is_run_file_name(name)) return true;
  }
  return false;
}

std::vector<fs::path> sub_folders(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    std::error_code type_ec;
    if (it->is_directory(type_ec) && !it->is_symlink(type_ec)) out.push_back(it->path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The run folders one level below `dir`, else two.
std::vector<fs::path> run_folders_below(const fs::path& dir) {
  std::vector<fs::path> found;
  const std::vector<fs::path> children = sub_folders(dir);
  for (const fs::path& child : children)
    if (holds_run_files(child)) found.push_back(child);
  if (!found.empty()) return found;
  for (const fs::path& child : children)
    for (const fs::path& grandchild : sub_folders(child))
      if (holds_run_files(grandchild)) found.push_back(grandchild);
  return found;
}

std::string trimmed(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

bool read_one(const std::string& dir, RunRead* out, std::string* error) {
  std::string recorder_error;
  out->has_recorders = recorder::read_run_directory(dir, &out->run, &recorder_error);
  std::string summary_error;
  const bool listed = read_run_summary(dir, &out->summary, &summary_error);
  // Neither flight recorders nor reports: not a run directory (the reader's message says why, with a hint).
  if (!out->has_recorders && (!listed || out->summary.empty())) {
    *error = recorder_error;
    return false;
  }
  if (!listed) out->summary.unreadable.push_back({".", summary_error});
  if (!out->has_recorders) {
    out->run = recorder::RunDirectory{};
    out->run.path = dir;
  }
  return true;
}

std::string join(const std::vector<std::string>& parts, std::string_view separator) {
  std::string out;
  for (const std::string& part : parts) out += (out.empty() ? "" : std::string(separator)) + part;
  return out;
}

// The same process's recorder copied into two folders is one process.
auto process_key(const recorder::RecorderFile& f) {
  return std::make_tuple(std::string(f.header.host), f.header.pid, f.header.start_ns);
}

bool same_report(const ReportFiles& a, const ReportFiles& b) {
  return a.has_text == b.has_text && a.text == b.text && a.has_json == b.has_json && a.json == b.json;
}

// A job's end as `trainscope run` on each host saw it: the one that says most of what went wrong is kept.
bool worse_end(const JobEnd& a, const JobEnd& b) {
  const auto badness = [](const JobEnd& j) { return j.signaled ? 2 : (j.exit_status != 0 ? 1 : 0); };
  return badness(a) > badness(b);
}

void merge_into(RunRead&& part, const std::string& folder, RunRead* out,
                std::set<std::tuple<std::string, int32_t, uint64_t>>* processes) {
  RunSummary& to = out->summary;
  RunSummary& from = part.summary;
  RunSummary::Folder held;
  held.path = folder;
  for (recorder::RecorderFile& file : part.run.files) {
    if (!processes->insert(process_key(file)).second) continue;
    ++held.recorders;
    if (file.header.launcher_rank >= 0) held.ranks.push_back(file.header.launcher_rank);
    const std::string run_id = file.header.run_id;
    if (!run_id.empty() && std::find(held.run_ids.begin(), held.run_ids.end(), run_id) == held.run_ids.end())
      held.run_ids.push_back(run_id);
    out->run.files.push_back(std::move(file));
  }
  for (recorder::FileError& e : part.run.errors) out->run.errors.push_back(std::move(e));
  out->has_recorders = out->has_recorders || part.has_recorders;

  held.reports = from.reports.size();
  for (ReportFiles& report : from.reports) {
    const bool copy = std::any_of(to.reports.begin(), to.reports.end(), [&](const ReportFiles& r) {
      return r.base_name == report.base_name && same_report(r, report);
    });
    if (copy) continue;
    report.folder = folder;
    to.reports.push_back(std::move(report));
  }
  for (TraceFile& trace : from.traces) {
    const bool known = trace.rank >= 0 && std::any_of(to.traces.begin(), to.traces.end(),
                                                      [&](const TraceFile& t) { return t.rank == trace.rank; });
    if (!known) to.traces.push_back(std::move(trace));
  }
  for (UnreadableFile& u : from.unreadable) to.unreadable.push_back({folder + "/" + u.file, std::move(u.error)});
  for (NcclWithoutCalls& note : from.nccl_without_calls) {
    const bool known = std::any_of(to.nccl_without_calls.begin(), to.nccl_without_calls.end(),
                                   [&](const NcclWithoutCalls& n) { return n.pid == note.pid && n.host == note.host; });
    if (!known) to.nccl_without_calls.push_back(std::move(note));
  }
  to.manifest_exists = to.manifest_exists || from.manifest_exists;
  if (!to.has_manifest && from.has_manifest) {
    to.has_manifest = true;
    to.manifest = std::move(from.manifest);
  }
  to.job_started = to.job_started || from.job_started;
  if (from.job && (!to.job || worse_end(*from.job, *to.job))) to.job = from.job;
  for (UnwrittenReport& u : from.unwritten) to.unwritten.push_back(std::move(u));
  std::sort(held.ranks.begin(), held.ranks.end());
  to.folders.push_back(std::move(held));
}

}  // namespace

bool find_run_folders(const std::vector<std::string>& args, std::vector<std::string>* folders, std::string* error) {
  folders->clear();
  std::set<fs::path> seen;
  const auto add = [&](const std::string& folder) {
    std::error_code ec;
    fs::path canonical = fs::weakly_canonical(folder, ec);
    if (ec) canonical = fs::absolute(folder, ec);
    if (seen.insert(canonical).second) folders->push_back(folder);
  };
  for (const std::string& arg : args) {
    std::error_code ec;
    // What is not a folder is left to the recorder reader, which says what it is instead.
    if (!fs::is_directory(arg, ec) || holds_run_files(arg)) {
      add(arg);
      continue;
    }
    const std::vector<fs::path> below = run_folders_below(arg);
    std::set<std::string> runs;
    for (const fs::path& p : below) runs.insert(p.filename().string());
    if (runs.size() > 1) {
      std::vector<std::string> names(runs.begin(), runs.end());
      if (names.size() > 6) {
        names.resize(6);
        names.push_back("...");
      }
      *error = "'" + arg + "' holds " + std::to_string(runs.size()) + " different runs (" + join(names, ", ") +
               "): pass the folder of one run, or the hosts' copies of one run";
      return false;
    }
    if (below.empty()) {
      add(arg);  // no run below either: the recorder reader says so
      continue;
    }
    for (const fs::path& p : below) add(trimmed(arg) + "/" + fs::relative(p, arg, ec).string());
  }
  if (folders->empty()) {
    *error = "no run folder given";
    return false;
  }
  return true;
}

bool read_run(const std::vector<std::string>& folders, const recorder::ReportOptions& options, RunRead* out,
              std::string* error) {
  *out = RunRead{};
  if (folders.empty()) {
    *error = "no run folder given";
    return false;
  }
  if (folders.size() == 1) {
    if (!read_one(folders.front(), out, error)) return false;
    if (out->has_recorders) note_recorders(&out->summary, out->run, options);
    return true;
  }
  std::set<std::tuple<std::string, int32_t, uint64_t>> processes;
  std::vector<std::string> names, paths;
  for (const std::string& folder : folders) {
    RunRead part;
    std::string part_error;
    if (!read_one(folder, &part, &part_error)) {
      *error = part_error;
      return false;
    }
    if (std::find(names.begin(), names.end(), part.summary.name) == names.end()) names.push_back(part.summary.name);
    paths.push_back(folder);
    merge_into(std::move(part), trimmed(folder), out, &processes);
  }
  out->run.path = join(paths, ", ");
  out->summary.path = out->run.path;
  out->summary.name = join(names, " + ");
  std::stable_sort(out->run.files.begin(), out->run.files.end(),
                   [](const recorder::RecorderFile& a, const recorder::RecorderFile& b) {
                     const auto key = [](const recorder::RecorderFile& f) {
                       return std::make_tuple(f.global_rank() < 0 ? 1 : 0, f.global_rank(), f.pid());
                     };
                     return key(a) < key(b);
                   });
  std::stable_sort(out->run.errors.begin(), out->run.errors.end(),
                   [](const recorder::FileError& a, const recorder::FileError& b) { return a.path < b.path; });
  sort_reports_for_display(&out->summary.reports);
  std::stable_sort(out->summary.traces.begin(), out->summary.traces.end(), [](const TraceFile& a, const TraceFile& b) {
    return std::make_pair(a.rank < 0, a.rank) < std::make_pair(b.rank < 0, b.rank);
  });
  std::sort(out->summary.nccl_without_calls.begin(), out->summary.nccl_without_calls.end(),
            [](const NcclWithoutCalls& a, const NcclWithoutCalls& b) {
              return std::make_tuple(a.rank < 0, a.rank, a.pid) < std::make_tuple(b.rank < 0, b.rank, b.pid);
            });
  if (out->has_recorders) note_recorders(&out->summary, out->run, options);
  return true;
}

}  // namespace trainscope::reports
