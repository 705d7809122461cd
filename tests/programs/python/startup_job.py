"""A job that goes wrong at start-up, the way vLLM's rank 0 does when its start-up fails after it published the
unique id: rank 0 makes the id (and hands it to the launcher, when there is one), then ends without creating a
communicator; the other ranks wait in ncclCommInitRank for a rank that never comes (on real NCCL, forever).

  python3 startup_job.py [--end exit|_exit|exec] [--status N] [--init-first]
  --end     how rank 0 ends: sys.exit(N) (the default), os._exit(N), or exec of a shell that exits with N
  --status  rank 0's exit status (default 5)
  --init-first  every rank, rank 0 too, creates the communicator and all-reduces once before rank 0 ends: a clean
            job whose rank 0 ends by --end (each rank prints "rank R all-reduced" first)
Without TS_UID_WRITE_FD (no launcher) rank 0 only makes the id and ends: a process that called NCCL and never made a
communicator. How NCCL is loaded: TS_NCCL_LOAD and TS_NCCL_PATH, see nccl_ctypes.py.
"""

import ctypes
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import nccl_ctypes as nc  # noqa: E402

USAGE = "usage: startup_job.py [--end exit|_exit|exec] [--status N] [--init-first]\n"
ENDS = ("exit", "_exit", "exec")


def end(how, status):
    sys.stdout.flush()
    sys.stderr.flush()
    if how == "_exit":
        os._exit(status)
    if how == "exec":
        os.execv("/bin/sh", ["sh", "-c", "exit %d" % status])
    sys.exit(status)


def main(argv):
    nc.c_like_signals()
    options = nc.parse_options(argv, {"end": "exit", "status": 5, "init_first": False}, USAGE,
                               {"--init-first": ("init_first", True)})
    if options["end"] not in ENDS:
        sys.stderr.write("startup_job.py: --end must be one of %s, not '%s'\n%s" % (", ".join(ENDS), options["end"],
                                                                                  USAGE))
        return 2
    nccl = nc.load()
    job = nc.job()
    if job.rank == 0 and os.environ.get("TS_UID_WRITE_FD") is None:
        uid = nc.ncclUniqueId()
        nc.check(nccl.ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
        end(options["end"], options["status"])
    if job.rank == 0 and not options["init_first"]:
        uid = nc.ncclUniqueId()
        nc.check(nccl.ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
        fd = nc.env_int("TS_UID_WRITE_FD", -1)
        if os.write(fd, bytes(uid)) != nc.NCCL_UNIQUE_ID_BYTES:
            nc.fail("writing the unique id", fd)
        os.close(fd)
        end(options["end"], options["status"])
    uid = nc.shared_unique_id(nccl, job)
    comm = nc.ncclComm_t()
    nc.check(nccl.ncclCommInitRank(ctypes.byref(comm), job.world, uid, job.rank), "ncclCommInitRank")
    buffer = nc.float_buffer(256, 1.0)
    nc.check(nccl.ncclAllReduce(buffer, buffer, 256, nc.ncclFloat32, nc.ncclSum, comm, None), "ncclAllReduce")
    nc.say("rank %d all-reduced" % job.rank, flush=True)
    nc.check(nccl.ncclCommDestroy(comm), "ncclCommDestroy")
    if job.rank == 0:
        end(options["end"], options["status"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
