/* libts_open_counter.so: a preload library that counts the process's open, open64, openat and openat64 calls
 * (CPython calls the 64 ones) the classic way: each wrapper finds the real function with dlsym(RTLD_NEXT, name) on
 * first use. At exit it appends "open_counter: N calls\n" to the file named by TS_OPEN_COUNTER_OUT, else writes it
 * to stderr.
 *
 * It is preloaded beside a library that interposes dlsym, to check that RTLD_NEXT still means "after the caller"
 * for the caller: a lookup that came back with our own wrapper would recurse forever; it is caught instead and
 * stops the process (status 134) with a line that says so. */
#define _GNU_SOURCE
#undef _FORTIFY_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#define TS_COUNTER_API __attribute__((visibility("default")))

typedef int (*open_fn)(const char*, int, ...);
typedef int (*openat_fn)(int, const char*, int, ...);

static unsigned long g_calls;
static open_fn g_real_open;
static open_fn g_real_open64;
static openat_fn g_real_openat;
static openat_fn g_real_openat64;

static void die(const char* name, const char* why) {
  char line[256];
  const int n = snprintf(line, sizeof(line), "open_counter: dlsym(RTLD_NEXT, \"%s\") %s\n", name, why);
  if (n > 0) (void)!write(2, line, (size_t)n);
  abort();
}

/* The next definition of `name` after this library; never one of this library's own. */
static void* next(const char* name) {
  void* real = dlsym(RTLD_NEXT, name);
  if (real == NULL) die(name, "found nothing");
  Dl_info found;
  Dl_info self;
  if (dladdr(real, &found) != 0 && dladdr((void*)&next, &self) != 0 && found.dli_fbase == self.dli_fbase)
    die(name, "returned open_counter's own wrapper");
  return real;
}

/* The mode argument is there only when the flags create a file. */
#define TS_MODE_ARG(flags, mode)                                      \
  do {                                                                \
    if (((flags)&O_CREAT) != 0 || ((flags)&O_TMPFILE) == O_TMPFILE) { \
      va_list args;                                                   \
      va_start(args, flags);                                          \
      mode = (mode_t)va_arg(args, int);                               \
      va_end(args);                                                   \
    }                                                                 \
  } while (0)

TS_COUNTER_API int open(const char* path, int flags, ...) {
  mode_t mode = 0;
  TS_MODE_ARG(flags, mode);
  open_fn real = __atomic_load_n(&g_real_open, __ATOMIC_ACQUIRE);
  if (real == NULL) {
    real = (open_fn)next("open");
    __atomic_store_n(&g_real_open, real, __ATOMIC_RELEASE);
  }
  __atomic_fetch_add(&g_calls, 1, __ATOMIC_RELAXED);
  return real(path, flags, mode);
}

TS_COUNTER_API int open64(const char* path, int flags, ...) {
  mode_t mode = 0;
  TS_MODE_ARG(flags, mode);
  open_fn real = __atomic_load_n(&g_real_open64, __ATOMIC_ACQUIRE);
  if (real == NULL) {
    real = (open_fn)next("open64");
    __atomic_store_n(&g_real_open64, real, __ATOMIC_RELEASE);
  }
  __atomic_fetch_add(&g_calls, 1, __ATOMIC_RELAXED);
  return real(path, flags, mode);
}

TS_COUNTER_API int openat(int dir_fd, const char* path, int flags, ...) {
  mode_t mode = 0;
  TS_MODE_ARG(flags, mode);
  openat_fn real = __atomic_load_n(&g_real_openat, __ATOMIC_ACQUIRE);
  if (real == NULL) {
    real = (openat_fn)next("openat");
    __atomic_store_n(&g_real_openat, real, __ATOMIC_RELEASE);
  }
  __atomic_fetch_add(&g_calls, 1, __ATOMIC_RELAXED);
  return real(dir_fd, path, flags, mode);
}

TS_COUNTER_API int openat64(int dir_fd, const char* path, int flags, ...) {
  mode_t mode = 0;
  TS_MODE_ARG(flags, mode);
  openat_fn real = __atomic_load_n(&g_real_openat64, __ATOMIC_ACQUIRE);
  if (real == NULL) {
    real = (openat_fn)next("openat64");
    __atomic_store_n(&g_real_openat64, real, __ATOMIC_RELEASE);
  }
  __atomic_fetch_add(&g_calls, 1, __ATOMIC_RELAXED);
  return real(dir_fd, path, flags, mode);
}

/* At exit (and at dlclose): the count, through the system call so that it does not count itself. */
__attribute__((destructor)) static void report_calls(void) {
  char line[64];
  const int n = snprintf(line, sizeof(line), "open_counter: %lu calls\n", __atomic_load_n(&g_calls, __ATOMIC_RELAXED));
  if (n <= 0) return;
  const char* out = getenv("TS_OPEN_COUNTER_OUT");
  int fd = 2;
  if (out != NULL && *out != '\0') {
    fd = (int)syscall(SYS_openat, AT_FDCWD, out, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return;
  }
  (void)!write(fd, line, (size_t)n);
  if (fd != 2) close(fd);
}
