/* libts_full_disk.so: a preload library that makes one directory behave like a disk that filled up after the job
 * started: creating any file in TS_FULL_DISK_DIR (an absolute path; open/open64/openat/openat64/creat with O_CREAT)
 * fails with ENOSPC, except the files created before the disk filled in a real run: flight recorders (*.tsrec, made
 * and fully allocated at the first NCCL call) and logs (*.log). Everything else goes to the real function.
 *
 * Deterministic and usable as root (CI runs as root, where a read-only directory does not stop a write), unlike
 * a small tmpfs, which needs mount rights. The real functions are found with dlsym(RTLD_NEXT, name). */
#define _GNU_SOURCE
#undef _FORTIFY_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#define TS_FULL_DISK_API __attribute__((visibility("default")))

typedef int (*open_fn)(const char*, int, ...);
typedef int (*openat_fn)(int, const char*, int, ...);
typedef int (*creat_fn)(const char*, mode_t);

static int ends_with(const char* text, size_t length, const char* suffix) {
  const size_t n = strlen(suffix);
  return length >= n && memcmp(text + length - n, suffix, n) == 0;
}

/* Whether creating `path` must fail: in the full directory (or below it), neither a recorder nor a log. */
static int disk_full_for(const char* path, int flags) {
  if ((flags & O_CREAT) == 0 || path == NULL) return 0;
  const char* dir = getenv("TS_FULL_DISK_DIR");
  if (dir == NULL || dir[0] != '/') return 0;
  const size_t dir_length = strlen(dir);
  if (strncmp(path, dir, dir_length) != 0 || (path[dir_length] != '/' && path[dir_length] != '\0')) return 0;
  const size_t length = strlen(path);
  return !ends_with(path, length, ".tsrec") && !ends_with(path, length, ".log");
}

#define TS_MODE_ARG(flags, mode)                                      \
  do {                                                                \
    if (((flags)&O_CREAT) != 0 || ((flags)&O_TMPFILE) == O_TMPFILE) { \
      va_list args;                                                   \
      va_start(args, flags);                                          \
      mode = (mode_t)va_arg(args, int);                               \
      va_end(args);                                                   \
    }                                                                 \
  } while (0)

TS_FULL_DISK_API int open(const char* path, int flags, ...) {
  mode_t mode = 0;
  TS_MODE_ARG(flags, mode);
  if (disk_full_for(path, flags)) {
    errno = ENOSPC;
    return -1;
  }
  return ((open_fn)dlsym(RTLD_NEXT, "open"))(path, flags, mode);
}

TS_FULL_DISK_API int open64(const char* path, int flags, ...) {
  mode_t mode = 0;
  TS_MODE_ARG(flags, mode);
  if (disk_full_for(path, flags)) {
    errno = ENOSPC;
    return -1;
  }
  return ((open_fn)dlsym(RTLD_NEXT, "open64"))(path, flags, mode);
}

TS_FULL_DISK_API int openat(int dir_fd, const char* path, int flags, ...) {
  mode_t mode = 0;
  TS_MODE_ARG(flags, mode);
  if (disk_full_for(path, flags)) {
    errno = ENOSPC;
    return -1;
  }
  return ((openat_fn)dlsym(RTLD_NEXT, "openat"))(dir_fd, path, flags, mode);
}

TS_FULL_DISK_API int openat64(int dir_fd, const char* path, int flags, ...) {
  mode_t mode = 0;
  TS_MODE_ARG(flags, mode);
  if (disk_full_for(path, flags)) {
    errno = ENOSPC;
    return -1;
  }
  return ((openat_fn)dlsym(RTLD_NEXT, "openat64"))(dir_fd, path, flags, mode);
}

TS_FULL_DISK_API int creat(const char* path, mode_t mode) {
  if (disk_full_for(path, O_CREAT)) {
    errno = ENOSPC;
    return -1;
  }
  return ((creat_fn)dlsym(RTLD_NEXT, "creat"))(path, mode);
}
