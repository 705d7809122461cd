// The job key (see job_key.h).
#include "shim/job_key.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "shim/comm_registry.h"
#include "shim/runtime.h"

namespace trainscope::shim {

namespace {

pthread_mutex_t g_key_lock = PTHREAD_MUTEX_INITIALIZER;
unsigned char g_key[128 * 4];
size_t g_key_len = 0;
unsigned char g_made_id[128];  // the first unique id this process made, under g_key_lock
size_t g_made_id_len = 0;

const char* base_name(const char* path) {
  const char* slash = strrchr(path, '/');
  return slash != nullptr ? slash + 1 : path;
}

// Moves `path` (a file of this process) into `dir`, updating `path`. Returns 0 or the errno.
int move_into(char* path, size_t path_len, const char* dir) {
  if (path[0] == '\0') return 0;
  char moved[kMaxPath];
  if (snprintf(moved, sizeof(moved), "%s/%s", dir, base_name(path)) >= static_cast<int>(sizeof(moved)) ||
      strlen(moved) >= path_len)
    return ENAMETOOLONG;
  // Never over a file someone else put there: the name holds our pid, so anything there is not ours to replace.
  struct stat existing;
  if (lstat(moved, &existing) == 0) return EEXIST;
  if (rename(path, moved) != 0) return errno;
  memcpy(path, moved, strlen(moved) + 1);
  return 0;
}

// Moves this process's recorder and log into the run's own sub-directory. Returns 0 or the errno that stopped it.
int move_into_run_subdirectory(Runtime& rt, const void* key, size_t len) {
  // "run-" and the world communicator's id: every rank of the run computes the same name without talking, two runs
  // differ (NCCL's random number is in the key), and it matches the communicator named in the reports.
  char name[32];
  snprintf(name, sizeof(name), "run-%016llx", static_cast<unsigned long long>(comm_id_from_unique_ids(key, len)));
  char dir[kMaxPath];
  if (snprintf(dir, sizeof(dir), "%s/%s", rt.run_dir, name) >= static_cast<int>(sizeof(dir))) return ENAMETOOLONG;
  if (mkdir(dir, 0700) != 0 && errno != EEXIST) return errno;
  struct stat made;
  if (lstat(dir, &made) != 0) return errno;
  if (!S_ISDIR(made.st_mode)) return ENOTDIR;
  if (const int error = move_into(rt.recorder_path, sizeof(rt.recorder_path), dir); error != 0) return error;
  if (const int error = move_into(rt.log_path, sizeof(rt.log_path), dir); error != 0) return error;
  memcpy(rt.run_dir, dir, strlen(dir) + 1);
  return 0;
}

}  // namespace

void note_job_key(const void* unique_id, size_t len, int nranks) {
  Runtime& rt = g_runtime;
  if (__builtin_expect(rt.job_key_state.load(std::memory_order_acquire) != 0, 1)) return;
  if (unique_id == nullptr || len == 0) return;
  // Only the world communicator: a job may create a smaller one first on some ranks and not others.
  if (rt.launcher_world > 0 && nranks != rt.launcher_world) return;
  pthread_mutex_lock(&g_key_lock);
  if (rt.job_key_state.load(std::memory_order_relaxed) == 0) {
    g_key_len = len < sizeof(g_key) ? len : sizeof(g_key);
    memcpy(g_key, unique_id, g_key_len);
    int moved = 0;
    if (run_id_is_reused(rt.run_id_source) && rt.recorder_path[0] != '\0') {
      const int error = move_into_run_subdirectory(rt, g_key, g_key_len);
      if (error == 0) {
        moved = 1;
      } else {
        log_message(LogLevel::kWarn,
                    "cannot give this run its own folder below %s (%s): its files stay there, beside other runs of "
                    "the same command; set TRAINSCOPE_RUN_ID to a name of the run's own",
                    rt.run_dir, strerror(error));
      }
    }
    rt.job_key_state.store(1, std::memory_order_release);
    if (rt.engine.job_key != nullptr) {
      JobKeyArgs args{};
      args.key = g_key;
      args.key_len = static_cast<uint32_t>(g_key_len);
      args.moved = moved;
      args.run_dir = rt.run_dir;
      args.recorder_path = rt.recorder_path;
      args.log_path = rt.log_path;
      rt.engine.job_key(&args);
    }
  }
  pthread_mutex_unlock(&g_key_lock);
}

void note_unique_id_made(const void* unique_id, size_t len) {
  if (unique_id == nullptr || len == 0 || g_runtime.job_key_state.load(std::memory_order_acquire) != 0) return;
  pthread_mutex_lock(&g_key_lock);
  if (g_made_id_len == 0) {
    g_made_id_len = len < sizeof(g_made_id) ? len : sizeof(g_made_id);
    memcpy(g_made_id, unique_id, g_made_id_len);
  }
  pthread_mutex_unlock(&g_key_lock);
}

void settle_run_directory_at_exit() {
  Runtime& rt = g_runtime;
  pthread_mutex_lock(&g_key_lock);
  if (rt.job_key_state.load(std::memory_order_relaxed) == 0 && g_made_id_len != 0 && rt.launcher_world > 1 &&
      run_id_is_reused(rt.run_id_source) && rt.recorder_path[0] != '\0') {
    const int error = move_into_run_subdirectory(rt, g_made_id, g_made_id_len);
    if (error != 0)
      log_message(LogLevel::kWarn, "cannot move this process's files into its run's own folder below %s (%s)",
                  rt.run_dir, strerror(error));
  }
  pthread_mutex_unlock(&g_key_lock);
}

void reset_job_key() {
  pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
  memcpy(&g_key_lock, &fresh, sizeof(fresh));
  g_key_len = 0;
  g_made_id_len = 0;
  g_runtime.job_key_state.store(0, std::memory_order_relaxed);
}

}  // namespace trainscope::shim
