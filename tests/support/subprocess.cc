// Child processes for the multi-process tests (see subprocess.h).
#include "support/subprocess.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

extern char** environ;

namespace trainscope::testing {

namespace {

long long now_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

std::vector<std::string> build_env(const ProcessOptions& options) {
  std::map<std::string, std::string> merged;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const size_t eq = entry.find('=');
    if (eq != std::string::npos) merged[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  for (const auto& [name, value] : options.env) {
    if (value) {
      merged[name] = *value;
    } else {
      merged.erase(name);
    }
  }
  std::vector<std::string> out;
  for (const auto& [name, value] : merged) out.push_back(name + "=" + value);
  return out;
}

int status_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

pid_t spawn(const std::vector<std::string>& argv, const ProcessOptions& options, int out_fd, int err_fd) {
  std::vector<std::string> env = build_env(options);
  std::vector<char*> envp;
  for (auto& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = argv;
  std::vector<char*> argp;
  for (auto& s : args) argp.push_back(s.data());
  argp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  if (out_fd >= 0) posix_spawn_file_actions_adddup2(&actions, out_fd, STDOUT_FILENO);
  if (err_fd >= 0) posix_spawn_file_actions_adddup2(&actions, err_fd, STDERR_FILENO);
  if (!options.cwd.empty()) posix_spawn_file_actions_addchdir_np(&actions, options.cwd.c_str());
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, argp[0], &actions, &attr, argp.data(), envp.data());
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  return rc == 0 ? pid : -1;
}

}  // namespace

ProcessResult run_process(const std::vector<std::string>& argv, const ProcessOptions& options) {
  ProcessResult result;
  int out_pipe[2];
  int err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) {
    result.err = "pipe failed";
    return result;
  }
  const pid_t pid = spawn(argv, options, out_pipe[1], err_pipe[1]);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (pid < 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    result.err = "cannot start " + argv[0];
    return result;
  }
  const long long deadline = now_ms() + options.timeout_seconds * 1000LL;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  char buffer[65536];
  while (open_fds > 0) {
    const long long left = deadline - now_ms();
    if (left <= 0) {
      result.timed_out = true;
      break;
    }
    if (poll(fds, 2, static_cast<int>(left > 1000 ? 1000 : left)) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      const ssize_t n = read(fds[i].fd, buffer, sizeof(buffer));
      if (n > 0) {
        (i == 0 ? result.out : result.err).append(buffer, static_cast<size_t>(n));
      } else {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (auto& fd : fds)
    if (fd.fd >= 0) close(fd.fd);
  if (result.timed_out) {
    kill(-pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    result.exit_code = status_code(status);
    return result;
  }
  // Output closed: the process is exiting (or handed its pipes away); still bound the wait.
  ProcessResult waited = wait_process(pid, static_cast<int>((deadline - now_ms()) / 1000) + 1);
  result.exit_code = waited.exit_code;
  result.timed_out = waited.timed_out;
  return result;
}

pid_t start_process(const std::vector<std::string>& argv, const ProcessOptions& options) {
  return spawn(argv, options, -1, -1);
}

ProcessResult wait_process(pid_t pid, int timeout_seconds) {
  ProcessResult result;
  const long long deadline = now_ms() + timeout_seconds * 1000LL;
  while (true) {
    int status = 0;
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) {
      result.exit_code = status_code(status);
      return result;
    }
    if (done < 0) return result;
    if (now_ms() >= deadline) {
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      result.exit_code = status_code(status);
      result.timed_out = true;
      return result;
    }
    pollfd none{-1, 0, 0};
    poll(&none, 0, 20);  // bounded polling of the child's state, not a synchronisation point
  }
}

TempDir::TempDir() {
  // Under $TMPDIR when set (parallel repeats of a test each get their own), else /tmp.
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base != nullptr && base[0] == '/' ? base : "/tmp") + "/trainscope-test-XXXXXX";
  const char* made = mkdtemp(pattern.data());
  path_ = made != nullptr ? made : "/tmp";
}

TempDir::~TempDir() {
  // TS_TEST_KEEP_DIRS=1 keeps them: the run directory (every rank's log and recorder) of a test that failed
  // once in a thousand repeats is what tells why.
  const char* keep = std::getenv("TS_TEST_KEEP_DIRS");
  if (keep != nullptr && std::string_view(keep) == "1") return;
  std::error_code ignored;
  if (path_ != "/tmp") std::filesystem::remove_all(path_, ignored);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

int free_loopback_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  int port = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0)
    port = ntohs(address.sin_port);
  close(fd);
  return port;
}

}  // namespace trainscope::testing
