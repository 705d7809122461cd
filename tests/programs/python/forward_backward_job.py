"""A small "training" job whose forward() and backward() both all-reduce through one helper, all_reduce().

Each step, train_step() runs forward() (activations all-reduced, as a tensor-parallel layer does) then backward()
(gradients all-reduced, as data parallelism does); both call all_reduce(buf, count), the one place that calls
ncclAllReduce. With --fault backward-count, rank R's backward() calls the helper with half the count at step S: a
count mismatch whose Python frames are all_reduce <- backward <- train_step <- main, which trainscope must
attribute to backward() and its line. Without trainscope the mismatch blocks forever, as with real NCCL.

  python3 forward_backward_job.py [--steps N] [--count N] [--fault backward-count --rank R --step S]
Prints, per rank, "rank R digest D" (tsprog::digest of every step's results) and "rank R: N steps done".
The values are small integers, so every rank's sums are exact and equal whatever the reduction order.
How NCCL is loaded: TS_NCCL_LOAD (handle, global) and TS_NCCL_PATH, see nccl_ctypes.py. Under ts-launch.
"""

import ctypes
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import nccl_ctypes as nc  # noqa: E402

USAGE = "usage: forward_backward_job.py [--steps N] [--count N] [--fault backward-count --rank R --step S]\n"

nccl = None
comm = None


def all_reduce(buf, count):
    """The one helper that calls NCCL: sums count fp32 elements of buf across the ranks, in place."""
    nc.check(nccl.ncclAllReduce(buf, buf, count, nc.ncclFloat32, nc.ncclSum, comm, None), "ncclAllReduce")


def forward(activations, count, rank, step):
    activations[:] = [float(rank + 1 + (i % 5) + step) for i in range(count)]
    all_reduce(activations, count)


def backward(grads, count, rank, step, faulty):
    grads[:] = [float((i % 3) + rank + step) for i in range(count)]
    all_reduce(grads, count // 2 if faulty else count)


def train_step(activations, grads, count, rank, step, faulty, h):
    forward(activations, count, rank, step)
    backward(grads, count, rank, step, faulty)
    return nc.digest(grads, nc.digest(activations, h))


def parse(argv):
    options = nc.parse_options(argv, {"steps": 5, "count": 1024, "fault": "", "rank": -1, "step": -1}, USAGE)
    if options["fault"] not in ("", "backward-count"):
        sys.stderr.write("forward_backward_job: --fault takes backward-count, not '%s'\n" % options["fault"])
        sys.exit(2)
    return options


def main(argv):
    global nccl, comm
    nc.c_like_signals()
    options = parse(argv)
    steps = options["steps"]
    count = options["count"]
    nccl = nc.load()
    job = nc.job()
    uid = nc.shared_unique_id(nccl, job)
    comm = nc.ncclComm_t()
    nc.check(nccl.ncclCommInitRank(ctypes.byref(comm), job.world, uid, job.rank), "ncclCommInitRank")
    activations = nc.float_buffer(count)
    grads = nc.float_buffer(count)
    h = nc.FNV_OFFSET
    for step in range(steps):
        faulty = options["fault"] == "backward-count" and job.rank == options["rank"] and step == options["step"]
        h = train_step(activations, grads, count, job.rank, step, faulty, h)
    nc.check(nccl.ncclCommDestroy(comm), "ncclCommDestroy")
    nc.say("rank %d digest %016x" % (job.rank, h))
    nc.say("rank %d: %d steps done" % (job.rank, steps))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
