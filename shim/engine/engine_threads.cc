// trainscope's threads: names and CPU time (see engine_threads.h).
#include "shim/engine/engine_threads.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace trainscope::engine {
namespace {

// The CPU-time clock of any thread of this process by its kernel id: what pthread_getcpuclockid returns for a
// pthread, encoded as the kernel defines it (CPUCLOCK_SCHED | CPUCLOCK_PERTHREAD_MASK), for the threads ZeroMQ
// starts, of which we hold no handle.
clockid_t thread_cpu_clock(pid_t tid) { return static_cast<clockid_t>((~static_cast<unsigned>(tid) << 3) | 6u); }

bool is_ours(const char* name) { return std::strncmp(name, "ts-", 3) == 0 || std::strncmp(name, "ZMQbg/", 6) == 0; }

// The thread's voluntary context switches, from /proc/self/task/TID/status (0 where it cannot be read).
uint64_t voluntary_switches(const char* tid) {
  char path[300];
  std::snprintf(path, sizeof(path), "/proc/self/task/%s/status", tid);
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char text[4096];
  const ssize_t got = read(fd, text, sizeof(text) - 1);
  close(fd);
  if (got <= 0) return 0;
  text[got] = '\0';
  static constexpr char kKey[] = "\nvoluntary_ctxt_switches:";
  const char* at = std::strstr(text, kKey);
  return at == nullptr ? 0 : std::strtoull(at + sizeof(kKey) - 1, nullptr, 10);
}

}  // namespace

void name_this_thread(const char* name) {
  char shown[16];
  std::snprintf(shown, sizeof(shown), "%s", name);
  pthread_setname_np(pthread_self(), shown);
}

BackgroundCpu background_cpu() {
  BackgroundCpu cpu;
  DIR* tasks = opendir("/proc/self/task");
  if (tasks == nullptr) return cpu;
  while (const dirent* entry = readdir(tasks)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    char path[300];
    std::snprintf(path, sizeof(path), "/proc/self/task/%s/comm", entry->d_name);
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    char name[32] = {};
    const ssize_t got = read(fd, name, sizeof(name) - 1);
    close(fd);
    if (got <= 0 || !is_ours(name)) continue;
    timespec used{};
    if (clock_gettime(thread_cpu_clock(static_cast<pid_t>(std::atoi(entry->d_name))), &used) != 0) continue;
    const uint64_t ns = static_cast<uint64_t>(used.tv_sec) * 1000000000ull + static_cast<uint64_t>(used.tv_nsec);
    const uint64_t wakeups = voluntary_switches(entry->d_name);
    cpu.ns += ns;
    cpu.wakeups += wakeups;
    ++cpu.threads;
    std::string kind(name, static_cast<size_t>(got));
    while (!kind.empty() && kind.back() == '\n') kind.pop_back();
    if (kind.rfind("ZMQbg/", 0) == 0) kind = "ZMQbg";
    auto it = std::find_if(cpu.by_name.begin(), cpu.by_name.end(), [&](const auto& k) { return k.name == kind; });
    if (it == cpu.by_name.end()) {
      cpu.by_name.push_back({std::move(kind), ns, wakeups});
    } else {
      it->ns += ns;
      it->wakeups += wakeups;
    }
  }
  closedir(tasks);
  return cpu;
}

std::string describe_background_cpu(const BackgroundCpu& cpu, uint64_t calls) {
  const double per_call = calls > 0 ? 1e3 * static_cast<double>(calls) : 1.0;  // ns -> us per call
  char text[192];
  std::snprintf(text, sizeof(text),
                "trainscope's threads used %.1f ms of CPU (%d threads), %.2f us per recorded call (%llu calls)",
                static_cast<double>(cpu.ns) / 1e6, cpu.threads, static_cast<double>(cpu.ns) / per_call,
                static_cast<unsigned long long>(calls));
  std::string line = text;
  for (size_t i = 0; i < cpu.by_name.size(); ++i) {
    std::snprintf(text, sizeof(text), "%s%s %.2f", i == 0 ? ": " : ", ", cpu.by_name[i].name.c_str(),
                  static_cast<double>(cpu.by_name[i].ns) / per_call);
    line += text;
  }
  if (!cpu.by_name.empty()) line += " us";
  std::snprintf(text, sizeof(text), "; %llu wakeups", static_cast<unsigned long long>(cpu.wakeups));
  line += text;
  for (size_t i = 0; i < cpu.by_name.size(); ++i) {
    std::snprintf(text, sizeof(text), "%s%s %llu", i == 0 ? ": " : ", ", cpu.by_name[i].name.c_str(),
                  static_cast<unsigned long long>(cpu.by_name[i].wakeups));
    line += text;
  }
  return line;
}

}  // namespace trainscope::engine
