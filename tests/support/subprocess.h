// Runs a child process for the multi-process tests: custom environment, captured output, bounded wait.
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace trainscope::testing {

struct ProcessResult {
  int exit_code = -1;  // exit status, 128 + signal if killed by one
  bool timed_out = false;
  std::string out;
  std::string err;
};

struct ProcessOptions {
  // Variables to set (value) or remove (std::nullopt) on top of this process's environment.
  std::map<std::string, std::optional<std::string>> env;
  int timeout_seconds = 120;
  std::string cwd;  // empty: inherit
};

// Runs argv[0] (searched in PATH) to completion or until the timeout, then kills its process group.
ProcessResult run_process(const std::vector<std::string>& argv, const ProcessOptions& options = {});

// Starts argv[0] in its own process group and returns its pid; finish it with wait_process.
pid_t start_process(const std::vector<std::string>& argv, const ProcessOptions& options = {});
// Waits (bounded) for a process started with start_process, killing its whole group past the timeout.
// Its output is not captured (it goes to the test's own stdout/stderr).
ProcessResult wait_process(pid_t pid, int timeout_seconds);

// A fresh private temporary directory, removed with everything in it when the object goes away.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::string read_file(const std::string& path);

// A TCP port of 127.0.0.1 that nobody listens on now (the kernel's choice), -1 if none could be had.
int free_loopback_port();
std::vector<std::string> split_lines(const std::string& text);

}  // namespace trainscope::testing
