// The ends of a process that run none of exit()'s handlers: _exit() (Python's os._exit, which every child of Python's
// fork-based multiprocessing ends with, and frameworks that skip their own clean-up) and exec() (os.execv). Without
// these hooks such a process leaves its recorder saying "running" and its pid gone — read as crashed or killed — and
// its connection to the coordinator drops without a goodbye — taken for a vanished rank, which stops the job.
//
// Each hook says how the process ended in its recorder (the status, or that it exec()ed), lets the engine say goodbye
// when that is safe, and calls the real function. exit() reaches _exit inside libc, not through these hooks: a normal
// exit is unchanged. A process that never used NCCL, a forked child that did not (yet), and trainscope's own stop after
// a verdict (its recorder already says so) go straight to the real function. Freestanding: libc only.
#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>

#include <atomic>

#include "shim/elf_symbols.h"
#include "shim/job_key.h"
#include "shim/runtime.h"

namespace trainscope::shim {
namespace {

using ExitFunction = void (*)(int);
using ExecveFunction = int (*)(const char*, char* const[], char* const[]);
using ExecvFunction = int (*)(const char*, char* const[]);
using ExecvpeFunction = int (*)(const char*, char* const[], char* const[]);
using FexecveFunction = int (*)(int, char* const[], char* const[]);

// The next definition after this library (libc's), or any other when this library was dlopen()ed rather than
// preloaded. Resolved from the ELF tables at each call (these are rare, and a local static would need a guard):
// never through dlsym, which we interpose.
template <typename Fn>
Fn next_function(const char* name) {
  void* address = elf::next_definition(name);
  if (address == nullptr) address = elf::any_other_definition(name);
  return reinterpret_cast<Fn>(address);
}

std::atomic<bool> g_ending{false};

// Whether this process's own recording is live: started by this very process (not a forked or vfork()ed child that
// has not used NCCL itself) and not already ended by trainscope's own stop.
bool recording_here() {
  const Runtime& rt = g_runtime;
  if (!rt.enabled || rt.start_state.load(std::memory_order_acquire) != static_cast<int>(StartState::kReady) ||
      rt.owner_pid != static_cast<int32_t>(getpid()) || !rt.writer.is_open())
    return false;
  const uint32_t flags = __atomic_load_n(&rt.writer.header()->end_flags, __ATOMIC_ACQUIRE);
  return (flags & recorder::kEndStopped) == 0;
}

// Says how the process ends and stops the engine (its goodbye to the coordinator) when `stop_engine`. Returns
// whether it did (the first caller only: another thread's _exit, or the engine's own, passes through).
bool end_recording(bool exec, int status, bool stop_engine) {
  if (!recording_here() || g_ending.exchange(true)) return false;
  Runtime& rt = g_runtime;
  recorder::FileHeader* header = rt.writer.header();
  if (!exec) recorder::record_exit_status(header, status);
  if (stop_engine) {
    ++t_thread.depth;
    settle_run_directory_at_exit();
    if (rt.engine.stop != nullptr) rt.engine.stop();
    --t_thread.depth;
  }
  recorder::record_end_without_exit(header, exec, now_ns());
  return true;
}

// _exit() may be called from a signal handler, where the engine's stop (locks, allocation) is not safe. CPython never
// does that (its signal handlers run in the interpreter loop, and os._exit is a plain call), so a process that runs
// Python gets the goodbye; any other only the record of its status, which is async-signal-safe.
bool engine_stop_is_safe_at_exit() {
  const recorder::FileHeader* header = g_runtime.writer.header();
  return header != nullptr && __atomic_load_n(&header->python_major, __ATOMIC_RELAXED) != 0;
}

[[noreturn]] void real_exit(const char* name, int status) {
  const ExitFunction real = next_function<ExitFunction>(name);
  if (real != nullptr) real(status);
  __builtin_trap();  // no libc after us: nothing can end the process
}

// After a failed exec() the process goes on: so does its recording (the engine has said goodbye: the cross-rank
// checks are over for it, which its log says).
int exec_failed(int error) {
  recorder::record_exec_failed(g_runtime.writer.header());
  g_ending.store(false);
  log_message(LogLevel::kWarn, "exec() failed (%s): this process goes on without the cross-rank checks",
              strerror(error));
  errno = error;
  return -1;
}

template <typename Call>
int exec_with_end(Call call) {
  const bool ended = end_recording(/*exec=*/true, 0, /*stop_engine=*/true);
  const int result = call();
  if (!ended) return result;
  return exec_failed(errno);
}

constexpr int kMaxListArguments = 4096;  // execl()'s argument list, collected on the stack

}  // namespace
}  // namespace trainscope::shim

using namespace trainscope::shim;

#define TS_PROCESS_END_EXPORT extern "C" __attribute__((visibility("default")))

// No noexcept: glibc declares _exit without one (unlike _Exit), and clang holds a definition to its declaration.
TS_PROCESS_END_EXPORT void _exit(int status) {
  end_recording(/*exec=*/false, status, engine_stop_is_safe_at_exit());
  real_exit("_exit", status);
}

TS_PROCESS_END_EXPORT void _Exit(int status) noexcept {
  end_recording(/*exec=*/false, status, engine_stop_is_safe_at_exit());
  real_exit("_Exit", status);
}

TS_PROCESS_END_EXPORT int execve(const char* path, char* const argv[], char* const envp[]) noexcept {
  const ExecveFunction real = next_function<ExecveFunction>("execve");
  if (real == nullptr) return errno = ENOSYS, -1;
  return exec_with_end([&] { return real(path, argv, envp); });
}

TS_PROCESS_END_EXPORT int execv(const char* path, char* const argv[]) noexcept {
  const ExecvFunction real = next_function<ExecvFunction>("execv");
  if (real == nullptr) return errno = ENOSYS, -1;
  return exec_with_end([&] { return real(path, argv); });
}

TS_PROCESS_END_EXPORT int execvp(const char* file, char* const argv[]) noexcept {
  const ExecvFunction real = next_function<ExecvFunction>("execvp");
  if (real == nullptr) return errno = ENOSYS, -1;
  return exec_with_end([&] { return real(file, argv); });
}

TS_PROCESS_END_EXPORT int execvpe(const char* file, char* const argv[], char* const envp[]) noexcept {
  const ExecvpeFunction real = next_function<ExecvpeFunction>("execvpe");
  if (real == nullptr) return errno = ENOSYS, -1;
  return exec_with_end([&] { return real(file, argv, envp); });
}

TS_PROCESS_END_EXPORT int fexecve(int fd, char* const argv[], char* const envp[]) noexcept {
  const FexecveFunction real = next_function<FexecveFunction>("fexecve");
  if (real == nullptr) return errno = ENOSYS, -1;
  return exec_with_end([&] { return real(fd, argv, envp); });
}

// The list forms collect their arguments (glibc's own execl calls execve inside libc, where no hook sees it).
#define TS_COLLECT_ARGUMENTS(first, list, argv, count) \
  char* argv[kMaxListArguments + 1];                   \
  int count = 0;                                       \
  argv[count++] = const_cast<char*>(first);            \
  while (argv[count - 1] != nullptr) {                 \
    if (count > kMaxListArguments) {                   \
      va_end(list);                                    \
      errno = E2BIG;                                   \
      return -1;                                       \
    }                                                  \
    argv[count++] = va_arg(list, char*);               \
  }

TS_PROCESS_END_EXPORT int execl(const char* path, const char* arg, ...) noexcept {
  va_list list;
  va_start(list, arg);
  TS_COLLECT_ARGUMENTS(arg, list, argv, count);
  va_end(list);
  return execv(path, argv);
}

TS_PROCESS_END_EXPORT int execlp(const char* file, const char* arg, ...) noexcept {
  va_list list;
  va_start(list, arg);
  TS_COLLECT_ARGUMENTS(arg, list, argv, count);
  va_end(list);
  return execvp(file, argv);
}

TS_PROCESS_END_EXPORT int execle(const char* path, const char* arg, ...) noexcept {
  va_list list;
  va_start(list, arg);
  TS_COLLECT_ARGUMENTS(arg, list, argv, count);
  char* const* envp = va_arg(list, char* const*);
  va_end(list);
  return execve(path, argv, envp);
}
