// spdlog-based logging of the engine (see engine_logging.h).
#include "shim/engine/shared/engine_logging.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <mutex>

#include "base/printable.h"
#include "base/private_files.h"
#include "shim/fd_file_sink.h"

namespace trainscope::engine {

namespace {

struct LogState {
  std::mutex mutex;
  Config config{};
  int32_t rank = -1;
  std::shared_ptr<spdlog::sinks::sink> stderr_sink;
  std::shared_ptr<spdlog::sinks::sink> file_sink;
  std::shared_ptr<spdlog::logger> logger;
};

// Leaked on purpose: logging may be called from exit paths after static destructors have run.
LogState* g_state = new LogState;

spdlog::level::level_enum to_spdlog(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace:
      return spdlog::level::trace;
    case LogLevel::kDebug:
      return spdlog::level::debug;
    case LogLevel::kInfo:
      return spdlog::level::info;
    case LogLevel::kWarn:
      return spdlog::level::warn;
    case LogLevel::kError:
      return spdlog::level::err;
    case LogLevel::kCritical:
      return spdlog::level::critical;
    case LogLevel::kOff:
      return spdlog::level::off;
  }
  return spdlog::level::info;
}

std::string rank_tag(int32_t rank) {
  return rank >= 0 ? "[trainscope][rank " + std::to_string(rank) + "]" : std::string("[trainscope][rank ?]");
}

// Applies rank-dependent settings; the caller holds the mutex.
void apply_rank_locked(LogState& state) {
  const std::string tag = rank_tag(state.rank);
  if (state.stderr_sink) {
    state.stderr_sink->set_pattern(tag + " %l: %v");
    state.stderr_sink->set_level(config_logs_to_stderr(state.config, state.rank) ? spdlog::level::trace
                                                                                 : spdlog::level::off);
  }
  if (state.file_sink) {
    state.file_sink->set_formatter(std::make_unique<spdlog::pattern_formatter>(
        "%Y-%m-%dT%H:%M:%S.%fZ " + tag + " %l: %v", spdlog::pattern_time_type::utc));
  }
}

}  // namespace

bool start_logging(const Config& config, int32_t global_rank, const std::string& log_path, std::string* error) {
  LogState& state = *g_state;
  std::lock_guard<std::mutex> lock(state.mutex);
  state.config = config;
  state.rank = global_rank;
  state.stderr_sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  state.file_sink.reset();
  bool opened = true;
  if (!log_path.empty()) {
    // Opened here, not by spdlog: never through a link, never a file of another user.
    const int fd = files::open_append(log_path.c_str());
    if (fd < 0) {
      opened = false;
      if (error != nullptr) *error = files::error_text(-fd);
    } else {
      state.file_sink = std::make_shared<FdFileSink>(fd);
    }
  }
  std::vector<spdlog::sink_ptr> sinks{state.stderr_sink};
  if (state.file_sink) sinks.push_back(state.file_sink);
  state.logger = std::make_shared<spdlog::logger>("trainscope", sinks.begin(), sinks.end());
  state.logger->set_level(to_spdlog(config.log_level));
  // Logging is rare and must survive a crash right after it: every line is flushed.
  state.logger->flush_on(spdlog::level::trace);
  state.logger->set_error_handler([](const std::string&) {});
  apply_rank_locked(state);
  return opened;
}

void set_logging_rank(int32_t global_rank) {
  LogState& state = *g_state;
  std::lock_guard<std::mutex> lock(state.mutex);
  state.rank = global_rank;
  apply_rank_locked(state);
}

bool log_enabled(LogLevel level) {
  LogState& state = *g_state;
  std::lock_guard<std::mutex> lock(state.mutex);
  return state.logger && state.logger->should_log(to_spdlog(level));
}

void log(LogLevel level, const char* message) {
  LogState& state = *g_state;
  std::shared_ptr<spdlog::logger> logger;
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    logger = state.logger;
  }
  if (!logger) return;
  try {
    // No control character reaches a terminal or the log file raw, whoever made the message: the lines of a
    // multi-line report are kept, and a value put into a message (a host, a path) is escaped whole where it is put,
    // its newlines too (reports::printable).
    logger->log(to_spdlog(level), "{}", reports::printable_text(message != nullptr ? message : ""));
  } catch (...) {
    // Logging never throws into the job.
  }
}

void flush_logs() {
  LogState& state = *g_state;
  std::lock_guard<std::mutex> lock(state.mutex);
  if (state.logger) state.logger->flush();
}

void abandon_logging() {
  // The parent's sinks (and a mutex a parent thread may have held at fork) are leaked, never touched again.
  g_state = new LogState;
}

}  // namespace trainscope::engine
