"""pipeline_program's twin in Python (NCCL through ctypes): the same options, NCCL calls and stdout.

A pipeline-parallel "training" job: rank r is stage r. Each step stage r receives its activations from stage r-1
(stage 0 makes its own), computes on them (adds 1), and sends them to stage r+1 (the last stage keeps them), with
plain ncclSend/ncclRecv calls: step s is send #s+1 and recv #s+1.

  python3 pipeline_job.py [--steps N] [--count N] [--inject inf|nan --rank R --step S]
    --inject   on stage R at step S: inf or NaN in the activations it sends on
pipeline_program wraps each step in an NVTX range "train_step"; this job opens none (no NVTX without a CUDA-aware
library), which changes no NCCL call.
How NCCL is loaded: TS_NCCL_LOAD (handle, global) and TS_NCCL_PATH, see nccl_ctypes.py. Under ts-launch.
"""

import ctypes
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import nccl_ctypes as nc  # noqa: E402

USAGE = "usage: pipeline_job.py [--steps N] [--count N] [--inject inf|nan --rank R --step S]\n"
SCALE = nc.float32_value(0.001)  # C's 0.001f


def parse(argv):
    options = nc.parse_options(argv, {"steps": 6, "count": 1024, "inject": "", "rank": -1, "step": -1}, USAGE)
    if options["inject"] and options["inject"] not in ("inf", "nan"):
        sys.stderr.write("pipeline_job: --inject takes inf or nan, not '%s'\n" % options["inject"])
        sys.exit(2)
    return options


def main(argv):
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
    first_stage = [SCALE * float(i % 100 + 1) for i in range(count)]
    for step in range(steps):
        if job.rank == 0:
            activations[:] = first_stage
        else:
            nc.check(nccl.ncclRecv(activations, count, nc.ncclFloat32, job.rank - 1, comm, None), "ncclRecv")
        # float32 + 1.0f: the sum is exact in a double, so rounding it to float32 is the C float addition.
        activations[:] = [a + 1.0 for a in activations]
        if job.rank == options["rank"] and step == options["step"]:
            activations[5] = float("nan") if options["inject"] == "nan" else float("inf")
        if job.rank + 1 < job.world:
            nc.check(nccl.ncclSend(activations, count, nc.ncclFloat32, job.rank + 1, comm, None), "ncclSend")
    nc.check(nccl.ncclCommDestroy(comm), "ncclCommDestroy")
    nc.say("stage %d: %d steps done" % (job.rank, steps))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
