// This process's host identity from /proc: boot id, pid and mount namespace inodes.
#include "collectors/exchange/host_identity.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <string>

namespace trainscope::exchange {
namespace {

// The boot id's 36 characters (a UUID), or empty.
std::string boot_id() {
  const int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  char text[64];
  const ssize_t n = read(fd, text, sizeof(text) - 1);
  close(fd);
  if (n <= 0) return {};
  std::string id;
  for (ssize_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (std::isxdigit(c) || c == '-') id += static_cast<char>(c);
  }
  return id;
}

// The inode of a namespace link (/proc/self/ns/pid), or 0.
unsigned long long namespace_inode(const char* path) {
  struct stat st;
  return stat(path, &st) == 0 ? static_cast<unsigned long long>(st.st_ino) : 0;
}

}  // namespace

std::string host_identity() {
  const std::string boot = boot_id();
  const unsigned long long pid_ns = namespace_inode("/proc/self/ns/pid");
  const unsigned long long mount_ns = namespace_inode("/proc/self/ns/mnt");
  if (boot.empty() || pid_ns == 0 || mount_ns == 0) return {};
  return boot + "/" + std::to_string(pid_ns) + "/" + std::to_string(mount_ns);
}

bool same_host_identity(const std::string& a, const std::string& b) { return !a.empty() && a == b; }

}  // namespace trainscope::exchange
