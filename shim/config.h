// TRAINSCOPE_* configuration: the parsed result, its parser, and access to the table of variables (config_vars.h).
//
// Freestanding (libc only, no allocation, no exceptions): the preloaded shim parses the environment at load,
// and `trainscope env` uses the same code so the two can never disagree.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/log_level.h"
#include "shim/config_vars.h"

namespace trainscope {

enum class LogRanksMode : uint8_t { kMain = 0, kAll, kList };
enum class ValueSource : uint8_t { kDefault = 0, kEnvironment };

// Index of each known variable in config_vars() and Config::source, in config_vars.h's order.
#define TRAINSCOPE_CONFIG_VAR_ID(suffix, id, default_text, accepted, parser, printer, description) id,
enum ConfigVar : int { TRAINSCOPE_CONFIG_VARS(TRAINSCOPE_CONFIG_VAR_ID) kConfigVarCount };
#undef TRAINSCOPE_CONFIG_VAR_ID

inline constexpr int kMaxLogRankRanges = 64;
inline constexpr size_t kMaxPath = 4096;
inline constexpr size_t kMaxRunId = 96;
inline constexpr uint64_t kMinRecorderRecords = 16;
inline constexpr uint64_t kMaxRecorderRecords = uint64_t{1} << 24;
inline constexpr size_t kMaxCoordinatorHost = 255;
inline constexpr size_t kMinToken = 8;
inline constexpr size_t kMaxToken = 128;
inline constexpr uint32_t kMaxDesyncTimeoutSeconds = 7 * 24 * 3600;
inline constexpr uint64_t kMaxWatchEvery = 1000000000;
inline constexpr uint32_t kMaxFrames = 100000;
inline constexpr uint32_t kMaxOverflowStreak = 1000000;
inline constexpr size_t kMaxStepMarker = 1024;
inline constexpr size_t kMaxWatchKernels = 1024;  // the regex of TRAINSCOPE_WATCH=kernels:REGEX
inline constexpr size_t kMaxKernelDtype = 15;
inline constexpr int kMaxTraceBatchRanges = 64;
inline constexpr uint64_t kMaxBatchNumber = uint64_t{1} << 48;

// TRAINSCOPE_COORDINATOR: where the out-of-band exchange's coordinator is.
enum class CoordinatorMode : uint8_t {
  kAuto = 0,  // global rank 0 hosts it at MASTER_ADDR:MASTER_PORT+kCoordinatorPortOffset; off without a launcher
  kOff,       // no exchange: record locally only
  kAddress,   // host:port of a coordinator that runs elsewhere (`trainscope coordinator`, `trainscope run`)
};
inline constexpr int kCoordinatorPortOffset = 3;

// What a rank does when the coordinator reports a mismatch or a certain desync.
enum class VerdictPolicy : uint8_t { kAbort = 0, kWarn };

struct RankRange {
  int32_t first;
  int32_t last;  // inclusive
};

// TRAINSCOPE_WATCH: whether collectives get their buffers' statistics (frames). Kernels are watched when
// Config::watch_kernels holds a regex (TRAINSCOPE_WATCH=kernels:REGEX or collectives,kernels:REGEX), PyTorch modules
// when Config::watch_modules is set (modules, modules:REGEX, with collectives and kernels:REGEX or alone).
enum class WatchMode : uint8_t { kOff = 0, kCollectives };

// TRAINSCOPE_LAUNCHES: what the launch collector (CUPTI) does.
enum class LaunchesMode : uint8_t {
  kOn = 0,  // API callbacks (launches, errors, synchronisations) and kernel completion (CUPTI activity)
  kCalls,   // API callbacks only: no CUPTI activity buffers
  kOff,     // no launch collector
};

// TRAINSCOPE_THREAD_CLASS: the scheduling class of trainscope's bulk threads (see base/thread_class.h).
enum class ThreadClass : uint8_t {
  kIdle = 0,  // SCHED_IDLE: they run on the cores the job leaves idle
  kNormal,    // the job's own class (SCHED_OTHER)
};

// TRAINSCOPE_STEP_MARKER's form; the regex itself is compiled (and checked) by the engine and `trainscope env`.
enum class StepMarkerForm : uint8_t { kAuto = 0, kNvtx, kCollective, kEvery };

// TRAINSCOPE_ON_NONFINITE: what the first inf/nan does once its reports are written.
enum class NonfinitePolicy : uint8_t { kReport = 0, kAbort };

struct BatchRange {
  uint64_t first;
  uint64_t last;  // inclusive
};

struct Config {
  bool enable;
  char dir[kMaxPath];          // run directories are created below it
  char run_id[kMaxRunId + 1];  // empty: derived from the launcher's job identity
  uint64_t recorder_records;   // capacity of each process's flight recorder ring
  LogLevel log_level;
  LogRanksMode log_ranks_mode;
  int log_rank_range_count;
  RankRange log_rank_ranges[kMaxLogRankRanges];
  CoordinatorMode coordinator_mode;
  char coordinator_host[kMaxCoordinatorHost + 1];
  uint16_t coordinator_port;
  char token[kMaxToken + 1];  // empty: derived from the job key (job_key.h; `trainscope run` always sets one)
  VerdictPolicy on_mismatch;
  VerdictPolicy on_desync;
  uint32_t desync_timeout_seconds;
  WatchMode watch;                           // collectives (kOff also when only kernels are watched)
  char watch_kernels[kMaxWatchKernels + 1];  // kernels:REGEX's regex (POSIX extended); empty: no kernel watched
  bool watch_modules;                        // modules or modules:REGEX: torch.nn.Module forwards (python/inject/)
  char watch_modules_regex[kMaxWatchKernels + 1];  // modules:REGEX's regex; empty: every module
  bool watch_module_backward;  // backward: the watched modules' gradients are frames too (python/inject/)
  uint64_t watch_every;        // watch every K-th collective of each communicator (1: all)
  uint64_t watch_min_bytes;    // and only those moving at least this many bytes
  uint32_t max_frames;         // frames kept per rank for a detection report
  StepMarkerForm step_marker_form;
  char step_marker[kMaxStepMarker + 1];  // the whole value as given ("auto", "nvtx:^step", "every:12")
  NonfinitePolicy on_nonfinite;
  uint32_t overflow_streak;     // consecutive batches with inf/nan that make a persistent overflow; 0: off
  double near_overflow;         // fraction of a type's largest finite value that warns; 0: off
  int trace_batch_range_count;  // TRAINSCOPE_TRACE_BATCHES
  BatchRange trace_batch_ranges[kMaxTraceBatchRanges];
  bool abort_after_batch_set;  // TRAINSCOPE_ABORT_AFTER_BATCH given
  uint64_t abort_after_batch;
  LaunchesMode launches;
  char kernel_dtype[kMaxKernelDtype + 1];  // TRAINSCOPE_KERNEL_DTYPE's canonical name ("float16"); empty: from the name
  ThreadClass thread_class;
  ValueSource source[kConfigVarCount];
  // A launcher rank variable (RANK, OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK, SLURM_PROCID) holds a rank, so the
  // process is one of many and an unknown rank must not be taken for the main one (see config_logs_to_stderr).
  bool launcher_has_rank;
};

struct ConfigVarInfo {
  const char* name;          // "TRAINSCOPE_LOG_LEVEL"
  const char* default_text;  // "info"
  const char* accepted;      // "trace|debug|info|warn|error|critical|off"
  const char* description;   // one sentence for `trainscope env --json` and docs/configuration.md
};

// The known variables, indexed by ConfigVar.
const ConfigVarInfo* config_vars();

// Fills `out` with the defaults: zero, then every non-empty default text of config_vars.h parsed.
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

// Whether anything is watched (collectives or kernels): the frame machinery runs.
inline bool config_watches_anything(const Config& config) {
  return config.watch != WatchMode::kOff || config.watch_kernels[0] != '\0' || config.watch_modules;
}

// Whether TRAINSCOPE_TRACE_BATCHES names `batch`.
bool config_traces_batch(const Config& config, uint64_t batch);

// Whether `value` is a valid job token, the one rule of TRAINSCOPE_TOKEN and `trainscope coordinator --token`: 8-128
// characters of [A-Za-z0-9._-] (the accepted text of TRAINSCOPE_TOKEN in config_vars()). When not, sets `reason`
// ("(too short)", "(too long)", "(character outside [A-Za-z0-9._-])").
bool config_token_valid(const char* value, const char** reason);

// Writes the effective value of `var` in its canonical accepted form ("1", "warn", "0,3,5-7"), NUL-terminated, so
// that `trainscope env` and the shim's own logs show the same text. Returns false if it was truncated to fit.
bool config_value_text(const Config& config, ConfigVar var, char* out, size_t out_len);

// Copies `len` bytes of an untrusted value into `out` (NUL-terminated) so that printing it cannot mangle a
// terminal: control and non-ASCII bytes become \xNN, ' and \ are escaped, and more than kMaxShownValue bytes end
// in "...". Never splits an escape; an `out` of kMaxShownValue * 4 + 4 bytes always holds the whole result.
inline constexpr size_t kMaxShownValue = 64;
void escape_value(const char* value, size_t len, char* out, size_t out_len);

}  // namespace trainscope
