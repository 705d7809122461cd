// Text helpers shared by the tests: a file written whole, a substring test.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <string>

#include <gtest/gtest.h>

namespace trainscope::testing {

// Writes `text` as the whole of the file at `path` (mode 0600), failing the test where it cannot.
inline void write_text(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size())) << path;
  ::close(fd);
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace trainscope::testing
