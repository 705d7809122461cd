// Load-time configuration, lazy start on first NCCL use, exit and fork handling of the preloaded shim.
#include "shim/runtime.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/printable_escape.h"
#include "base/private_files.h"
#include "base/run_files.h"
#include "shim/call_site_capture.h"
#include "shim/call_sites.h"
#include "shim/comm_registry.h"
#include "shim/identity.h"
#include "shim/interception.h"
#include "shim/job_key.h"
#include "shim/nccl_libraries.h"
#include "shim/nccl_presence.h"

extern char** environ;

namespace trainscope::shim {

Runtime g_runtime;
__thread ThreadState t_thread __attribute__((tls_model("initial-exec")));

// The directory this library was loaded from: the engine and the Python module hooks are installed beside it.
bool own_directory(char* out, size_t out_len) {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&own_directory), &info) == 0 || info.dli_fname == nullptr) return false;
  const char* slash = strrchr(info.dli_fname, '/');
  if (slash == nullptr) return snprintf(out, out_len, ".") < static_cast<int>(out_len);
  const size_t len = static_cast<size_t>(slash - info.dli_fname);
  if (len + 1 > out_len) return false;
  memcpy(out, info.dli_fname, len);
  out[len] = '\0';
  return true;
}

namespace {

pthread_mutex_t g_start_lock = PTHREAD_MUTEX_INITIALIZER;

constexpr const char* kEngineFileName = "libtrainscope-engine.so";

void write_stderr(const char* text, size_t len) {
  while (len > 0) {
    const ssize_t n = write(STDERR_FILENO, text, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    text += n;
    len -= static_cast<size_t>(n);
  }
}

template <typename Fn>
void load_symbol(void* handle, const char* name, Fn* out) {
  *out = reinterpret_cast<Fn>(dlsym(handle, name));
}

// Whether this process's configuration wants the engine's entry points of `use` (a hook without them pays one load of a
// null pointer).
bool wants_entry_point(const Config& config, EngineEntryPointUse use) {
  switch (use) {
    case EngineEntryPointUse::kAlways:
      return true;
    case EngineEntryPointUse::kWatch:
      return config.watch != WatchMode::kOff;
    case EngineEntryPointUse::kNvtxStepMarker:
      return config.step_marker_form == StepMarkerForm::kNvtx;
    case EngineEntryPointUse::kAbortAfterBatch:
      return config.abort_after_batch_set;
    case EngineEntryPointUse::kLaunches:
      return config.launches != LaunchesMode::kOff;
    case EngineEntryPointUse::kWatchModules:
      return config.watch_modules;
  }
  return false;
}

void start_engine(int run_dir_error) {
  Runtime& rt = g_runtime;
  char dir[kMaxPath];
  char path[kMaxPath + 64];
  if (!own_directory(dir, sizeof(dir)) ||
      snprintf(path, sizeof(path), "%s/%s", dir, kEngineFileName) >= static_cast<int>(sizeof(path))) {
    log_message(LogLevel::kWarn, "cannot locate %s beside the preloaded library; logging to stderr only",
                kEngineFileName);
    return;
  }
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    log_message(LogLevel::kWarn, "cannot load the engine %s (%s); recording goes on, logging to stderr only", path,
                why != nullptr ? why : "unknown error");
    return;
  }
  decltype(&trainscope_engine_start) engine_start = nullptr;
  load_symbol(handle, "trainscope_engine_start", &engine_start);
  decltype(&trainscope_engine_log) engine_log = nullptr;
  load_symbol(handle, "trainscope_engine_log", &engine_log);
  if (engine_start == nullptr || engine_log == nullptr) {
    log_message(LogLevel::kWarn, "the engine %s lacks its entry points; recording goes on without it", path);
    return;
  }
  EngineStartArgs args{};
  args.abi_version = kEngineAbiVersion;
  args.size = sizeof(args);
  args.config = &rt.config;
  args.run_dir = rt.run_dir;
  args.run_dir_error = run_dir_error;
  args.recorder_path = rt.recorder_path;
  args.log_path = rt.log_path;
  args.host = rt.host;
  args.pid = rt.owner_pid;
  args.global_rank = rt.global_rank.load(std::memory_order_relaxed);
  args.launcher_rank = rt.launcher_rank;
  args.world = rt.launcher_world;
  args.nccl_version = rt.nccl_version;
  args.local_rank = rt.local_rank;
  args.run_id = rt.run_id;
  args.recorder = rt.writer.header();
  args.forked_child = rt.forked_from_nccl_user ? 1 : 0;
  if (engine_start(&args) != 0) {
    log_message(LogLevel::kWarn, "the engine %s failed to start; recording goes on without it", path);
    return;
  }
  EngineEntryPoints loaded{};
#define TRAINSCOPE_LOAD_ENTRY_POINT(name, wanted)                \
  if (wants_entry_point(rt.config, EngineEntryPointUse::wanted)) \
    load_symbol(handle, "trainscope_engine_" #name, &loaded.name);
  TRAINSCOPE_ENGINE_ENTRY_POINTS(TRAINSCOPE_LOAD_ENTRY_POINT)
#undef TRAINSCOPE_LOAD_ENTRY_POINT
  const std::atomic<uint32_t>* parked_calls = loaded.parked_calls != nullptr ? loaded.parked_calls() : nullptr;
  // All or none: a hook that began a watch must be able to end it, and a parked call to be confirmed.
  bool watch_complete = parked_calls != nullptr;
#define TRAINSCOPE_CHECK_WATCH_ENTRY_POINT(name, wanted) \
  if (EngineEntryPointUse::wanted == EngineEntryPointUse::kWatch && loaded.name == nullptr) watch_complete = false;
  TRAINSCOPE_ENGINE_ENTRY_POINTS(TRAINSCOPE_CHECK_WATCH_ENTRY_POINT)
#undef TRAINSCOPE_CHECK_WATCH_ENTRY_POINT
  if (!watch_complete) {
#define TRAINSCOPE_DROP_WATCH_ENTRY_POINT(name, wanted) \
  if (EngineEntryPointUse::wanted == EngineEntryPointUse::kWatch) loaded.name = nullptr;
    TRAINSCOPE_ENGINE_ENTRY_POINTS(TRAINSCOPE_DROP_WATCH_ENTRY_POINT)
#undef TRAINSCOPE_DROP_WATCH_ENTRY_POINT
    parked_calls = nullptr;
  }
  loaded.log = engine_log;
  rt.engine_parked_calls = parked_calls;
  rt.engine = loaded;  // from here on, log_message() goes through the engine
}

// Who this process is (host, launcher identity) and the name of its run: what the run directory is made from.
// Returns false when the run id does not fit.
bool learn_identity(Runtime& rt) {
  rt.owner_pid = static_cast<int32_t>(getpid());
  if (gethostname(rt.host, sizeof(rt.host)) != 0) snprintf(rt.host, sizeof(rt.host), "unknown");
  rt.host[sizeof(rt.host) - 1] = '\0';
  const LauncherIdentity identity = launcher_identity(environ);
  rt.launcher_rank = identity.rank;
  rt.launcher_world = identity.world;
  rt.local_rank = identity.local_rank;
  rt.global_rank.store(identity.rank, std::memory_order_relaxed);
  return run_id_from_environment(environ, rt.config.run_id, rt.host, static_cast<int32_t>(getpgrp()), rt.run_id,
                                 sizeof(rt.run_id), &rt.run_id_source);
}

// Creates the run directory (rt.run_dir) as a private folder (files::make_private_directory). Returns its state: error
// 0 or the errno / refusal that stopped it; old_mode when it was ours but open to others and is now 0700.
files::PrivateDirectory make_run_dir(Runtime& rt) {
  files::PrivateDirectory made;
  char base[kMaxPath];
  const char* dir = rt.config.dir;
  if (dir[0] != '/') {
    char cwd[PATH_MAX];
    if (getcwd(cwd, sizeof(cwd)) == nullptr) {
      made.error = errno;
      return made;
    }
    if (snprintf(base, sizeof(base), "%s/%s", cwd, dir) >= static_cast<int>(sizeof(base))) made.error = ENAMETOOLONG;
  } else if (snprintf(base, sizeof(base), "%s", dir) >= static_cast<int>(sizeof(base))) {
    made.error = ENAMETOOLONG;
  }
  if (made.error == 0 &&
      snprintf(rt.run_dir, sizeof(rt.run_dir), "%s/%s", base, rt.run_id) >= static_cast<int>(sizeof(rt.run_dir)))
    made.error = ENAMETOOLONG;
  return made.error != 0 ? made : files::make_private_directory(rt.run_dir);
}

// A run directory that others could write to was ours, and is private now: said once, by the process that changed it.
void warn_if_made_private(const Runtime& rt, const files::PrivateDirectory& made) {
  if (made.error == 0 && made.old_mode != 0)
    log_message(LogLevel::kWarn, "made the run directory '%s' private: it was mode %04o, open to other users",
                rt.run_dir, static_cast<unsigned>(made.old_mode));
}

// "rank-R.pid-P", or "pid-P" when the launcher gave no rank: the name of this process's files.
void file_stem(const Runtime& rt, char* stem, size_t stem_len) {
  if (rt.launcher_rank >= 0) {
    snprintf(stem, stem_len, "rank-%d.pid-%d", static_cast<int>(rt.launcher_rank), static_cast<int>(rt.owner_pid));
  } else {
    snprintf(stem, stem_len, "pid-%d", static_cast<int>(rt.owner_pid));
  }
}

// Why this process records nothing, or what else went wrong on the way: said once, when the start is done.
struct RecordingSetup {
  files::PrivateDirectory run_dir;  // run_dir.error: the run directory is unusable
  int recorder_error = 0;           // the flight recorder could not be created in it
  int log_error = 0;                // the log file could not be opened (logging goes to stderr only)
  char log_path[kMaxPath] = "";     // the log file refused
  bool failed() const { return run_dir.error != 0 || recorder_error != 0; }
  int error() const { return run_dir.error != 0 ? run_dir.error : recorder_error; }
};

// Creates the run directory and this process's flight recorder and log file.
void open_recorder(uint64_t start_ns, RecordingSetup* setup) {
  Runtime& rt = g_runtime;
  setup->run_dir = make_run_dir(rt);
  if (setup->run_dir.error != 0) return;
  char stem[96];
  file_stem(rt, stem, sizeof(stem));
  char exe[256] = "";
  const ssize_t exe_len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  exe[exe_len > 0 ? exe_len : 0] = '\0';

  recorder::WriterOptions options{};
  options.capacity = rt.config.recorder_records;
  options.max_comms = recorder::kDefaultMaxComms;
  options.max_sites = recorder::kDefaultMaxSites;
  options.max_names = recorder::kDefaultMaxNames;
  options.max_streams = recorder::kDefaultMaxStreams;
  options.pid = rt.owner_pid;
  options.launcher_rank = rt.launcher_rank;
  options.launcher_world = rt.launcher_world;
  options.local_rank = rt.local_rank;
  options.host = rt.host;
  options.run_id = rt.run_id;
  options.exe = exe;
  options.start_ns = start_ns;
  int error = EEXIST;
  // A recycled pid can meet an older run's file of the same name (or anything else there, a link included): never
  // overwrite it, take another name.
  for (int attempt = 0; attempt < 8 && error == EEXIST; ++attempt) {
    const int n = attempt == 0 ? snprintf(rt.recorder_path, sizeof(rt.recorder_path), "%s/%s%s", rt.run_dir, stem,
                                          run_files::kRecorderExtension)
                               : snprintf(rt.recorder_path, sizeof(rt.recorder_path), "%s/%s.%d%s", rt.run_dir, stem,
                                          attempt, run_files::kRecorderExtension);
    if (n >= static_cast<int>(sizeof(rt.recorder_path))) {
      error = ENAMETOOLONG;
      break;
    }
    options.path = rt.recorder_path;
    error = rt.writer.open(options);
  }
  setup->recorder_error = error;
  if (error != 0) {
    rt.recorder_path[0] = '\0';
    return;
  }
  const size_t path_len = strlen(rt.recorder_path);
  snprintf(rt.log_path, sizeof(rt.log_path), "%.*s.log", static_cast<int>(path_len - 6), rt.recorder_path);
  // Created here, private, so that the engine's logger only appends to it. A link or a stranger's file there is
  // refused: the engine then logs to stderr only.
  const int log_fd = files::open_append(rt.log_path);
  if (log_fd >= 0) {
    close(log_fd);
  } else {
    setup->log_error = -log_fd;
    // Cut to fit: the path only names the file in a warning.
    snprintf(setup->log_path, sizeof(setup->log_path), "%.*s", static_cast<int>(sizeof(setup->log_path) - 1),
             rt.log_path);
    rt.log_path[0] = '\0';
  }
}

void warn_unknown_variable(const char* name, size_t name_len, const char* suggestion, void*) {
  const int shown = static_cast<int>(name_len > 200 ? 200 : name_len);
  if (suggestion != nullptr) {
    log_message(LogLevel::kWarn, "unknown variable %.*s; did you mean %s?", shown, name, suggestion);
  } else {
    log_message(LogLevel::kWarn, "unknown variable %.*s (trainscope env lists the known ones)", shown, name);
  }
}

// No engine entry points: logging falls back to stderr and no hook calls into an engine (before it is loaded,
// and in a forked child, whose engine state is its parent's).
void forget_engine(Runtime& rt) {
  rt.engine = EngineEntryPoints{};
  rt.engine_parked_calls = nullptr;
}

// ncclGetVersion of the NCCL the first call went to (library 0 may be absent in a job that loads NCCL on a handle).
int32_t nccl_version_of(int library) {
  using GetVersion = ncclResult_t (*)(int*);
  GetVersion get_version = nullptr;
  if (library > 0 && library < kMaxLibraries) {
    get_version = reinterpret_cast<GetVersion>(
        g_library_functions[library][static_cast<int>(RealId::ncclGetVersion)].load(std::memory_order_relaxed));
  } else {
    get_version = REAL_HELPER(ncclGetVersion);
  }
  int version = 0;
  return get_version != nullptr && get_version(&version) == ncclSuccess ? version : 0;
}

// The one warning of a process that records nothing: the cause first, then what it means.
void warn_nothing_recorded(const Runtime& rt, const RecordingSetup& setup) {
  const char* dir = rt.run_dir[0] != '\0' ? rt.run_dir : rt.config.dir;
  const int error = setup.error();
  const char* remedy = "set TRAINSCOPE_DIR to a writable folder of yours";
  if (setup.run_dir.error == files::kOthersWrite) {
    log_message(LogLevel::kWarn,
                "nothing is recorded: the run directory '%s' belongs to another user (uid %u) and others can write to "
                "it; the job runs on without trainscope's checks and reports; %s",
                dir, static_cast<unsigned>(setup.run_dir.owner_uid), remedy);
  } else if (setup.run_dir.error != 0) {
    const bool exists = error == files::kNotDirectory || error == files::kIsSymlink;
    log_message(LogLevel::kWarn,
                "nothing is recorded: cannot %s the run directory '%s' (%s); the job runs on without trainscope's "
                "checks and reports; %s",
                exists ? "use" : "create", dir, files::error_text(error), remedy);
  } else {
    log_message(LogLevel::kWarn,
                "nothing is recorded: cannot create the flight recorder '%s' (%s); the job runs on without "
                "trainscope's checks and reports; %s",
                rt.recorder_path[0] != '\0' ? rt.recorder_path : dir, files::error_text(error), remedy);
  }
}

// Registered with on_exit() at the first start, never again (a forked child inherits it): exit()'s status goes into
// the recorder before the destructors run, so the summary can say "exited with status 3" rather than only "exited".
// Not reached by _exit(), a signal or a crash: those leave no status, which the summary says too.
bool g_exit_status_hook = false;

void note_exit_status(int status, void*) {
  Runtime& rt = g_runtime;
  if (rt.owner_pid != static_cast<int32_t>(getpid()) || !rt.writer.is_open()) return;
  recorder::record_exit_status(rt.writer.header(), status);
}

void start_locked(int library) {
  Runtime& rt = g_runtime;
  use_counter_clock_if_the_kernel_does();
  const uint64_t start_ns = now_ns();
  forget_engine(rt);
  rt.run_dir[0] = rt.recorder_path[0] = rt.log_path[0] = '\0';
  const bool named = learn_identity(rt);
  rt.nccl_version = nccl_version_of(library);
  RecordingSetup setup;
  if (named) {
    open_recorder(start_ns, &setup);
  } else {
    setup.run_dir.error = ENAMETOOLONG;
  }
  const int run_dir_error = setup.error();
  if (rt.writer.is_open() && rt.nccl_version != 0) rt.writer.set_nccl_version(rt.nccl_version);
  if (rt.writer.is_open() && !g_exit_status_hook) g_exit_status_hook = on_exit(note_exit_status, nullptr) == 0;
  start_engine(run_dir_error);
  // Once the engine is there, so that what can reach the log file does.
  if (setup.failed()) warn_nothing_recorded(rt, setup);
  warn_if_made_private(rt, setup.run_dir);
  if (setup.log_error != 0)
    log_message(LogLevel::kWarn, "cannot use the log file '%s' (%s): logging to stderr only", setup.log_path,
                files::error_text(setup.log_error));
  detect_python();
  for (int slot = 1; slot <= handle_libraries(); ++slot)
    log_message(LogLevel::kInfo, "NCCL looked up on a library handle: %s (recorded like a linked NCCL)",
                library_path(slot));
  // Typos are warned about here, in processes that use NCCL, not in every shell or compiler that inherits
  // LD_PRELOAD; once per job: a forked child inherits its parent's environment, and that it was said.
  if (!rt.startup_warnings_said) for_each_unknown_variable(environ, warn_unknown_variable, nullptr);
  rt.startup_warnings_said = true;
}

}  // namespace

void start_slow_path(int library) {
  if (!g_runtime.enabled) return;
  pthread_mutex_lock(&g_start_lock);
  if (g_runtime.start_state.load(std::memory_order_relaxed) == static_cast<int>(StartState::kNotStarted)) {
    g_runtime.start_state.store(static_cast<int>(StartState::kStarting), std::memory_order_relaxed);
    ++t_thread.depth;  // whatever the start touches (dlopen, the engine) is ours, not the job's
    start_locked(library);
    --t_thread.depth;
    g_runtime.start_state.store(static_cast<int>(StartState::kReady), std::memory_order_release);
  }
  pthread_mutex_unlock(&g_start_lock);
}

uint32_t current_tid() {
  if (__builtin_expect(t_thread.tid == 0, 0)) t_thread.tid = static_cast<uint32_t>(syscall(SYS_gettid));
  return t_thread.tid;
}

void learn_global_rank(int32_t rank) {
  int32_t expected = -1;
  if (rank < 0 || !g_runtime.global_rank.compare_exchange_strong(expected, rank, std::memory_order_relaxed)) return;
  g_runtime.writer.set_global_rank(rank);
  if (g_runtime.engine.set_rank != nullptr) g_runtime.engine.set_rank(rank);
}

void log_message(LogLevel level, const char* format, ...) {
  const Runtime& rt = g_runtime;
  if (level < rt.config.log_level || rt.config.log_level == LogLevel::kOff) return;
  char raw[1024];
  va_list args;
  va_start(args, format);
  vsnprintf(raw, sizeof(raw), format, args);
  va_end(args);
  // Every message here is one line, and what it names (a host, TRAINSCOPE_DIR, a path, a variable's name) comes from
  // outside: its control characters and newlines are escaped as the reports escape them, never written raw.
  char message[sizeof(raw) * 4];  // each byte at most 4 ("\x0a"): the whole message always fits
  size_t used = 0;
  reports::escape_printable(raw, strlen(raw), reports::PrintableForm::kLine, [&](const char* piece, size_t n) {
    if (used + n >= sizeof(message)) return;
    memcpy(message + used, piece, n);
    used += n;
  });
  message[used] = '\0';
  if (rt.engine.log != nullptr) {
    rt.engine.log(static_cast<int>(level), message);
    return;
  }
  const int32_t rank = rt.global_rank.load(std::memory_order_relaxed);
  if (!config_logs_to_stderr(rt.config, rank)) return;
  char line[sizeof(message) + 64];
  int n = rank >= 0 ? snprintf(line, sizeof(line), "[trainscope][rank %d] %s: %s\n", static_cast<int>(rank),
                               log_level_name(level), message)
                    : snprintf(line, sizeof(line), "[trainscope][rank ?] %s: %s\n", log_level_name(level), message);
  if (n < 0) return;
  if (n >= static_cast<int>(sizeof(line))) n = sizeof(line) - 1;
  write_stderr(line, static_cast<size_t>(n));
}

namespace {

void fork_prepare() {
  pthread_mutex_lock(&g_start_lock);
  if (g_runtime.engine.fork_prepare != nullptr) g_runtime.engine.fork_prepare();
}

void fork_parent() {
  if (g_runtime.engine.fork_parent != nullptr) g_runtime.engine.fork_parent();
  pthread_mutex_unlock(&g_start_lock);
}

// The child shares nothing with its parent's recording: it drops the parent's mapping (so it can never write
// the parent's file), forgets the parent's communicators and engine state, and starts anew on its own first
// NCCL call.
void fork_child() {
  Runtime& rt = g_runtime;
  if (rt.start_state.load(std::memory_order_relaxed) == static_cast<int>(StartState::kReady))
    rt.forked_from_nccl_user = true;
  if (rt.engine.fork_child != nullptr) rt.engine.fork_child();
  rt.writer.abandon();
  wall_clock_after_fork_in_child();
  reset_comm_registry();
  forget_engine(rt);
  reset_call_sites();
  reset_job_key();
  t_thread = ThreadState{};
  rt.start_state.store(static_cast<int>(StartState::kNotStarted), std::memory_order_relaxed);
  pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
  memcpy(&g_start_lock, &fresh, sizeof(fresh));
}

// Names this library in an injection variable (NVTX_INJECTION64_PATH, CUDA_INJECTION64_PATH), so the library that
// reads it loads us as its tool. A tool the job chose itself (Nsight Systems sets both) is left alone; the engine says
// so when it starts.
void claim_injection_variable(const char* variable) {
  if (getenv(variable) != nullptr) return;
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&own_directory), &info) != 0 && info.dli_fname != nullptr)
    setenv(variable, info.dli_fname, 0);
}

// Parses the configuration once, when the library is loaded: an invalid value stops the process with status 2
// before the job runs, because a debugging run with the wrong settings wastes the job.
__attribute__((constructor)) void load_configuration() {
  Runtime& rt = g_runtime;
  char error[512];
  if (!parse_config(environ, &rt.config, error, sizeof(error))) {
    write_stderr(error, strlen(error));
    write_stderr("\n", 1);
    _exit(2);
  }
  rt.enabled = rt.config.enable;
  rt.global_rank.store(-1, std::memory_order_relaxed);  // "rank ?" in what is logged before the start
  if (!rt.enabled) return;
  pthread_atfork(fork_prepare, fork_parent, fork_child);
  // Batches counted at NVTX ranges need us to be the job's NVTX tool; launches before the first NCCL call need us to
  // be the CUDA driver's injection library (cuda_injection.cc).
  if (rt.config.step_marker_form == StepMarkerForm::kNvtx) claim_injection_variable("NVTX_INJECTION64_PATH");
  if (rt.config.launches != LaunchesMode::kOff) claim_injection_variable("CUDA_INJECTION64_PATH");
  if (rt.config.watch_modules) inject_module_hooks();
}

// Whether a recorder of launcher rank `rank` is in the run directory: a process of that rank did use NCCL, so this
// one (a data-loader worker that imported the framework) is its helper, not a rank whose NCCL we cannot see.
bool rank_has_recorder(const char* run_dir, int32_t rank) {
  if (rank < 0) return false;
  char prefix[32];
  const int prefix_len = snprintf(prefix, sizeof(prefix), "rank-%d.pid-", static_cast<int>(rank));
  DIR* dir = opendir(run_dir);
  if (dir == nullptr) return false;
  bool found = false;
  while (const dirent* entry = readdir(dir)) {
    const size_t len = strlen(entry->d_name);
    const size_t extension_len = strlen(run_files::kRecorderExtension);
    if (strncmp(entry->d_name, prefix, static_cast<size_t>(prefix_len)) == 0 && len > extension_len &&
        strcmp(entry->d_name + len - extension_len, run_files::kRecorderExtension) == 0) {
      found = true;
      break;
    }
  }
  closedir(dir);
  return found;
}

// A process that loaded NCCL and made no communicator says so (see nccl_presence.h): once, in its log, and in a note
// the run summary reads. A statically linked NCCL is invisible to us; this is how its run does not look clean.
void note_nccl_without_calls(bool started) {
  Runtime& rt = g_runtime;
  if (rt.forked_from_nccl_user || comms_registered() != 0) return;
  char nccl[512];
  if (!find_loaded_nccl(nccl, sizeof(nccl))) {
    if (handle_libraries() == 0) return;
    snprintf(nccl, sizeof(nccl), "%s", library_path(1));
  }
  if (!started) {
    if (!learn_identity(rt)) return;
    const files::PrivateDirectory made = make_run_dir(rt);
    if (made.error != 0) return;
    warn_if_made_private(rt, made);
  }
  if (rt.run_dir[0] == '\0') return;
  char stem[96];
  file_stem(rt, stem, sizeof(stem));
  char exe[256] = "";
  const ssize_t exe_len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  exe[exe_len > 0 ? exe_len : 0] = '\0';
  NoCallsNote note{};
  note.run_dir = rt.run_dir;
  note.stem = stem;
  note.pid = rt.owner_pid;
  note.rank = rt.launcher_rank;
  note.host = rt.host;
  note.exe = exe;
  note.nccl_path = nccl;
  note.cuda_driver = cuda_driver_loaded();
  // NCCL's calls only: a module frame's record (TRAINSCOPE_WATCH=modules) is not one.
  const uint64_t records =
      started && rt.writer.is_open() ? __atomic_load_n(&rt.writer.header()->next, __ATOMIC_ACQUIRE) : 0;
  note.calls = records - (records < module_frames_recorded() ? records : module_frames_recorded());
  if (const int error = write_no_calls_note(note); error != 0) {
    log_message(LogLevel::kWarn, "cannot write the note '%s/%s%s' (%s)", rt.run_dir, stem, kNoCallsSuffix,
                files::error_text(error));
    return;
  }
  // A launcher (no rank) or a helper of a rank that did use NCCL is expected to look like this: only a rank's own
  // process is worth a warning.
  const bool worth_a_warning = rt.launcher_rank >= 0 && !rank_has_recorder(rt.run_dir, rt.launcher_rank);
  if (note.calls > 0) {
    // Its calls reached our hooks (ncclGetUniqueId): nothing is hidden from us, it just ended before its communicator.
    // Worth a warning in a rank's own process; a launcher that made an id for its workers is expected to.
    log_message(rt.launcher_rank >= 0 ? LogLevel::kWarn : LogLevel::kDebug,
                "this process made %llu NCCL call(s) but no communicator: it ended before creating one",
                static_cast<unsigned long long>(note.calls));
  } else if (!note.cuda_driver) {
    // A CPU process (torch with gloo, a CPU-only wheel that still ships libnccl): NCCL cannot have run here.
    log_message(worth_a_warning ? LogLevel::kInfo : LogLevel::kDebug,
                "%s is loaded in this process but the CUDA driver never was: it ran no NCCL collective (on the CPU, "
                "collectives go through gloo or MPI, which trainscope does not watch)",
                nccl);
  } else {
    log_message(worth_a_warning ? LogLevel::kWarn : LogLevel::kDebug,
                "%s is loaded in this process but no NCCL communicator was seen: if this process runs collectives, "
                "NCCL may be linked statically into it (trainscope sees calls into a shared libnccl only)",
                nccl);
  }
}

__attribute__((destructor)) void stop_at_exit() {
  Runtime& rt = g_runtime;
  if (!rt.enabled) return;
  const bool started = rt.start_state.load(std::memory_order_acquire) == static_cast<int>(StartState::kReady) &&
                       rt.owner_pid == static_cast<int32_t>(getpid());
  if (rt.start_state.load(std::memory_order_acquire) != static_cast<int>(StartState::kNotStarted) && !started) return;
  ++t_thread.depth;  // what the check touches is ours
  if (started) settle_run_directory_at_exit();
  note_nccl_without_calls(started);
  --t_thread.depth;
  if (!started) return;
  if (rt.engine.stop != nullptr) rt.engine.stop();
  rt.writer.close(now_ns());
}

}  // namespace

}  // namespace trainscope::shim
