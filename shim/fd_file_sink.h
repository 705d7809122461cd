// An spdlog sink over a file descriptor the engine opened itself (files::open_append: O_APPEND, never through a link,
// never a file of another user), where spdlog's own file sink would fopen() the path and follow whatever is there.
#pragma once

#include <unistd.h>

#include <mutex>

#include <spdlog/details/log_msg.h>
#include <spdlog/sinks/base_sink.h>

#include "base/private_files.h"

namespace trainscope::engine {

class FdFileSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit FdFileSink(int fd) : fd_(fd) {}
  ~FdFileSink() override { ::close(fd_); }
  FdFileSink(const FdFileSink&) = delete;
  FdFileSink& operator=(const FdFileSink&) = delete;

 protected:
  // One write() per line (O_APPEND: lines of the processes sharing nothing never interleave within a line).
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t formatted;
    formatter_->format(msg, formatted);
    files::write_all(fd_, formatted.data(), formatted.size());
  }
  void flush_() override {}  // nothing is buffered: every line is written when logged

 private:
  int fd_;
};

}  // namespace trainscope::engine
