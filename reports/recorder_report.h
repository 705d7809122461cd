// Summarises a run directory's flight recorders as a text table for people and as JSON for programs. Every string the
// text takes from a recorder (host, run id, paths, Python locations) has its control characters escaped
// (reports::printable); the JSON carries them as they are, JSON-escaped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/flight_recorder_reader.h"
#include "reports/json_stream.h"

namespace trainscope::recorder {

// Whether the process behind a file still exists.
enum class Liveness { kAlive, kGone, kCannotTell };

// Default probe: kill(pid, 0) when the file's host is this host, kCannotTell for other hosts.
Liveness probe_liveness(const FileHeader& header);

struct ReportOptions {
  size_t last = 10;                                                      // records shown per rank (newest last)
  std::function<Liveness(const FileHeader&)> liveness = probe_liveness;  // seam for tests
};

// Human-readable names used by both report forms.
std::string nccl_version_string(int32_t code);  // 22809 -> "2.28.9", 2708 -> "2.7.8", 0 -> "unknown"
std::string dtype_name(int32_t dtype);          // "float16"; kUnknown -> "-"
std::string redop_name(int32_t redop);          // "sum"; >= 5 -> "premulsum#N"; kUnknown -> "-"
std::string result_name(int32_t result);        // "ncclSuccess"; kResultPending -> "pending"
std::string comm_state_name(uint16_t state);    // "live", "destroyed", ...
std::string utc_time_of_day(uint64_t ns);       // "HH:MM:SS.uuuuuu"
std::string utc_date_time(uint64_t ns);         // "YYYY-MM-DD HH:MM:SS.uuuuuu UTC"
std::string duration_string(uint64_t ns);       // "850ns", "12.4us", "3.21ms", "1.50s"
std::string hex_id(uint64_t id);                // 16 hex digits
std::string short_hex_id(uint64_t id);          // leading 6 hex digits, as in the mismatch report; 0 -> "-"
// The innermost Python location of a call site, "train.py:88 in backward" ("train.py in backward" when the line is
// not known, "train.py:88" without a function name); "" when the site has no Python frame or is nullptr. For text:
// control characters from the file are escaped (reports::printable).
std::string python_location(const SiteEntry* site);

// What a run's processes came to, in the terms of the report's state column; the run summary's "processes" line.
struct ProcessRef {
  int32_t rank = -1;  // global rank; -1 when the file does not know it
  int32_t pid = 0;
};
// One process as its recorder tells it: how it ended (or that it runs), the call it waits in, whether its records
// could be read, what it could not write.
struct ProcessDetail {
  ProcessRef who;
  std::string file;  // the recorder's file name (no directory)
  std::string
      state;  // the report's state key: exited, stopped, crashed_or_killed, running, running_unverified, unknown
  bool gone = false;               // the process no longer runs
  bool exit_status_known = false;  // the process said its exit status (exit(), or trainscope's stop)
  int32_t exit_status = 0;
  uint32_t stop_reason = 0;  // StopReason, when state is "stopped"
  uint64_t stop_comm_id = 0;
  uint64_t stop_seq = 0;
  bool stop_batch_known = false;
  uint64_t stop_batch = 0;
  bool stop_report_missing = false;  // the verdict that stopped it came without a report
  size_t pending_calls = 0;          // calls that had not returned when the file was read
  RecordedCall newest_pending{};     // the newest of them (the one it waits in), when pending_calls > 0
  uint64_t records_total = 0;        // claimed by the process
  size_t records_held = 0;           // read back
  uint64_t torn_records = 0;         // claimed, held by the ring, but unreadable
  uint32_t reports_unwritten = 0;    // reports it could not write
  std::string unwritten_report;      // the first of them
  std::string unwritten_cause;       // and why ("" when not known)
  uint32_t launch_mode = 0;          // LaunchMode: what the launch collector could do
  std::string launch_note;           // why not more
  uint32_t cuda_errors = 0;          // CUDA API calls that returned an error
  std::string first_cuda_error;      // reports::cuda_error_summary() of the first, "" when none (or its record is gone)
  uint32_t exchange_state = 0;       // ExchangeState: whether its calls were compared across ranks
  std::string exchange_note;         // why not
};

struct ProcessOverview {
  size_t recorded = 0;    // readable recorder files
  size_t unreadable = 0;  // *.tsrec files that could not be read
  size_t exited = 0;      // exited by themselves (any status; see details for which)
  size_t running = 0;
  size_t running_unverified = 0;  // on another host: cannot tell
  size_t unknown_state = 0;
  std::vector<ProcessRef> stopped;         // stopped by trainscope (a verdict, inf/nan abort, abort after batch)
  std::vector<ProcessRef> crashed;         // crashed or killed: the pid is gone, no clean exit
  std::vector<ProcessRef> did_not_return;  // gone (exited, stopped or crashed) inside a call that never returned
  std::vector<ProcessRef> pending;         // in a call that has not returned (yet), process may still run
  std::vector<ProcessDetail> details;      // every readable file, in the run directory's order
  std::vector<FileError> errors;           // the files that could not be read
};
ProcessOverview process_overview(const RunDirectory& run, const ReportOptions& options = {});

// "stopped by trainscope (mismatch, status 86)", "stopped by trainscope (abort after batch 5, status 87)": how a
// process that trainscope stopped ended, from its recorder's header.
std::string stop_text(const FileHeader& header);

// The text report, handed to `sink` in batches of whole lines as it is written: the tables are measured in a first
// pass over the calls and printed in a second, so that `--last all` on a big run never holds the whole text.
void write_text_report(const RunDirectory& run, const ReportOptions& options,
                       const std::function<void(std::string_view)>& sink);
std::string format_text_report(const RunDirectory& run, const ReportOptions& options = {});  // the same, whole
// `rows` (the first one the header) as left-aligned columns, two spaces apart, each line starting with `indent`.
std::string aligned_table(const std::vector<std::vector<std::string>>& rows, const std::string& indent);
// Header strings come from files as they are: dump with error_handler_t::replace, they may not be UTF-8.
nlohmann::json make_json_report(const RunDirectory& run, const ReportOptions& options = {});
// The same report written into `out` a record at a time (no more than one record is held as JSON), with the members
// of `more` (an object; none named run_dir, ranks or errors) beside its own: the text is, byte for byte, the dump
// (indent 2, error_handler_t::replace) of make_json_report() with those members added.
void write_json_report(const RunDirectory& run, const ReportOptions& options, nlohmann::json more,
                       reports::JsonStream& out);

}  // namespace trainscope::recorder
