// ts-launch: a minimal torchrun-like launcher for the multi-process tests and the demo.
//
//   ts-launch -n N [--nnodes M --node-rank K] [--timeout SECONDS] -- PROGRAM [ARGS...]
// Starts N ranks with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT set, relays
// rank 0's ncclUniqueId to the others through pipes, and waits for all of them. Every wait is bounded: past the
// deadline all ranks are killed and ts-launch exits 124. Otherwise its status is the first failing rank's
// (128 + signal for a rank killed by a signal), or 0.
// With --nnodes M (like torchrun's), one ts-launch runs per node, each with the same MASTER_ADDR and MASTER_PORT
// (required): node K's ranks are K*N .. K*N+N-1 of M*N. Node 0's launcher listens on MASTER_PORT, the other nodes'
// launchers connect to it (retrying until the deadline) and get rank 0's ncclUniqueId from it.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern char** environ;

namespace {

constexpr size_t kUniqueIdBytes = 128;

long long now_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

int usage(const char* why) {
  std::fprintf(stderr,
               "ts-launch: %s\nusage: ts-launch -n RANKS [--nnodes NODES --node-rank NODE] [--timeout SECONDS] -- "
               "PROGRAM [ARGS...]\n"
               "  RANKS: 1..64 per node; NODES: 1..64 (MASTER_ADDR and MASTER_PORT then required); SECONDS: 1..86400 "
               "(default 120)\n",
               why);
  return 2;
}

bool parse_int(const char* text, long lo, long hi, long* out) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

std::vector<pid_t> g_children;
std::vector<int> g_exit_codes;  // -1 while the rank runs

void kill_all(int sig) {
  for (size_t r = 0; r < g_children.size(); ++r)
    if (g_children[r] > 0 && (r >= g_exit_codes.size() || g_exit_codes[r] < 0)) kill(g_children[r], sig);
}

void forward_signal(int sig) { kill_all(sig); }

// Node 0's side of the id relay: a listening socket on MASTER_PORT (any address), made before any rank starts.
int listen_for_nodes(const char* port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(std::atoi(port)));
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 || listen(fd, 64) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Another node's side: connects to MASTER_ADDR:MASTER_PORT until it answers or the deadline passes, then reads the
// id. False when it never came.
bool receive_id_from_node0(const char* host, const char* port, char* id, size_t bytes, long long deadline);

int status_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

bool receive_id_from_node0(const char* host, const char* port, char* id, size_t bytes, long long deadline) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  while (now_ms() < deadline) {
    addrinfo* found = nullptr;
    if (getaddrinfo(host, port, &hints, &found) == 0 && found != nullptr) {
      const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      const bool connected = fd >= 0 && connect(fd, found->ai_addr, found->ai_addrlen) == 0;
      freeaddrinfo(found);
      if (connected) {
        size_t got = 0;
        while (got < bytes && now_ms() < deadline) {
          pollfd pfd{fd, POLLIN, 0};
          if (poll(&pfd, 1, 100) <= 0) continue;
          const ssize_t n = read(fd, id + got, bytes - got);
          if (n <= 0) break;
          got += static_cast<size_t>(n);
        }
        close(fd);
        return got == bytes;
      }
      if (fd >= 0) close(fd);
    }
    poll(nullptr, 0, 100);  // node 0 not listening yet: try again, bounded by the deadline
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  long ranks = 0;
  long timeout_s = 120;
  long nnodes = 1;
  long node_rank = 0;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if ((arg == "-n" || arg == "--nproc") && i + 1 < argc) {
      if (!parse_int(argv[++i], 1, 64, &ranks)) return usage("bad rank count");
    } else if (arg == "--nnodes" && i + 1 < argc) {
      if (!parse_int(argv[++i], 1, 64, &nnodes)) return usage("bad node count");
    } else if (arg == "--node-rank" && i + 1 < argc) {
      if (!parse_int(argv[++i], 0, 63, &node_rank)) return usage("bad node rank");
    } else if (arg == "--timeout" && i + 1 < argc) {
      if (!parse_int(argv[++i], 1, 86400, &timeout_s)) return usage("bad timeout");
    } else {
      return usage(("unknown argument '" + arg + "'").c_str());
    }
  }
  if (ranks == 0) return usage("-n RANKS is required");
  if (i >= argc) return usage("no program given after --");
  if (node_rank >= nnodes) return usage("--node-rank must be below --nnodes");
  const char* master_addr = std::getenv("MASTER_ADDR");
  const char* master_port = std::getenv("MASTER_PORT");
  if (nnodes > 1 && (master_addr == nullptr || master_port == nullptr))
    return usage("--nnodes above 1 needs MASTER_ADDR and MASTER_PORT");
  const long first_rank = node_rank * ranks;
  const long world = nnodes * ranks;
  const long long start_ms = now_ms();
  int node_listener = -1;
  if (nnodes > 1 && node_rank == 0) {
    node_listener = listen_for_nodes(master_port);
    if (node_listener < 0) return usage("cannot listen on MASTER_PORT for the other nodes");
  }

  // Rank 0 -> launcher, and launcher -> every other rank.
  int from_rank0[2];
  if (pipe2(from_rank0, O_CLOEXEC) != 0) return usage("pipe failed");
  std::vector<std::array<int, 2>> to_rank(static_cast<size_t>(ranks));
  for (auto& p : to_rank)
    if (pipe2(p.data(), O_CLOEXEC) != 0) return usage("pipe failed");

  // The coordinator binds MASTER_PORT + 3: keep both below Linux's ephemeral range (32768 and up by default), where
  // another test's outgoing connection could hold the port (seen: "Address already in use" under ctest -j8).
  const std::string port = std::to_string(20000 + (getpid() % 12000));
  signal(SIGINT, forward_signal);
  signal(SIGTERM, forward_signal);
  signal(SIGPIPE, SIG_IGN);
  g_children.assign(static_cast<size_t>(ranks), -1);
  for (long r = 0; r < ranks; ++r) {
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry = *e;
      for (const char* own : {"RANK=", "WORLD_SIZE=", "LOCAL_RANK=", "LOCAL_WORLD_SIZE=", "TS_UID_"})
        if (entry.rfind(own, 0) == 0) goto skip;
      env_strings.push_back(entry);
    skip:;
    }
    env_strings.push_back("RANK=" + std::to_string(first_rank + r));
    env_strings.push_back("WORLD_SIZE=" + std::to_string(world));
    env_strings.push_back("LOCAL_RANK=" + std::to_string(r));
    env_strings.push_back("LOCAL_WORLD_SIZE=" + std::to_string(ranks));
    if (std::getenv("MASTER_ADDR") == nullptr) env_strings.push_back("MASTER_ADDR=127.0.0.1");
    if (std::getenv("MASTER_PORT") == nullptr) env_strings.push_back("MASTER_PORT=" + port);

    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    // The rank's end of its pipe is dup2()ed to a fixed descriptor, which clears close-on-exec.
    const int fixed_fd = 100;
    if (first_rank + r == 0) {
      posix_spawn_file_actions_adddup2(&actions, from_rank0[1], fixed_fd);
      env_strings.push_back("TS_UID_WRITE_FD=" + std::to_string(fixed_fd));
    } else {
      posix_spawn_file_actions_adddup2(&actions, to_rank[static_cast<size_t>(r)][0], fixed_fd);
      env_strings.push_back("TS_UID_READ_FD=" + std::to_string(fixed_fd));
    }
    std::vector<char*> envp;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    pid_t pid = -1;
    const int rc = posix_spawnp(&pid, argv[i], &actions, nullptr, argv + i, envp.data());
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
      std::fprintf(stderr, "ts-launch: cannot start '%s': %s\n", argv[i], std::strerror(rc));
      kill_all(SIGKILL);
      return 127;
    }
    g_children[static_cast<size_t>(r)] = pid;
  }
  close(from_rank0[1]);
  for (auto& p : to_rank) close(p[0]);

  const long long deadline = start_ms + timeout_s * 1000;
  g_exit_codes.assign(static_cast<size_t>(ranks), -1);
  std::vector<int>& exit_codes = g_exit_codes;
  int first_failure = 0;
  // Reaps whatever has exited; returns how many ranks are still running.
  auto reap = [&]() {
    int running = 0;
    for (size_t r = 0; r < g_children.size(); ++r) {
      if (exit_codes[r] >= 0) continue;
      int status = 0;
      if (waitpid(g_children[r], &status, WNOHANG) == g_children[r]) {
        exit_codes[r] = status_code(status);
        if (exit_codes[r] != 0 && first_failure == 0) first_failure = exit_codes[r];
      } else {
        ++running;
      }
    }
    return running;
  };

  // Relay the unique id. Stop early if rank 0 closes its pipe without one, or a rank fails before it came.
  char id[kUniqueIdBytes];
  size_t got = 0;
  if (node_rank > 0) {
    close(from_rank0[0]);
    from_rank0[0] = -1;
    if (receive_id_from_node0(master_addr, master_port, id, sizeof(id), deadline)) got = sizeof(id);
  }
  while (node_rank == 0 && got < sizeof(id) && now_ms() < deadline) {
    pollfd pfd{from_rank0[0], POLLIN, 0};
    const int ready = poll(&pfd, 1, 100);
    if (ready > 0) {
      const ssize_t n = read(from_rank0[0], id + got, sizeof(id) - got);
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    } else {
      reap();
      if (first_failure != 0) break;
    }
  }
  if (got == sizeof(id)) {
    for (long r = node_rank == 0 ? 1 : 0; r < ranks; ++r) {
      const ssize_t n = write(to_rank[static_cast<size_t>(r)][1], id, sizeof(id));
      (void)n;  // a rank that already exited does not need it
    }
  }
  for (auto& p : to_rank) close(p[1]);
  if (from_rank0[0] >= 0) close(from_rank0[0]);
  // Node 0 hands the id to every other node's launcher as it connects, until all came or the deadline.
  for (long served = 1; node_listener >= 0 && got == sizeof(id) && served < nnodes && now_ms() < deadline;) {
    pollfd pfd{node_listener, POLLIN, 0};
    if (poll(&pfd, 1, 100) <= 0) continue;
    const int peer = accept4(node_listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (peer < 0) continue;
    const ssize_t n = write(peer, id, sizeof(id));
    (void)n;  // a node that left does not need it
    close(peer);
    ++served;
  }
  if (node_listener >= 0) close(node_listener);

  // Wait for every rank: on their pidfds, which become readable when a rank exits (no signal plumbing, and no
  // polling period added to a job's wall time, which the whole-job benchmark measures); 10 ms polls where the
  // kernel has no pidfd_open.
  std::vector<pollfd> exits;
  for (size_t r = 0; r < g_children.size(); ++r) {
    const long fd = syscall(SYS_pidfd_open, g_children[r], 0);
    if (fd < 0) {
      for (const pollfd& e : exits) close(e.fd);
      exits.clear();
      break;
    }
    exits.push_back({static_cast<int>(fd), POLLIN, 0});
  }
  while (reap() > 0) {
    if (now_ms() >= deadline) {
      std::fprintf(stderr, "ts-launch: ranks still running after %ld s: killing them\n", timeout_s);
      kill_all(SIGKILL);
      for (size_t r = 0; r < g_children.size(); ++r)
        if (exit_codes[r] < 0) waitpid(g_children[r], nullptr, 0);
      return 124;
    }
    const long long left = deadline - now_ms();
    if (exits.empty()) {
      poll(nullptr, 0, static_cast<int>(std::min(left, 10LL)));
    } else {
      poll(exits.data(), exits.size(), static_cast<int>(std::min(left, 1000LL)));
      for (pollfd& e : exits) {
        if (e.fd >= 0 && e.revents != 0) {  // exited: reaped at the loop's test, no longer waited on
          close(e.fd);
          e.fd = -1;
        }
      }
    }
  }
  for (const pollfd& e : exits) {
    if (e.fd >= 0) close(e.fd);
  }
  const int result = first_failure;
  return result;
}
