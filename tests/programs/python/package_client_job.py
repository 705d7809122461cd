"""A job that reaches NCCL through a client package's own compiled bindings, as its users do: nccl4py's
nccl.bindings.nccl or CuPy's cupy.cuda.nccl (the real packages from the package index, unchanged).

  python3 package_client_job.py --client nccl4py|cupy [--steps N] [--count N] [--fault half-count --rank R --step S]

Both load the libnccl.so.2 the loader finds (here the CPU stand-in, on LD_LIBRARY_PATH) and take buffers as
addresses, so host memory (numpy) and the null stream stand in for device memory and a CUDA stream. Under ts-launch:
rank 0's ncclUniqueId, made by the package, is relayed to the others.

Each step is collective_steps.py's: six collectives, every result checked.
Output, one line per rank: "rank R: CLIENT VERSION, NCCL VERSION, S steps of N, digest D".
--fault half-count: rank R all-reduces N/2 elements at step S, a count mismatch (without trainscope it waits forever,
as on real NCCL). A wrong result exits 3 with "test program: WHAT failed (STEP)" on stderr, as the other jobs.
"""

import ctypes
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import collective_steps  # noqa: E402
import nccl_ctypes as nc  # noqa: E402

USAGE = (
    "usage: package_client_job.py --client nccl4py|cupy [--steps N] [--count N]\n"
    "                             [--fault half-count --rank R --step S]\n"
)


class Nccl4py:
    """nccl4py's low-level bindings (nccl.bindings.nccl): functions named after NCCL's, the communicator a handle."""

    def __init__(self):
        from importlib import metadata

        import nccl.bindings.nccl as bindings

        self.n = bindings
        self.name = "nccl4py " + metadata.version("nccl4py")
        self.float32 = int(bindings.DataType.Float32)
        self.sum = int(bindings.RedOp.Sum)

    def version(self):
        return self.n.get_version()

    def unique_id(self):
        made = self.n.get_unique_id()
        return ctypes.string_at(made.ptr, nc.NCCL_UNIQUE_ID_BYTES)

    def init(self, world, data, rank):
        uid = self.n.UniqueId()
        ctypes.memmove(uid.ptr, data, nc.NCCL_UNIQUE_ID_BYTES)
        self.comm = self.n.comm_init_rank(world, uid, rank)

    def all_reduce(self, send, recv, count):
        self.n.all_reduce(send, recv, count, self.float32, self.sum, self.comm, 0)

    def broadcast(self, send, recv, count, root):
        self.n.broadcast(send, recv, count, self.float32, root, self.comm, 0)

    def all_gather(self, send, recv, count):
        self.n.all_gather(send, recv, count, self.float32, self.comm, 0)

    def reduce_scatter(self, send, recv, count):
        self.n.reduce_scatter(send, recv, count, self.float32, self.sum, self.comm, 0)

    def reduce(self, send, recv, count, root):
        self.n.reduce(send, recv, count, self.float32, self.sum, root, self.comm, 0)

    def exchange(self, send, recv, count, to, source):
        self.n.group_start()
        self.n.send(send, count, self.float32, to, self.comm, 0)
        self.n.recv(recv, count, self.float32, source, self.comm, 0)
        self.n.group_end()

    def destroy(self):
        self.n.comm_destroy(self.comm)


class Cupy:
    """CuPy's cupy.cuda.nccl: an NcclCommunicator object whose methods are NCCL's, in camel case."""

    def __init__(self):
        import cupy
        from cupy.cuda import nccl

        self.n = nccl
        self.name = "cupy " + cupy.__version__
        self.float32 = nccl.NCCL_FLOAT32
        self.sum = nccl.NCCL_SUM

    def version(self):
        return self.n.get_version()

    def unique_id(self):
        return bytes(self.n.get_unique_id())

    def init(self, world, data, rank):
        self.comm = self.n.NcclCommunicator(world, data, rank)

    def all_reduce(self, send, recv, count):
        self.comm.allReduce(send, recv, count, self.float32, self.sum, 0)

    def broadcast(self, send, recv, count, root):
        self.comm.broadcast(send, recv, count, self.float32, root, 0)

    def all_gather(self, send, recv, count):
        self.comm.allGather(send, recv, count, self.float32, 0)

    def reduce_scatter(self, send, recv, count):
        self.comm.reduceScatter(send, recv, count, self.float32, self.sum, 0)

    def reduce(self, send, recv, count, root):
        self.comm.reduce(send, recv, count, self.float32, self.sum, root, 0)

    def exchange(self, send, recv, count, to, source):
        self.n.groupStart()
        self.comm.send(send, count, self.float32, to, 0)
        self.comm.recv(recv, count, self.float32, source, 0)
        self.n.groupEnd()

    def destroy(self):
        self.comm.destroy()


CLIENTS = {"nccl4py": Nccl4py, "cupy": Cupy}


def parse(argv):
    defaults = {"client": "", "steps": 3, "count": 4096, "fault": "", "rank": -1, "step": -1}
    options = nc.parse_options(argv, defaults, USAGE)
    if options["client"] not in CLIENTS or options["fault"] not in ("", "half-count") or options["count"] < 2:
        sys.stderr.write(USAGE)
        sys.exit(2)
    return options


def main(argv):
    nc.c_like_signals()
    options = parse(argv)
    count = options["count"]
    job = nc.job()
    world = job.world
    rank = job.rank
    if count % world != 0:
        sys.stderr.write("package_client_job: --count %d is not a multiple of the world size %d\n" % (count, world))
        return 2
    client = CLIENTS[options["client"]]()
    version = client.version()
    client.init(world, nc.relayed_unique_id(job, client.unique_id), rank)

    h = collective_steps.run(client, options, world, rank)
    client.destroy()
    steps = options["steps"]
    nc.say("rank %d: %s, NCCL %s, %d steps of %d, digest %016x" % (rank, client.name, version, steps, count, h))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
