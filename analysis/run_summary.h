// Reads a run directory's report files and says first, in a few lines, what went wrong, where and when.
//
// The files are the ones the coordinator and the ranks write (each text report has a JSON twin of the same base
// name): origin, mismatch-*, desync-*, vanished-rank*, nonfinite-rank*, overflow-streak-rank*,
// near-overflow-rank*, stop-rank*, cuda-error-rank*, trace-rank*, manifest.json. Nothing in them is trusted: a file
// that is missing, truncated (a crash mid-write) or not what its name says is named in the summary as unreadable, and
// the rest goes on; where a report's JSON is gone, what its name and text still tell (rank, communicator, call, batch)
// is used.
//
// Summary text (one line per kind, the most important first, "none" where nothing was found):
//   Summary of run <directory name>
//     nothing went wrong: ...                       (only when nothing was found)
//     inf/nan origin: <first line of origin.txt>
//     first inf/nan: batch 12 on ranks 0–7
//     mismatches: 1 (communicator 239016 call #24 `ncclAllReduce`: count differs)
//     desyncs: none
//     vanished ranks: none
//     overflow streaks: rank 2, batches 40–44 (5 in a row)
//     near overflow: 2 warnings on rank 1 (first: batch 3, <frame> output 6.27e+04 = 96% of float16's max)
//     skipped steps: rank 0, batch 2 (the loss scaler found inf/nan in the gradients and skipped the optimizer
//                    step ...: not a failure)        (only when a loss scaler skipped a step; the first inf/nan line
//                                                   then says when its batch is one of them)
//     stopped: rank 0 after batch 5 (TRAINSCOPE_ABORT_AFTER_BATCH); ranks 1–3 by trainscope (mismatch, status 86)
//     first CUDA errors: 1                           (only when a process had one: from its recorder, else its
//                                                   cuda-error-rank<R> report; a line per process below)
//       rank 3: first CUDA error: cudaStreamSynchronize returned 700 cudaErrorIllegalAddress (an illegal memory
//               access was encountered) at 2026-12-01 12:00:01.123456 UTC, after kernel K on stream 0x7f3a5c001200
//     launches: callbacks and kernel completion on ranks 0–2; unavailable on rank 3: CUPTI is in use by another tool
//                                                   (only when some process's launch collector ran or said why not)
//     job: exited with status 137 (128 + 9: a process was killed by SIGKILL)   (only when `trainscope run` started it)
//     processes: 4 recorded: 3 exited, 1 crashed or killed (rank 2); a call never returned on rank 2
//       rank 2: crashed or killed (no clean exit; its process is gone); was waiting in ncclAllReduce (communicator
//               3f2a9c, call #5) since 12:00:01.123456 UTC              (one line per kind of end that needs a look:
//                                                   stopped, exit status not 0, killed, waiting, torn records)
//     could not write mismatch-3f2a9c-5.json: No space left on device (the coordinator)   (only when some report
//                                                   could not be written, by the coordinator or by a rank)
//     setup: world size 4, no warnings
//     NCCL calls: 2 processes loaded libnccl but no NCCL call was seen: NCCL may be linked statically into the job
//                                                   (only when a process loaded NCCL without making a communicator,
//                                                   or a job `trainscope run` started recorded no NCCL call at all)
//     traces: batches 1 and 2 on ranks 0–3          (only when there are trace files; "; inf/nan in traced batch 2
//                                                   on rank 1 (detection is off in traced batches)" when a traced
//                                                   frame held one)
//     could not read: origin.json (truncated JSON: ends after 120 bytes)   (only when some file could not be read)
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/run_files.h"
#include "reports/recorder_report.h"
#include "reports/unwritten_report.h"

namespace trainscope::reports {

// The report kinds (base/run_files.h), in the order the full reports are shown.
using run_files::ReportKind;
const char* report_kind_name(ReportKind kind);  // "origin", "mismatch", ..., "near_overflow", "stop"

// One report as found on disk: <base>.txt and <base>.json, either of which may be missing or unreadable.
struct ReportFiles {
  ReportKind kind = ReportKind::kOrigin;
  std::string base_name;     // "mismatch-239016-24"
  int32_t rank = -1;         // per-rank reports: from the JSON, else from the file name; -1 otherwise
  int32_t pid = 0;           // a report of a process whose rank is not known: from its name "<kind>-pid<P>"
  bool text_exists = false;  // <base>.txt is in the directory
  bool has_text = false;     // ... and was read
  std::string text;          // its contents
  bool json_exists = false;  // <base>.json is in the directory
  bool has_json = false;     // ... and was read, parsed, and is an object of this kind
  nlohmann::json json;       // the parsed report; null unless has_json
  std::string folder;        // the run folder it was read from, set only when a run is read from several
  std::string text_file() const { return base_name + ".txt"; }
  std::string json_file() const { return base_name + ".json"; }
};

// A per-rank trace (trace-rank<R>.txt / .jsonl); only its batch markers are read, and only from small files.
struct TraceFile {
  int32_t rank = -1;
  std::string dir;   // the run folder it is in
  std::string file;  // the text file when there is one, else the .jsonl
  bool batches_known = false;
  std::vector<uint64_t> batches;  // " *** Starting batch number=N ***" markers, in file order, no repeats
  // Batches in which a traced frame holds inf or NaN (detection is off in traced batches, as in the seed: the trace is
  // the only place that says so), in file order, no repeats.
  std::vector<uint64_t> nonfinite_batches;
};

// A process that loaded NCCL but made no communicator, from the note it left at exit (<stem>.no-nccl-calls.json,
// shim/nccl_presence.h): its NCCL may be linked statically, or it is a launcher or helper process.
struct NcclWithoutCalls {
  std::string file;
  int32_t rank = -1;  // launcher rank, -1 when none
  int32_t pid = 0;
  std::string host;
  std::string exe;
  std::string nccl;  // the libnccl it had loaded
  uint64_t calls = 0;
  // Whether the CUDA driver was loaded at its exit; unknown in notes of trainscope before it was written. Without
  // the driver the process ran on the CPU, and no NCCL (static or shared) ran in it.
  std::optional<bool> cuda_driver;
};

struct UnreadableFile {
  std::string file;   // name inside the run directory
  std::string error;  // "empty file", "truncated JSON: ends after 120 bytes", ...
};

// How the job that `trainscope run` started ended: its wait status. Written to the run directory as kJobEndFile.
struct JobEnd {
  int32_t pid = 0;          // the process `trainscope run` started (the launcher, or the job's only process)
  bool signaled = false;    // killed by a signal (else it exited)
  int32_t exit_status = 0;  // when it exited
  int32_t signal = 0;       // when it was killed
};
using run_files::kJobEndFile;
// {"kind": "job_exit", "pid", "exit_status" (null when killed), "signal" and "signal_name" (null when it exited)}.
nlohmann::json job_end_json(const JobEnd& job);

// "SIGKILL", "SIGTERM", "SIGSEGV"; "signal 77" for a number without a name.
std::string signal_name(int signal);

struct RunSummary {
  std::string path;  // as given
  std::string name;  // its last component: the run id
  bool manifest_exists = false;
  bool has_manifest = false;  // manifest.json read and parsed
  nlohmann::json manifest;
  std::vector<ReportFiles> reports;  // in display order: by kind, then rank / detection time / natural name order
  std::vector<TraceFile> traces;     // by rank
  std::vector<UnreadableFile> unreadable;
  std::vector<NcclWithoutCalls> nccl_without_calls;  // by rank (none last), then pid
  // From the flight recorders, when the directory holds any *.tsrec file (recorder::process_overview, and
  // note_recorders below for the rest).
  std::optional<recorder::ProcessOverview> processes;
  std::vector<int32_t> ranks_with_communicators;  // launcher ranks whose recorder holds a communicator
  size_t recorders_with_communicators = 0;
  // The run is a job `trainscope run` started: a run in which no process recorded an NCCL call says so.
  bool job_started = false;
  // How that job ended: set by `trainscope run`, else read from kJobEndFile (which also sets job_started).
  std::optional<JobEnd> job;
  // Reports that could not be written, as the coordinator of `trainscope run` said (the ranks' own, and those of a
  // coordinator hosted in rank 0, are in their recorders: see processes).
  std::vector<UnwrittenReport> unwritten;

  // A run read from several folders (each host's copy of the run folder, analysis/multi_folder_run.h): each folder
  // and what it held, in the order given. Empty for a run read from one folder.
  struct Folder {
    std::string path;
    std::vector<int32_t> ranks;        // launcher ranks of its readable recorders
    size_t recorders = 0;              // readable recorders
    size_t reports = 0;                // report files (text or JSON)
    std::vector<std::string> run_ids;  // the run ids its recorders were written under (copies of one run share one)
  };
  std::vector<Folder> folders;
  // From the recorders (note_recorders): the launcher's world size, 0 when no recorder says it, and the ranks below it
  // that have no readable flight recorder in the folders read: on a job of several hosts, the ranks of a host whose
  // copy of the run folder was not given.
  int32_t launcher_world = 0;
  std::vector<int32_t> missing_ranks;

  // Nothing of a run's reports in the directory (no report, trace, manifest, job end or no-NCCL-calls note).
  bool empty() const {
    return reports.empty() && traces.empty() && !manifest_exists && nccl_without_calls.empty() && !job;
  }
};

// Reads the report files of `dir`. Returns false (setting `error`) only when the directory cannot be listed; a
// file that cannot be read lands in `out->unreadable`. `out->processes` is left empty for the caller to fill.
bool read_run_summary(const std::string& dir, RunSummary* out, std::string* error);

// Puts reports in display order (by kind, then rank / detection time / natural name order), as read_run_summary does.
void sort_reports_for_display(std::vector<ReportFiles>* reports);

// Whether `name` (a file name, no folder) is one trainscope gives the files of a run directory: a flight recorder
// (*.tsrec), a rank's log (*.log), the manifest, the job's end, a no-NCCL-calls note, a trace, a report (text or
// JSON) or a temporary one of them is written to. What the run's readers take as the run's own.
bool is_run_file_name(std::string_view name);

// Fills what the summary needs from the run's flight recorders: `processes` and which ranks made a communicator.
void note_recorders(RunSummary* summary, const recorder::RunDirectory& run,
                    const recorder::ReportOptions& options = {});

// The summary text above, every line '\n'-terminated.
std::string format_summary_text(const RunSummary& summary);
// The same as JSON: {"run", "run_dir", "nothing_wrong", "lines", "origin", "first_nonfinite", "mismatches",
// "desyncs", "vanished", "overflow_streaks", "near_overflow", "stops", "cuda_errors" ([{"rank", "pid", "file",
// "cuda_errors", "first"}]), "launches" ([{"rank", "pid", "mode", "note"}]), "cross_rank_checks" ({"ran": N,
// "did_not_run": [{"rank", "pid", "state" (did_not_run or waiting), "why"}]}), "job", "processes", "unwritten",
// "setup", "traces", "unreadable", "folders" ([{"path", "ranks", "recorders", "reports", "run_ids"}] when several
// folders were read as one run, else null), "missing_recorders" ({"world_size", "ranks", "hosts": {host: [ranks]}}
// or null)}.
nlohmann::json summary_json(const RunSummary& summary);

// Each report's full text in display order, each after a line "=== <file> ===" (preceded by a blank line).
std::string format_report_texts(const RunSummary& summary);
// [{"file": "<base>.json", "kind": ..., "report": <parsed JSON or null>, "text_file": "<base>.txt" or null,
//   "error": why the JSON is null, "text": the text when the JSON is null}], in display order.
nlohmann::json reports_json(const RunSummary& summary);

}  // namespace trainscope::reports
