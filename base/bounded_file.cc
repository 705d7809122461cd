#include "base/bounded_file.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

namespace trainscope::files {

const char* file_type_name(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISLNK(mode)) return "a link";
  return "not a plain file";
}

BoundedRead read_bounded(const std::string& path, size_t limit, bool follow_links, std::string* text) {
  BoundedRead result;
  text->clear();
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC | (follow_links ? 0 : O_NOFOLLOW));
  if (fd < 0) {
    result.error = errno;
    if (result.error == ELOOP && !follow_links) {
      result.outcome = ReadOutcome::kNotRegular;
      result.mode = S_IFLNK;
    } else {
      result.outcome = result.error == ENOENT || result.error == ENOTDIR ? ReadOutcome::kMissing : ReadOutcome::kFailed;
    }
    return result;
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    result.error = errno;
    ::close(fd);
    return result;
  }
  if (!S_ISREG(st.st_mode)) {
    result.outcome = ReadOutcome::kNotRegular;
    result.mode = st.st_mode;
    ::close(fd);
    return result;
  }
  char buffer[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      result.error = errno;
      ::close(fd);
      text->clear();
      return result;
    }
    if (n == 0) break;
    const size_t room = limit - text->size();
    text->append(buffer, std::min(room, static_cast<size_t>(n)));
    if (static_cast<size_t>(n) > room) {
      result.truncated = true;
      break;
    }
  }
  ::close(fd);
  result.outcome = ReadOutcome::kRead;
  return result;
}

}  // namespace trainscope::files
