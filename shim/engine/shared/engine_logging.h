// The engine's logger: `[trainscope][rank N]` lines to stderr (main rank by default) and to the rank's own file.
#pragma once

#include <cstdint>
#include <string>

#include "shim/config.h"

namespace trainscope::engine {

// (Re)creates the logger. Never throws: a log file that cannot be opened leaves stderr logging and returns false with
// `error` saying why.
bool start_logging(const Config& config, int32_t global_rank, const std::string& log_path, std::string* error);

// Changes the rank shown in every line and whether this process logs to stderr.
void set_logging_rank(int32_t global_rank);

void log(LogLevel level, const char* message);
// Whether a message at `level` would be logged anywhere (the terminal or the rank's file): work done only to make
// a message (reading /proc at exit) is skipped when it would not be.
bool log_enabled(LogLevel level);
void flush_logs();

// A forked child must never write through its parent's sinks: drop them without closing anything.
void abandon_logging();

}  // namespace trainscope::engine
