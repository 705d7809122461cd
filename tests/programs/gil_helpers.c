/* Helpers for tests/programs/python/gil_job.py: one thread holds the GIL while another makes an NCCL call.
 *
 * The holder thread blocks in os.read() on its end of a socket pair (GIL released), then calls hold_gil_until()
 * through ctypes.PyDLL, which keeps the GIL for the whole call. The main thread calls wait_then_call() through
 * ctypes.CDLL, which releases the GIL first. Each step:
 *   main (in wait_then_call)        holder
 *   writes "go" on its end     ->   os.read() returns; takes the GIL; calls hold_gil_until()
 *   reads "held"               <-   writes "held" on its end (GIL held from here ...)
 *   calls fn (the all-reduce)
 *   writes "release"           ->   reads "release"; returns (... to here)
 * so the NCCL call runs, every time, while the other thread holds the GIL. No sleeps, no timing. */
#include <errno.h>
#include <stddef.h>
#include <unistd.h>

#define TS_GIL_API __attribute__((visibility("default")))

/* ncclAllReduce's signature, with its enums as int and its handles as void*. */
typedef int (*ts_all_reduce_fn)(const void* sendbuff, void* recvbuff, size_t count, int datatype, int op, void* comm,
                                void* stream);

static int read_byte(int fd) {
  char byte = 0;
  for (;;) {
    const ssize_t n = read(fd, &byte, 1);
    if (n == 1) return 0;
    if (n < 0 && errno == EINTR) continue;
    return -1;
  }
}

static int write_byte(int fd) {
  const char byte = 1;
  for (;;) {
    const ssize_t n = write(fd, &byte, 1);
    if (n == 1) return 0;
    if (n < 0 && errno == EINTR) continue;
    return -1;
  }
}

/* Called through ctypes.PyDLL (the GIL stays held): says so on ready_fd, then blocks until release_fd has a byte.
 * 0, or -1 if a descriptor failed. */
TS_GIL_API int hold_gil_until(int ready_fd, int release_fd) {
  if (write_byte(ready_fd) != 0) return -1;
  return read_byte(release_fd);
}

/* Called through ctypes.CDLL (the GIL released): asks the holder to take the GIL (a byte on ready_fd, a socket
 * whose peer the holder reads), waits until it has (its byte back on ready_fd), calls fn with the arguments, then
 * lets the holder go (a byte on release_fd). fn's result, or -1 if a descriptor failed before the call. */
TS_GIL_API int wait_then_call(int ready_fd, int release_fd, ts_all_reduce_fn fn, const void* sendbuff, void* recvbuff,
                              size_t count, int datatype, int op, void* comm, void* stream) {
  if (write_byte(ready_fd) != 0 || read_byte(ready_fd) != 0) return -1;
  const int result = fn(sendbuff, recvbuff, count, datatype, op, comm, stream);
  if (write_byte(release_fd) != 0) return -1;
  return result;
}
