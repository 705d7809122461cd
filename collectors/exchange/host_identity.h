// Which machine, process tree and file system a process lives in, so one rank's path or pid is used by another only
// where it means the same file or process.
//
// The host name proves none of it: containers, namespaces and cloned images share names. The identity is
// "<boot id>/<pid namespace inode>/<mount namespace inode>": the kernel's boot id (/proc/sys/kernel/random/boot_id,
// new at every boot, distinct between machines) and the inodes of /proc/self/ns/pid and /proc/self/ns/mnt. Two
// processes with the same identity see the same pids and the same paths.
#pragma once

#include <string>

namespace trainscope::exchange {

// This process's identity; empty when /proc does not tell it (then no path or pid of another process is trusted).
std::string host_identity();

// True when both identities are known and equal: a path or pid one process names means the same to the other.
bool same_host_identity(const std::string& a, const std::string& b);

}  // namespace trainscope::exchange
