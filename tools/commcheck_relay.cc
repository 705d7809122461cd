// The failure relay between commcheck's ranks (see commcheck_relay.h).
#include "tools/commcheck_relay.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "tools/commcheck_rendezvous.h"

namespace trainscope::tools::commcheck {

FailureRelay::FailureRelay(int rank, std::string label, std::vector<Link> links)
    : rank_(rank), label_(std::move(label)), links_(std::move(links)) {
  for (const Link& link : links_) buffers_.push_back(link.early);
  done_.assign(links_.size(), false);
  if (pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) wake_[0] = wake_[1] = -1;
}

FailureRelay::~FailureRelay() {
  stop();
  for (int fd : wake_)
    if (fd >= 0) close(fd);
}

void FailureRelay::start(std::function<void(const std::string&)> on_failure) {
  on_failure_ = std::move(on_failure);
  if (!links_.empty() && wake_[0] >= 0) thread_ = std::thread([this] { run(); });
}

void FailureRelay::send_line(int fd, const std::string& line) {
  std::lock_guard<std::mutex> lock(send_mutex_);
  send_all(fd, line);
}

void FailureRelay::report_failure(const std::string& what) {
  // Before the line goes: rank 0, told, ends at once, and this rank's thread must not take that close (or rank 0's
  // forwarded copy of this very failure) for the news of another rank's failure and print it instead of ours.
  said_.store(true);
  const std::string line = "FAIL\t" + protocol_field(label_ + ": " + what) + "\n";
  for (const Link& link : links_) send_line(link.fd, line);
  stop();
}

void FailureRelay::finish() {
  said_.store(true);
  for (const Link& link : links_) send_line(link.fd, "DONE\n");
  stop();
}

void FailureRelay::stop() {
  if (stopping_.exchange(true)) return;
  if (wake_[1] >= 0) {
    const char byte = 1;
    const ssize_t n = write(wake_[1], &byte, 1);
    (void)n;  // a full pipe already wakes the thread
  }
  if (thread_.joinable()) thread_.join();
  for (Link& link : links_) {
    if (link.fd >= 0) close(link.fd);
    link.fd = -1;
  }
}

void FailureRelay::run() {
  // What another rank said broke; rank 0 passes it on to every other rank before saying it here.
  auto fail = [this](size_t from, const std::string& text) {
    if (stopping_.load() || said_.load()) return;
    if (rank_ == 0) {
      const std::string line = "FAIL\t" + protocol_field(text) + "\n";
      for (size_t i = 0; i < links_.size(); ++i)
        if (i != from && !done_[i]) send_line(links_[i].fd, line);
    }
    on_failure_(text);
  };
  for (;;) {
    // A complete line may already be waiting (read together with the rendezvous's answer).
    for (size_t i = 0; i < links_.size(); ++i) {
      for (size_t newline = buffers_[i].find('\n'); newline != std::string::npos; newline = buffers_[i].find('\n')) {
        const std::string line = buffers_[i].substr(0, newline);
        buffers_[i].erase(0, newline + 1);
        if (line == "DONE") done_[i] = true;
        if (line.rfind("FAIL\t", 0) == 0) return fail(i, line.substr(5));
      }
    }
    std::vector<pollfd> fds;
    fds.push_back({wake_[0], POLLIN, 0});
    for (size_t i = 0; i < links_.size(); ++i) fds.push_back({done_[i] ? -1 : links_[i].fd, POLLIN, 0});
    if (poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) return;
    if (fds[0].revents != 0 || stopping_.load()) return;
    for (size_t i = 0; i < links_.size(); ++i) {
      if (fds[i + 1].revents == 0) continue;
      char chunk[1024];
      const ssize_t n = recv(links_[i].fd, chunk, sizeof(chunk), 0);
      if (n > 0) {
        if (buffers_[i].size() < 4096) buffers_[i].append(chunk, static_cast<size_t>(n));
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        if (!done_[i])
          return fail(i, links_[i].label + " ended before the check finished (its process crashed or was killed)");
      }
    }
  }
}

}  // namespace trainscope::tools::commcheck
