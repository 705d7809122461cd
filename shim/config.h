// TRAINSCOPE_* configuration: the table of variables, the parser, and the parsed result.
//
// Freestanding (libc only, no allocation, no exceptions): the preloaded shim parses the environment at load,
// and `trainscope env` uses the same code so the two can never disagree.
#pragma once

#include <cstddef>
#include <cstdint>

namespace trainscope {

enum class LogLevel : uint8_t { kTrace = 0, kDebug, kInfo, kWarn, kError, kCritical, kOff };
enum class LogRanksMode : uint8_t { kMain = 0, kAll, kList };
enum class ValueSource : uint8_t { kDefault = 0, kEnvironment };

// Index of each known variable in config_vars() and Config::source.
enum ConfigVar : int {
  kVarEnable = 0,
  kVarDir,
  kVarRunId,
  kVarRecorderRecords,
  kVarLogLevel,
  kVarLogRanks,
  kConfigVarCount,
};

inline constexpr int kMaxLogRankRanges = 64;
inline constexpr size_t kMaxPath = 4096;
inline constexpr size_t kMaxRunId = 96;
inline constexpr uint64_t kMinRecorderRecords = 16;
inline constexpr uint64_t kMaxRecorderRecords = uint64_t{1} << 24;

struct RankRange {
  int32_t first;
  int32_t last;  // inclusive
};

struct Config {
  bool enable;
  char dir[kMaxPath];         // run directories are created below it
  char run_id[kMaxRunId + 1]; // empty: derived from the launcher's job identity
  uint64_t recorder_records;  // capacity of each process's flight recorder ring
  LogLevel log_level;
  LogRanksMode log_ranks_mode;
  int log_rank_range_count;
  RankRange log_rank_ranges[kMaxLogRankRanges];
  ValueSource source[kConfigVarCount];
};

struct ConfigVarInfo {
  const char* name;          // "TRAINSCOPE_LOG_LEVEL"
  const char* default_text;  // "info"
  const char* accepted;      // "trace|debug|info|warn|error|critical|off"
  const char* description;   // one sentence for `trainscope env` and the README
};

// The known variables, indexed by ConfigVar.
const ConfigVarInfo* config_vars();

// Fills `out` with the defaults.
void config_defaults(Config* out);

// Parses every known TRAINSCOPE_* variable in `env` (an environ-style NULL-terminated array). Returns true on
// success. On the first invalid value returns false and writes one NUL-terminated line into `error` naming the
// variable, the value and the accepted forms, e.g.
//   trainscope: invalid TRAINSCOPE_LOG_LEVEL='loud': accepted trace|debug|info|warn|error|critical|off
bool parse_config(char* const* env, Config* out, char* error, size_t error_len);

// Calls `fn` for every TRAINSCOPE_* variable in `env` that is not known, with the closest known name (edit
// distance) or nullptr when none is close. `name` is not NUL-terminated at name_len.
using UnknownVariableFn = void (*)(const char* name, size_t name_len, const char* suggestion, void* ctx);
void for_each_unknown_variable(char* const* env, UnknownVariableFn fn, void* ctx);

// Whether `rank` logs to stderr under this configuration (the main rank is global rank 0; an unknown rank,
// -1, counts as main only when the process has no launcher rank at all).
bool config_logs_to_stderr(const Config& config, int32_t rank);

// Name of a level as accepted by TRAINSCOPE_LOG_LEVEL.
const char* log_level_name(LogLevel level);

}  // namespace trainscope
