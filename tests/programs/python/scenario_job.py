"""scenario_program's twin in Python (NCCL through ctypes): the same command line, NCCL calls and stdout.

A job that trains for a few steps and, on request, goes wrong on one rank in one of the ways our users meet: a
collective with another shape, type, reduction op, root or operation, a send/recv pair that disagrees, a rank that
leaves the loop early (destroying its communicator, or just exiting), one that stops calling NCCL (hang), or one
that skips its send to the next rank and then ends as if that step were its last (skip-send).

  python3 scenario_job.py [--steps N] [--count N] [--digest] [--fault KIND --rank R --step S]
  KIND: half-count, dtype, redop, root, op, p2p-count, early-destroy, early-exit, hang, skip-send
  N for --count: at least 128 (each step also sends and receives 128 elements of the same buffers).
  --digest: after the loop each rank prints "rank R digest D" (tsprog::digest of its buffers), as scenario_program.
How NCCL is loaded: TS_NCCL_LOAD (handle, global) and TS_NCCL_PATH, see nccl_ctypes.py. Under ts-launch.
"""

import ctypes
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import nccl_ctypes as nc  # noqa: E402

USAGE = (
    "usage: scenario_job.py [--steps N] [--count N] [--digest] [--fault KIND --rank R --step S]\n"
    "  KIND: half-count, dtype, redop, root, op, p2p-count, early-destroy, early-exit, hang, skip-send\n"
)


def parse(argv):
    defaults = {"steps": 10, "count": 1 << 16, "fault": "", "rank": -1, "step": -1, "digest": False}
    options = nc.parse_options(argv, defaults, USAGE, {"--digest": ("digest", True)})
    options["count"] &= (1 << 64) - 1  # size_t, as the C program reads it
    return options


def main(argv):
    nc.c_like_signals()
    options = parse(argv)
    fault = options["fault"]
    count = options["count"]
    steps = options["steps"]
    nccl = nc.load()
    job = nc.job()
    uid = nc.shared_unique_id(nccl, job)
    comm = nc.ncclComm_t()
    nc.check(nccl.ncclCommInitRank(ctypes.byref(comm), job.world, uid, job.rank), "ncclCommInitRank")
    grads = nc.float_buffer(count, 1.0)
    other = nc.float_buffer(count, 0.0)
    wide = nc.double_buffer(count, 1.0)
    for step in range(steps):
        faulty = job.rank == options["rank"] and step == options["step"]
        if faulty and fault == "early-destroy":
            nc.say("rank %d leaves the loop at step %d and destroys its communicator" % (job.rank, step), flush=True)
            nc.check(nccl.ncclCommDestroy(comm), "destroy")
            return 0
        if faulty and fault == "early-exit":
            nc.say("rank %d leaves the loop at step %d and exits" % (job.rank, step), flush=True)
            return 0
        if faulty and fault == "hang":
            nc.say("rank %d stops calling NCCL at step %d" % (job.rank, step), flush=True)
            signal.pause()  # alive but silent, as in a long checkpoint save
        if faulty and fault == "half-count":
            result = nccl.ncclAllReduce(grads, grads, count // 2, nc.ncclFloat32, nc.ncclSum, comm, None)
        elif faulty and fault == "dtype":
            result = nccl.ncclAllReduce(wide, wide, count, nc.ncclFloat64, nc.ncclSum, comm, None)
        elif faulty and fault == "redop":
            result = nccl.ncclAllReduce(grads, grads, count, nc.ncclFloat32, nc.ncclMax, comm, None)
        elif faulty and fault == "op":
            result = nccl.ncclBroadcast(grads, grads, count, nc.ncclFloat32, 0, comm, None)
        else:
            result = nccl.ncclAllReduce(grads, grads, count, nc.ncclFloat32, nc.ncclSum, comm, None)
        nc.check(result, "gradient all-reduce")
        root = 1 if faulty and fault == "root" else 0
        nc.check(nccl.ncclBroadcast(other, other, 16, nc.ncclFloat32, root, comm, None), "broadcast")
        if job.world > 1:
            right = (job.rank + 1) % job.world
            left = (job.rank + job.world - 1) % job.world
            sent = 64 if faulty and fault == "p2p-count" else 128
            skip_send = faulty and fault == "skip-send"
            nc.check(nccl.ncclGroupStart(), "group start")
            if not skip_send:
                nc.check(nccl.ncclSend(grads, sent, nc.ncclFloat32, right, comm, None), "send")
            nc.check(nccl.ncclRecv(other, 128, nc.ncclFloat32, left, comm, None), "recv")
            nc.check(nccl.ncclGroupEnd(), "group end")
            if skip_send:
                nc.say(
                    "rank %d skipped its send to rank %d at step %d and leaves the loop" % (job.rank, right, step),
                    flush=True,
                )
                break
    if options["digest"]:
        nc.say("rank %d digest %016x" % (job.rank, nc.digest(other, nc.digest(grads))))
    nc.check(nccl.ncclCommDestroy(comm), "destroy")
    nc.say("rank %d finished %d steps" % (job.rank, steps))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
