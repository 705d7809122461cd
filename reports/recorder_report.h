// Summarises a run directory's flight recorders as a text table for people and as JSON for programs. Every string the
// text takes from a recorder (host, run id, paths, Python locations) has its control characters escaped
// (reports::printable); the JSON carries them as they are, JSON-escaped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "reports/flight_recorder_reader.h"

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
struct ProcessOverview {
  size_t recorded = 0;    // readable recorder files
  size_t unreadable = 0;  // *.tsrec files that could not be read
  size_t exited = 0;
  size_t running = 0;
  size_t running_unverified = 0;  // on another host: cannot tell
  size_t unknown_state = 0;
  std::vector<ProcessRef> crashed;         // crashed or killed: the pid is gone, no clean exit
  std::vector<ProcessRef> did_not_return;  // gone (exited or crashed) inside a call that never returned
  std::vector<ProcessRef> pending;         // in a call that has not returned (yet), process may still run
};
ProcessOverview process_overview(const RunDirectory& run, const ReportOptions& options = {});

std::string format_text_report(const RunDirectory& run, const ReportOptions& options = {});
// Header strings come from files as they are: dump with error_handler_t::replace, they may not be UTF-8.
nlohmann::json make_json_report(const RunDirectory& run, const ReportOptions& options = {});

}  // namespace trainscope::recorder
