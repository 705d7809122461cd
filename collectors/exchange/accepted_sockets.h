// The coordinator's hold on the connections ZeroMQ accepts for it, and on its process's file descriptors.
//
// ZeroMQ has no call that closes one peer of a ROUTER, so the coordinator shuts the connection's socket down
// (shutdown(2)): ZeroMQ sees it end and closes the descriptor itself, as it does for any peer that leaves. The
// descriptor number comes from a monitor event that may be stale by the time it is read (ZeroMQ may have closed it,
// and the job may have opened something else on that number), so a socket is only ever touched through a duplicate
// (dup3 onto a slot of our own: atomic, and it cannot fail for want of descriptors) that is checked first: a socket
// whose local address is the coordinator's listening address, with the inode recorded when it was accepted. A
// descriptor of the job's own is never shut down.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace trainscope::exchange {

// RLIMIT_NOFILE's soft limit, at most the kernel's per-process ceiling (an unlimited limit is that ceiling).
size_t descriptor_limit();
// Descriptors the process has open now (/proc/self/fd); the limit when none is free to read it; 0 when unknown.
size_t count_open_descriptors();

class AcceptedSockets {
 public:
  // `endpoint`: the listener's bound endpoint ("tcp://127.0.0.1:40123", "tcp://[::1]:40123", "ipc:///path").
  // Another transport, or no spare descriptors, leaves it unable to close anything (closes_connections()).
  explicit AcceptedSockets(const std::string& endpoint);
  ~AcceptedSockets();
  AcceptedSockets(const AcceptedSockets&) = delete;
  AcceptedSockets& operator=(const AcceptedSockets&) = delete;

  bool closes_connections() const { return family_ != 0 && slot_ >= 0; }
  // The inode of the socket on `fd` when it is a connection accepted on the listener's address; 0 otherwise.
  uint64_t identity_of(int fd) const;
  // Shuts down the connection on `fd` when `fd` is still the socket `identity` names; false when it is not.
  bool shut_down(int fd, uint64_t identity) const;

 private:
  // Duplicates `fd` onto the slot and returns the slot's socket inode when it is one of ours (0 otherwise); the
  // caller releases the slot (release()).
  uint64_t inspect(int fd) const;
  void release() const;

  int family_ = 0;  // AF_INET (the port of either IP family) or AF_UNIX; 0: unknown transport
  uint16_t port_ = 0;
  std::string unix_path_;  // a leading '\0' for an abstract name
  int null_fd_ = -1;       // /dev/null, dup'ed onto the slot to let go of a socket
  int slot_ = -1;
};

}  // namespace trainscope::exchange
