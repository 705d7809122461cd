// The commcheck rendezvous over TCP: rank 0 gathers every rank's hello, then answers each with the id or the failure.
#include "tools/commcheck_rendezvous.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>

#include "collectors/exchange/coordinator_core.h"

namespace trainscope::tools::commcheck {
namespace {

constexpr const char* kHello = "TSCOMMCHECK1";
// How rank 0 words two processes that both say RANK=0; the second one, finding the port taken, looks for it.
constexpr const char* kTwoRankZeros = "two processes call themselves rank 0: ";

int ms_until(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1000));
}

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> fields;
  size_t start = 0;
  for (;;) {
    const size_t tab = line.find('\t', start);
    fields.push_back(line.substr(start, tab == std::string::npos ? std::string::npos : tab - start));
    if (tab == std::string::npos) return fields;
    start = tab + 1;
  }
}

bool parse_int(const std::string& text, long lo, long hi, long* out) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

std::string where(const RendezvousRequest& r) {
  const bool v6 = r.address.find(':') != std::string::npos;
  return (v6 ? "[" + r.address + "]" : r.address) + ":" + std::to_string(r.port);
}

std::string hex(const UniqueId& id) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string text;
  for (unsigned char byte : id) {
    text += kDigits[byte >> 4];
    text += kDigits[byte & 15];
  }
  return text;
}

bool unhex(const std::string& text, UniqueId* id) {
  if (text.size() != 2 * kUniqueIdBytes) return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (size_t i = 0; i < kUniqueIdBytes; ++i) {
    const int hi = nibble(text[2 * i]);
    const int lo = nibble(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    (*id)[i] = static_cast<unsigned char>(hi * 16 + lo);
  }
  return true;
}

// "node3-2 (pid 4121)": a rank's host and local rank, with its pid when known.
std::string identity(const std::string& host_local, long pid) {
  return pid > 0 ? host_local + " (pid " + std::to_string(pid) + ")" : host_local;
}

struct AddrInfo {
  addrinfo* list = nullptr;
  ~AddrInfo() {
    if (list != nullptr) freeaddrinfo(list);
  }
};

// ---- rank 0 -----------------------------------------------------------------------------------------------------

struct Client {
  int fd = -1;
  std::string buffer;
  int rank = -1;      // once its hello was accepted
  std::string label;  // "rank 2 (node3-2)"
};

int listen_socket(const RendezvousRequest& r, std::string* error, int* error_number) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  AddrInfo found;
  const std::string port = std::to_string(r.port);
  if (const int rc = getaddrinfo(r.address.c_str(), port.c_str(), &hints, &found.list); rc != 0) {
    *error = "cannot resolve the rendezvous address " + where(r) + ": " + gai_strerror(rc);
    return -1;
  }
  int last_errno = 0;
  for (addrinfo* a = found.list; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 1024) == 0) return fd;
    last_errno = errno;
    close(fd);
  }
  *error_number = last_errno;
  *error = "cannot listen on the rendezvous address " + where(r) + ": " + std::strerror(last_errno) +
           (last_errno == EADDRINUSE ? " (another program holds the port: give --rendezvous HOST:PORT)" : "");
  return -1;
}

RendezvousResult join(const RendezvousRequest& r);

// Rank 0 finds the port taken: when the holder is another commcheck rank 0 (the launcher said RANK=0 twice), it says
// so to this one's hello, and that is what broke; anything else keeps the listener's error.
void ask_who_holds_the_port(const RendezvousRequest& r, RendezvousResult* result) {
  RendezvousRequest probe = r;
  probe.join_deadline = std::min(r.join_deadline, Clock::now() + std::chrono::seconds(3));
  probe.answer_deadline = probe.join_deadline;
  RendezvousResult heard = join(probe);
  for (const Link& link : heard.links) close(link.fd);
  if (!heard.ok && heard.error.starts_with(kTwoRankZeros)) result->error = heard.error;
}

RendezvousResult serve(const RendezvousRequest& r) {
  RendezvousResult result;
  int listen_errno = 0;
  const int listener = listen_socket(r, &result.error, &listen_errno);
  if (listener < 0) {
    if (listen_errno == EADDRINUSE) ask_who_holds_the_port(r, &result);
    return result;
  }
  std::vector<Client> clients;
  std::map<int, std::string> joined;  // rank -> host
  std::vector<std::string> problems;  // ranks that cannot take part, or disagree about the job
  if (!r.own_error.empty()) problems.push_back("rank 0 (" + r.host + ") cannot take part: " + r.own_error);
  bool two_rank_zeros = false;  // the job is not what its ranks say: nothing to wait for

  auto accept_hello = [&](Client& c, const std::string& line) -> std::string {
    const std::vector<std::string> f = split_tabs(line);
    long rank = 0;
    long world = 0;
    long local_rank = 0;
    long pid = 0;  // a hello without it (the 6 fields of an older commcheck): unknown
    if ((f.size() != 6 && f.size() != 7) || f[0] != kHello || !parse_int(f[2], 1, 1 << 24, &world) ||
        !parse_int(f[1], 0, world - 1, &rank) || !parse_int(f[3], 0, 1 << 24, &local_rank) ||
        (f.size() == 7 && !parse_int(f[6], 1, 1L << 31, &pid))) {
      return "not a commcheck hello (another program connected to the rendezvous port?)";
    }
    const std::string label = "rank " + f[1] + " (" + f[4] + "-" + f[3] + ")";
    std::string refusal;
    if (rank == 0) {
      // Whatever else it says: the launcher gave RANK=0 to two processes, and this one got the port first.
      refusal = kTwoRankZeros + identity(r.host + "-" + std::to_string(r.local_rank), r.pid) +
                ", which holds the rendezvous at " + where(r) + ", and " + identity(f[4] + "-" + f[3], pid) +
                ": check the launcher's RANK for every process";
      two_rank_zeros = true;
    } else if (world != r.world) {
      refusal = label + " says the world has " + f[2] + " ranks, rank 0 says " + std::to_string(r.world) +
                ": the ranks were not started by one launcher with one WORLD_SIZE";
    } else if (const auto it = joined.find(static_cast<int>(rank)); it != joined.end()) {
      refusal = label + " joined twice (first from " + it->second + "): check the launcher's RANK for every process";
    }
    if (!refusal.empty()) {
      problems.push_back(refusal);
      return refusal;
    }
    c.rank = static_cast<int>(rank);
    c.label = label;
    joined[c.rank] = f[4] + "-" + f[3];
    if (!f[5].empty()) problems.push_back(label + " cannot take part: " + f[5]);
    return "";
  };

  while (!two_rank_zeros && static_cast<int>(joined.size()) < r.world - 1 && ms_until(r.join_deadline) > 0) {
    std::vector<pollfd> fds;
    fds.push_back({listener, POLLIN, 0});
    for (const Client& c : clients) fds.push_back({c.fd, static_cast<short>(c.rank < 0 ? POLLIN : 0), 0});
    if (poll(fds.data(), fds.size(), ms_until(r.join_deadline)) < 0 && errno != EINTR) break;
    if (fds[0].revents & POLLIN) {
      for (;;) {
        const int fd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) break;
        clients.push_back({fd, {}, -1, {}});
      }
    }
    for (size_t i = 1; i < fds.size(); ++i) {
      Client& c = clients[i - 1];
      if (c.fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char chunk[1024];
      const ssize_t n = recv(c.fd, chunk, sizeof(chunk), 0);
      if (n > 0) c.buffer.append(chunk, static_cast<size_t>(n));
      const size_t newline = c.buffer.find('\n');
      std::string refusal;
      if (newline != std::string::npos) {
        refusal = accept_hello(c, c.buffer.substr(0, newline));
      } else if (n == 0 || (n < 0 && errno != EAGAIN) || c.buffer.size() > kMaxLine) {
        refusal = "no hello";
      }
      if (!refusal.empty() || (newline != std::string::npos && c.rank < 0)) {
        if (!refusal.empty() && refusal != "no hello") send_all(c.fd, "FAIL\t" + protocol_field(refusal) + "\t-\n");
        close(c.fd);
        c.fd = -1;
      }
    }
    std::erase_if(clients, [](const Client& c) { return c.fd < 0; });
  }
  close(listener);

  // With two rank 0s, the ranks that did not come are no news: the job's ranks are not what they say.
  for (int rank = 1; rank < r.world && !two_rank_zeros; ++rank)
    if (joined.count(rank) == 0) result.missing.push_back(rank);
  std::string answer;
  if (!problems.empty()) {
    result.error = problems.front();
    for (size_t i = 1; i < problems.size(); ++i) result.error += "; " + problems[i];
  }
  if (!result.missing.empty()) {
    const std::string missing = exchange::rank_ranges(result.missing);
    const std::string text = std::string(result.missing.size() == 1 ? "rank " : "ranks ") + missing +
                             " never joined the rendezvous at " + where(r) + " in time (" +
                             std::to_string(joined.size() + 1) + " of " + std::to_string(r.world) + " ranks came)";
    result.error = result.error.empty() ? text : text + "; " + result.error;
  }
  if (result.error.empty()) {
    result.ok = true;
    result.unique_id = r.unique_id;
    answer = "ID\t" + hex(r.unique_id) + "\t" + protocol_field(r.host + "-" + std::to_string(r.local_rank)) + "\n";
  } else {
    answer = "FAIL\t" + protocol_field(result.error) + "\t" +
             (result.missing.empty() ? "-" : exchange::rank_ranges(result.missing)) + "\n";
  }
  for (Client& c : clients) {
    if (c.rank > 0 && send_all(c.fd, answer) && result.ok) {
      result.links.push_back({c.rank, c.fd, c.label, c.buffer.substr(c.buffer.find('\n') + 1)});  // for the relay
    } else {
      close(c.fd);
    }
  }
  return result;
}

// ---- the other ranks --------------------------------------------------------------------------------------------

// Connects to rank 0, retrying until the deadline (rank 0 may start later than this rank).
int connect_to_rank0(const RendezvousRequest& r, std::string* error) {
  std::string last = "no answer";
  while (ms_until(r.join_deadline) > 0) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    AddrInfo found;
    const std::string port = std::to_string(r.port);
    if (const int rc = getaddrinfo(r.address.c_str(), port.c_str(), &hints, &found.list); rc != 0) {
      last = std::string("cannot resolve it: ") + gai_strerror(rc);
    } else {
      for (addrinfo* a = found.list; a != nullptr; a = a->ai_next) {
        const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
        if (fd < 0) continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) return fd;
        if (errno == EINPROGRESS) {
          pollfd pfd{fd, POLLOUT, 0};
          int so_error = ETIMEDOUT;
          socklen_t len = sizeof(so_error);
          if (poll(&pfd, 1, std::max(1, ms_until(r.join_deadline))) == 1 &&
              getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len) == 0 && so_error == 0)
            return fd;
          errno = so_error;
        }
        last = std::strerror(errno);
        close(fd);
      }
    }
    pollfd none{-1, 0, 0};
    poll(&none, 0, std::min(100, ms_until(r.join_deadline)));
  }
  *error = "could not reach rank 0's rendezvous at " + where(r) + " in time (" + last +
           "): rank 0 never started, or the ranks disagree on MASTER_ADDR/MASTER_PORT";
  return -1;
}

RendezvousResult join(const RendezvousRequest& r) {
  RendezvousResult result;
  const int fd = connect_to_rank0(r, &result.error);
  if (fd < 0) return result;
  const std::string hello = std::string(kHello) + "\t" + std::to_string(r.rank) + "\t" + std::to_string(r.world) +
                            "\t" + std::to_string(r.local_rank) + "\t" + protocol_field(r.host) + "\t" +
                            protocol_field(r.own_error) + (r.pid > 0 ? "\t" + std::to_string(r.pid) : "") + "\n";
  std::string line;
  if (!send_all(fd, hello)) {
    result.error = "lost the connection to rank 0's rendezvous at " + where(r) + " while saying hello";
  } else {
    while (line.find('\n') == std::string::npos && line.size() <= 2 * kMaxLine) {
      pollfd pfd{fd, POLLIN, 0};
      const int wait = ms_until(r.answer_deadline);
      if (wait == 0) break;
      if (poll(&pfd, 1, wait) <= 0) continue;
      char chunk[1024];
      const ssize_t n = recv(fd, chunk, sizeof(chunk), 0);
      if (n <= 0 && !(n < 0 && (errno == EAGAIN || errno == EINTR))) break;
      if (n > 0) line.append(chunk, static_cast<size_t>(n));
    }
  }
  if (!result.error.empty()) {
    close(fd);
    return result;
  }
  const size_t newline = line.find('\n');
  const std::vector<std::string> f = split_tabs(line.substr(0, newline == std::string::npos ? 0 : newline));
  if (newline != std::string::npos && f.size() == 3 && f[0] == "ID" && unhex(f[1], &result.unique_id)) {
    result.ok = true;
    result.links.push_back({0, fd, "rank 0 (" + f[2] + ")", line.substr(newline + 1)});  // for the failure relay
    return result;
  }
  close(fd);
  if (newline == std::string::npos) {
    result.error = "rank 0 at " + where(r) + " took this rank's hello but gave no answer in time";
    return result;
  }
  if (f.size() == 3 && f[0] == "FAIL") {
    result.error = f[1];
    for (size_t start = 0; f[2] != "-" && start < f[2].size();) {
      const size_t comma = f[2].find(',', start);
      const std::string part = f[2].substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      long lo = 0;
      long hi = 0;
      const size_t dash = part.find('-');
      if (parse_int(part.substr(0, dash), 0, r.world, &lo) &&
          parse_int(dash == std::string::npos ? part : part.substr(dash + 1), lo, r.world, &hi)) {
        for (long k = lo; k <= hi; ++k) result.missing.push_back(static_cast<int32_t>(k));
      }
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    return result;
  }
  result.error = "the program at " + where(r) + " is not trainscope commcheck's rank 0 (unexpected answer)";
  return result;
}

}  // namespace

std::string protocol_field(std::string text) {
  for (char& c : text)
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  if (text.size() > 1024) text.resize(1024);
  return text;
}

bool send_all(int fd, const std::string& text) {
  size_t sent = 0;
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(2);
  while (sent < text.size()) {
    const ssize_t n = send(fd, text.data() + sent, text.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
    pollfd pfd{fd, POLLOUT, 0};
    if (ms_until(deadline) == 0 || poll(&pfd, 1, ms_until(deadline)) < 0) return false;
  }
  return true;
}

RendezvousResult rendezvous(const RendezvousRequest& request) {
  return request.rank == 0 ? serve(request) : join(request);
}

bool parse_endpoint(const std::string& text, std::string* host, int* port, std::string* reason) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    *reason = "expected HOST:PORT or [IPv6]:PORT";
    return false;
  }
  std::string h = text.substr(0, colon);
  if (h.front() == '[') {
    if (h.size() < 3 || h.back() != ']') {
      *reason = "expected [IPv6]:PORT";
      return false;
    }
    h = h.substr(1, h.size() - 2);
  } else if (h.find(':') != std::string::npos) {
    *reason = "an IPv6 address needs brackets: [IPv6]:PORT";
    return false;
  }
  long p = 0;
  if (!parse_int(text.substr(colon + 1), 1, 65535, &p)) {
    *reason = "the port must be a number from 1 to 65535";
    return false;
  }
  *host = h;
  *port = static_cast<int>(p);
  return true;
}

bool parse_timeout_seconds(const std::string& text, int max_seconds, int* seconds) {
  if (text.empty() || text[0] < '0' || text[0] > '9') return false;
  std::string digits = text;
  long unit = 1;
  if (digits.back() == 's') {
    digits.pop_back();
  } else if (digits.back() == 'm') {
    digits.pop_back();
    unit = 60;
  }
  long value = 0;
  if (!parse_int(digits, 1, max_seconds, &value) || value * unit > max_seconds) return false;
  *seconds = static_cast<int>(value * unit);
  return true;
}

}  // namespace trainscope::tools::commcheck
