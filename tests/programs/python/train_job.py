"""train_program's twin in Python (NCCL through ctypes): the same options, NCCL calls and stdout.

A "training" job for the frame reports: each step all-reduces an fp32 gradient bucket (out of place), all-reduces
an fp16 bucket in place inside a group with a broadcast, and broadcasts a small fp32 buffer from rank 0 - the same
sequence every step. Gradients are recomputed (reset) every step, so a bad value lives in one step only unless it
is injected again.

  python3 train_job.py [--steps N] [--count N] [--nonblocking [--no-poll]]
                       [--inject inf|nan|big --rank R --step S [--streak K]]
    --nonblocking  the communicator is created with ncclCommInitRankConfig, config.blocking = 0; after each call or
               group that returns ncclInProgress the job polls ncclCommGetAsyncError until it reads ncclSuccess
    --no-poll  (with --nonblocking) never polls: a job that breaks that rule
    --inject   on rank R at step S (and the K-1 steps after it): inf or NaN in the fp32 gradient bucket's send
               buffer, or (big) 6.27e+04 in the fp16 bucket, 96% of float16's largest finite value
train_program's --nvtx (NVTX ranges "train_step" and "forward" around each step) is left out: a Python job has no
NVTX ranges without a CUDA-aware library (torch.cuda.nvtx), which this standard-library-only job does not use; it is
refused like any unknown option.
How NCCL is loaded: TS_NCCL_LOAD (handle, global) and TS_NCCL_PATH, see nccl_ctypes.py. Under ts-launch.
"""

import ctypes
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import nccl_ctypes as nc  # noqa: E402

USAGE = (
    "usage: train_job.py [--steps N] [--count N] [--nonblocking [--no-poll]] "
    "[--inject inf|nan|big --rank R --step S [--streak K]]\n"
)

HALF_ONE = nc.half_bits(1.0)  # 0x3C00
HALF_BIG = nc.half_bits(62720.0)  # 0x7BA8 = 6.27e+04
GRAD_SCALE = nc.float32_value(0.001)  # C's 0.001f


def parse(argv):
    defaults = {"steps": 10, "count": 4096, "nonblocking": False, "poll": True, "inject": "", "rank": -1, "step": -1,
                "streak": 1}
    flags = {"--nonblocking": ("nonblocking", True), "--no-poll": ("poll", False)}
    options = nc.parse_options(argv, defaults, USAGE, flags)
    if options["inject"] and options["inject"] not in ("inf", "nan", "big"):
        sys.stderr.write("train_job: --inject takes inf, nan or big, not '%s'\n" % options["inject"])
        sys.exit(2)
    return options


def main(argv):
    nc.c_like_signals()
    options = parse(argv)
    steps = options["steps"]
    count = options["count"]
    nonblocking = options["nonblocking"]
    poll = options["poll"]
    inject = options["inject"]
    nccl = nc.load()
    job = nc.job()
    uid = nc.shared_unique_id(nccl, job)
    comm = nc.ncclComm_t()
    if nonblocking:
        config = nc.config_initializer()
        config.blocking = 0
        r = nccl.ncclCommInitRankConfig(ctypes.byref(comm), job.world, uid, job.rank, ctypes.byref(config))
        nc.check(nc.ncclSuccess if r == nc.ncclInProgress else r, "ncclCommInitRankConfig")
    else:
        nc.check(nccl.ncclCommInitRank(ctypes.byref(comm), job.world, uid, job.rank), "ncclCommInitRank")

    def done(result, what):
        """A call on the non-blocking communicator: ncclInProgress is success once ncclCommGetAsyncError reads
        ncclSuccess."""
        if nonblocking and result == nc.ncclInProgress:
            if not poll:
                return
            state = nc.ncclResult_t(nc.ncclInProgress)
            while state.value == nc.ncclInProgress:
                nc.check(nccl.ncclCommGetAsyncError(comm, ctypes.byref(state)), "ncclCommGetAsyncError")
            result = state.value
        nc.check(result, what)

    if nonblocking and poll:
        done(nc.ncclInProgress, "ncclCommInitRankConfig")

    def queued(result, what):
        """A call inside a group: only queued; the group's end is what may be in progress."""
        nc.check(nc.ncclSuccess if nonblocking and result == nc.ncclInProgress else result, what)

    grads = nc.float_buffer(count)
    reduced = nc.float_buffer(count)
    params = nc.float_buffer(16)
    halves = nc.uint16_buffer(count // 2)
    fresh_grads = [GRAD_SCALE * float(i % 100 + 1) for i in range(count)]
    fresh_halves = [HALF_ONE] * len(halves)
    fresh_params = [0.5 if job.rank == 0 else 0.0] * len(params)
    for step in range(steps):
        grads[:] = fresh_grads
        halves[:] = fresh_halves
        params[:] = fresh_params
        injecting = job.rank == options["rank"] and options["step"] <= step < options["step"] + options["streak"]
        if injecting and inject == "inf":
            grads[7] = float("inf")
        if injecting and inject == "nan":
            grads[7] = float("nan")
        if injecting and inject == "big" and len(halves) > 0:
            halves[3] = HALF_BIG

        done(nccl.ncclAllReduce(grads, reduced, count, nc.ncclFloat32, nc.ncclSum, comm, None), "ncclAllReduce")
        nc.check(nccl.ncclGroupStart(), "ncclGroupStart")
        queued(
            nccl.ncclAllReduce(halves, halves, len(halves), nc.ncclFloat16, nc.ncclMax, comm, None), "ncclAllReduce"
        )
        queued(nccl.ncclBroadcast(params, params, len(params), nc.ncclFloat32, 0, comm, None), "ncclBroadcast")
        done(nccl.ncclGroupEnd(), "ncclGroupEnd")
    nc.check(nccl.ncclCommDestroy(comm), "ncclCommDestroy")
    nc.say("rank %d: %d steps done" % (job.rank, steps))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
