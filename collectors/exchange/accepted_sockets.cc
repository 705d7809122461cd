// Descriptor counts and the checked shutdown of accepted connections (accepted_sockets.h).
#include "collectors/exchange/accepted_sockets.h"

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace trainscope::exchange {
namespace {

constexpr size_t kKernelDescriptorCeiling = size_t{1} << 20;  // fs.nr_open's default

}  // namespace

size_t descriptor_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return kKernelDescriptorCeiling;
  return std::min<size_t>(static_cast<size_t>(limit.rlim_cur), kKernelDescriptorCeiling);
}

size_t count_open_descriptors() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return errno == EMFILE || errno == ENFILE ? descriptor_limit() : 0;
  size_t count = 0;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(dir);
  return count > 0 ? count - 1 : 0;  // not the directory's own
}

AcceptedSockets::AcceptedSockets(const std::string& endpoint) {
  if (endpoint.starts_with("tcp://")) {
    const size_t colon = endpoint.rfind(':');
    char* end = nullptr;
    const unsigned long port = std::strtoul(endpoint.c_str() + colon + 1, &end, 10);
    if (colon > 5 && end != nullptr && *end == '\0' && port > 0 && port <= 65535) {
      family_ = AF_INET;
      port_ = static_cast<uint16_t>(port);
    }
  } else if (endpoint.starts_with("ipc://") && endpoint.size() > 6) {
    family_ = AF_UNIX;
    unix_path_ = endpoint.substr(6);
    if (unix_path_[0] == '@') unix_path_[0] = '\0';
  }
  null_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd_ >= 0) slot_ = fcntl(null_fd_, F_DUPFD_CLOEXEC, 0);
}

AcceptedSockets::~AcceptedSockets() {
  if (slot_ >= 0) close(slot_);
  if (null_fd_ >= 0) close(null_fd_);
}

uint64_t AcceptedSockets::inspect(int fd) const {
  if (!closes_connections() || fd < 0 || dup3(fd, slot_, O_CLOEXEC) < 0) return 0;
  struct stat status {};
  if (fstat(slot_, &status) != 0 || !S_ISSOCK(status.st_mode)) return 0;
  sockaddr_storage local{};
  socklen_t length = sizeof(local);
  if (getsockname(slot_, reinterpret_cast<sockaddr*>(&local), &length) != 0) return 0;
  bool ours = false;
  if (family_ == AF_INET && local.ss_family == AF_INET) {
    ours = ntohs(reinterpret_cast<const sockaddr_in*>(&local)->sin_port) == port_;
  } else if (family_ == AF_INET && local.ss_family == AF_INET6) {
    ours = ntohs(reinterpret_cast<const sockaddr_in6*>(&local)->sin6_port) == port_;
  } else if (family_ == AF_UNIX && local.ss_family == AF_UNIX) {
    const auto* address = reinterpret_cast<const sockaddr_un*>(&local);
    const size_t path_length = length > offsetof(sockaddr_un, sun_path) ? length - offsetof(sockaddr_un, sun_path) : 0;
    std::string path(address->sun_path, std::min(path_length, sizeof(address->sun_path)));
    if (!path.empty() && path[0] != '\0') path = path.c_str();  // a file path ends at its NUL
    ours = path == unix_path_;
  }
  // Only a connected socket: the listener itself has the same local address.
  sockaddr_storage peer{};
  socklen_t peer_length = sizeof(peer);
  if (ours && getpeername(slot_, reinterpret_cast<sockaddr*>(&peer), &peer_length) != 0) ours = false;
  return ours ? static_cast<uint64_t>(status.st_ino) : 0;
}

void AcceptedSockets::release() const {
  if (slot_ >= 0) (void)dup3(null_fd_, slot_, O_CLOEXEC);
}

uint64_t AcceptedSockets::identity_of(int fd) const {
  const uint64_t identity = inspect(fd);
  release();
  return identity;
}

bool AcceptedSockets::shut_down(int fd, uint64_t identity) const {
  const bool same = identity != 0 && inspect(fd) == identity;
  if (same) (void)shutdown(slot_, SHUT_RDWR);
  release();
  return same;
}

}  // namespace trainscope::exchange
