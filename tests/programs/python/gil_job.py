"""A job whose every all-reduce runs while another thread holds the GIL, deterministically (no sleeps).

Each step the main thread calls wait_then_call() of libts_gil_helpers.so through ctypes.CDLL (the GIL released),
passing it ncclAllReduce as found in the NCCL handle; a holder thread calls hold_gil_until() through ctypes.PyDLL
(the GIL kept). The handshake (see gil_helpers.c) makes the all-reduce run inside the holder's call: a debugger
that needs the GIL while NCCL is called (to read the Python stack, say) would deadlock here.

  python3 gil_job.py [--steps N] [--count N] [--helpers PATH]
    --helpers  the helper library (default: $TS_GIL_HELPERS, else "libts_gil_helpers.so" as dlopen finds it)
Prints, per rank, "rank R step S digest D" for each step's all-reduce result, then "rank R: N steps done".
Step s reduces rank + 1 + (i % 7) + s on every rank (small integers: exact, whatever the reduction order).
How NCCL is loaded: TS_NCCL_LOAD (handle, global) and TS_NCCL_PATH, see nccl_ctypes.py. 1 rank alone, or under
ts-launch.
"""

import ctypes
import os
import socket
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import nccl_ctypes as nc  # noqa: E402

USAGE = "usage: gil_job.py [--steps N] [--count N] [--helpers PATH]\n"


def parse(argv):
    helpers = os.environ.get("TS_GIL_HELPERS") or "libts_gil_helpers.so"
    return nc.parse_options(argv, {"steps": 4, "count": 1024, "helpers": helpers}, USAGE)


def load_helpers(path):
    """The helper library twice: through PyDLL (calls keep the GIL) and through CDLL (calls release it)."""
    try:
        holding = ctypes.PyDLL(path)
        releasing = ctypes.CDLL(path)
    except OSError as error:
        sys.stderr.write("gil_job: loading %s failed: %s\n" % (path, error))
        sys.exit(3)
    hold_gil_until = holding.hold_gil_until
    hold_gil_until.restype = ctypes.c_int
    hold_gil_until.argtypes = [ctypes.c_int, ctypes.c_int]
    wait_then_call = releasing.wait_then_call
    wait_then_call.restype = ctypes.c_int
    wait_then_call.argtypes = [
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_void_p,  # ncclAllReduce, as a plain function pointer
        nc.buffer_type,
        nc.buffer_type,
        ctypes.c_size_t,
        nc.ncclDataType_t,
        nc.ncclRedOp_t,
        nc.ncclComm_t,
        nc.cudaStream_t,
    ]
    return hold_gil_until, wait_then_call


def holder(hold_gil_until, ready, release_fd, steps, failures):
    """Each step: wait (GIL released) until the main thread is in wait_then_call, then hold the GIL in
    hold_gil_until until the main thread's all-reduce has returned."""
    for _ in range(steps):
        if len(os.read(ready.fileno(), 1)) != 1 or hold_gil_until(ready.fileno(), release_fd) != 0:
            failures.append("the GIL holder's pipes failed")
            return


def main(argv):
    nc.c_like_signals()
    options = parse(argv)
    steps = options["steps"]
    count = options["count"]
    hold_gil_until, wait_then_call = load_helpers(options["helpers"])
    nccl = nc.load()
    job = nc.job()
    uid = nc.shared_unique_id(nccl, job)
    comm = nc.ncclComm_t()
    nc.check(nccl.ncclCommInitRank(ctypes.byref(comm), job.world, uid, job.rank), "ncclCommInitRank")
    all_reduce = ctypes.cast(nccl.ncclAllReduce, ctypes.c_void_p)

    main_end, holder_end = socket.socketpair()
    release_read, release_write = os.pipe()
    failures = []
    thread = threading.Thread(
        target=holder, args=(hold_gil_until, holder_end, release_read, steps, failures), name="gil-holder"
    )
    thread.daemon = True  # a job that fails mid-way must not wait for it
    thread.start()

    send = nc.float_buffer(count)
    recv = nc.float_buffer(count)
    digests = []
    for step in range(steps):
        send[:] = [float(job.rank + 1 + (i % 7) + step) for i in range(count)]
        result = wait_then_call(
            main_end.fileno(), release_write, all_reduce, send, recv, count, nc.ncclFloat32, nc.ncclSum, comm, None
        )
        if result < 0:
            nc.fail("the GIL handshake", result)
        nc.check(result, "ncclAllReduce with the GIL held by another thread")
        digests.append(nc.digest(recv))
    thread.join()
    if failures:
        nc.fail(failures[0], 0)
    nc.check(nccl.ncclCommDestroy(comm), "ncclCommDestroy")
    for step, h in enumerate(digests):
        nc.say("rank %d step %d digest %016x" % (job.rank, step, h))
    nc.say("rank %d: %d steps done" % (job.rank, steps))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
