// Private files and folders that never follow a link nor replace what trainscope did not create (private_files.h).
#include "base/private_files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

namespace trainscope::files {

namespace {

// What `path` is, for an open() or mkdir() that failed: a refusal when a link or something else is in the way.
int classify_failure(const char* path, int error, bool want_directory) {
  struct stat st;
  if (lstat(path, &st) != 0) return error;
  if (S_ISLNK(st.st_mode)) return kIsSymlink;
  if (want_directory && !S_ISDIR(st.st_mode)) return kNotDirectory;
  if (!want_directory && !S_ISREG(st.st_mode)) return kNotRegular;
  return error;
}

// Whether an existing file may be written to or replaced by us: a regular file of this user with one name.
int check_own_regular_file(const struct stat& st) {
  if (S_ISLNK(st.st_mode)) return kIsSymlink;
  if (!S_ISREG(st.st_mode)) return kNotRegular;
  if (st.st_uid != geteuid()) return kOtherOwner;
  if (st.st_nlink > 1) return kHardLinked;
  return 0;
}

}  // namespace

const char* error_text(int error) {
  switch (error) {
    case kIsSymlink:
      return "it is a symbolic link, and trainscope never writes through one";
    case kNotRegular:
      return "it is not a regular file";
    case kOtherOwner:
      return "it belongs to another user";
    case kHardLinked:
      return "it has other names (hard links)";
    case kOthersWrite:
      return "it belongs to another user and others can write to it";
    case kNotDirectory:
      return "it is not a folder";
    default:
      return strerror(error);
  }
}

int create_file(const char* path, int flags) {
  const int fd = open(path, flags | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd >= 0) return fd;
  const int error = errno;
  return -(error == EEXIST ? EEXIST : classify_failure(path, error, false));
}

int write_all(int fd, const void* data, size_t len) {
  const char* bytes = static_cast<const char*>(data);
  size_t written = 0;
  while (written < len) {
    const ssize_t n = write(fd, bytes + written, len - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? errno : EIO;
    written += static_cast<size_t>(n);
  }
  return 0;
}

namespace {

// Creates `path` exclusively and has `write` fill it; on any error nothing is left at `path`.
int write_new_file_with(const char* path, int (*write)(int fd, void* context), void* context) {
  const int fd = create_file(path, O_WRONLY);
  if (fd < 0) return -fd;
  int error = write(fd, context);
  if (close(fd) != 0 && error == 0) error = errno;
  if (error != 0) unlink(path);
  return error;
}

struct Bytes {
  const void* data;
  size_t len;
};

int write_bytes(int fd, void* context) {
  const Bytes* bytes = static_cast<const Bytes*>(context);
  return write_all(fd, bytes->data, bytes->len);
}

}  // namespace

int write_new_file(const char* path, const void* data, size_t len) {
  Bytes bytes{data, len};
  return write_new_file_with(path, write_bytes, &bytes);
}

int replace_file(const char* path, const void* data, size_t len) {
  Bytes bytes{data, len};
  return replace_file_with(path, write_bytes, &bytes);
}

int replace_file_with(const char* path, int (*write)(int fd, void* context), void* context) {
  struct stat st;
  if (lstat(path, &st) == 0) {
    if (const int refused = check_own_regular_file(st); refused != 0) return refused;
  } else if (errno != ENOENT) {
    return errno;
  }
  static uint32_t counter = 0;
  char temporary[4096 + 64];
  const int n = snprintf(temporary, sizeof(temporary), "%s.tmp.%d.%u", path, static_cast<int>(getpid()),
                         __atomic_fetch_add(&counter, 1u, __ATOMIC_RELAXED));
  if (n < 0 || n >= static_cast<int>(sizeof(temporary))) return ENAMETOOLONG;
  if (const int error = write_new_file_with(temporary, write, context); error != 0) return error;
  // Checked again just before: what appeared at `path` meanwhile is not replaced either.
  if (lstat(path, &st) == 0) {
    if (const int refused = check_own_regular_file(st); refused != 0) {
      unlink(temporary);
      return refused;
    }
  }
  if (rename(temporary, path) != 0) {
    const int error = errno;
    unlink(temporary);
    return error;
  }
  return 0;
}

int open_append(const char* path) {
  // O_NONBLOCK: a FIFO at the name must not block the open; a regular file ignores it.
  const int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0600);
  if (fd < 0) {
    const int error = errno;
    return -classify_failure(path, error, false);
  }
  struct stat st;
  int error = fstat(fd, &st) == 0 ? check_own_regular_file(st) : errno;
  if (error == 0 && fcntl(fd, F_SETFL, O_APPEND) != 0) error = errno;
  if (error != 0) {
    close(fd);
    return -error;
  }
  return fd;
}

int append_file(const char* path, const void* data, size_t len) {
  const int fd = open_append(path);
  if (fd < 0) return -fd;
  int error = write_all(fd, data, len);
  if (close(fd) != 0 && error == 0) error = errno;
  return error;
}

PrivateDirectory make_private_directory(const char* path) {
  PrivateDirectory out;
  char buffer[4096];
  size_t len = strlen(path);
  while (len > 1 && path[len - 1] == '/') --len;  // "runs/x/" is "runs/x": a trailing slash would follow a link
  if (len == 0 || len >= sizeof(buffer)) {
    out.error = ENAMETOOLONG;
    return out;
  }
  memcpy(buffer, path, len);
  buffer[len] = '\0';
  for (size_t i = 1; i <= len; ++i) {
    if (buffer[i] != '/' && buffer[i] != '\0') continue;
    const char saved = buffer[i];
    buffer[i] = '\0';
    if (mkdir(buffer, 0700) != 0 && errno != EEXIST) {
      out.error = errno;
      return out;
    }
    buffer[i] = saved;
  }
  const int fd = open(buffer, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    out.error = classify_failure(buffer, error, true);
    return out;
  }
  // Ranks starting together check the same folder: under the lock, exactly one of them finds it open and says so. The
  // lock is held for a few system calls; one a forked child kept (it shares our open file) is waited for 200 ms at
  // most, and where folders cannot be locked (some network file systems) it is checked all the same.
  for (int attempt = 0; attempt < 200 && flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK; ++attempt) {
    const struct timespec millisecond = {0, 1000000};
    nanosleep(&millisecond, nullptr);
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    out.error = errno;
  } else if (st.st_uid != geteuid()) {
    // Not ours: usable as it is unless others can write to it (they could put links where our files go).
    if ((st.st_mode & 0022) != 0) {
      out.error = kOthersWrite;
      out.owner_uid = st.st_uid;
    }
  } else if ((st.st_mode & 0077) != 0) {
    if (fchmod(fd, 0700) != 0) {
      out.error = errno;
    } else {
      out.old_mode = static_cast<uint32_t>(st.st_mode & 07777);
    }
  }
  close(fd);  // and the lock with it
  return out;
}

}  // namespace trainscope::files
