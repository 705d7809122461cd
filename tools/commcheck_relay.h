// After commcheck's rendezvous, the connections between rank 0 and every other rank stay open and carry what broke:
// a rank that fails tells rank 0, rank 0 tells everyone, so ranks waiting in NCCL for it end at once instead of at
// the timeout; a connection that closes without "DONE" is a rank whose process ended (crashed, killed).
//
// Lines: "FAIL <what broke, naming the rank>" and "DONE". Rank 0 forwards a FAIL to every other rank.
#pragma once

#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace trainscope::tools::commcheck {

struct Link {
  int rank = -1;      // the rank at the other end (0 for every rank but rank 0)
  int fd = -1;        // connected socket, owned by the relay from here
  std::string label;  // "rank 2 (node3-2)", for what is said when the connection ends early
  std::string early;  // bytes read past the rendezvous's answer, the start of the relay's first line
};

class FailureRelay {
 public:
  FailureRelay(int rank, std::string label, std::vector<Link> links);
  ~FailureRelay();
  FailureRelay(const FailureRelay&) = delete;
  FailureRelay& operator=(const FailureRelay&) = delete;

  // Starts watching the links; `on_failure` is called at most once, on the relay's thread, with what another rank
  // said broke (the caller prints it and ends the process).
  void start(std::function<void(const std::string&)> on_failure);
  // This rank broke: tell the others (`what` is prefixed with this rank's label). Stops the watching: from the call
  // on, `on_failure` is never called (a rank told of this failure ends, and its closed connection is no news).
  void report_failure(const std::string& what);
  // This rank passed: "DONE" to the other end(s). Stops the watching, from the call on, as report_failure does.
  void finish();

 private:
  void run();
  void send_line(int fd, const std::string& line);
  void stop();

  const int rank_;
  const std::string label_;
  std::vector<Link> links_;
  std::vector<std::string> buffers_;
  std::vector<bool> done_;
  std::function<void(const std::string&)> on_failure_;
  std::mutex send_mutex_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> said_{false};  // this rank has said how it ended: what the others do next is not reported
  int wake_[2] = {-1, -1};         // a pipe that ends the thread's poll
  std::thread thread_;
};

}  // namespace trainscope::tools::commcheck
