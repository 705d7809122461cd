"""A job that reaches NCCL the way vLLM and SGLang do: through the client's own pynccl_wrapper.py, run unchanged.

  python3 client_wrapper_job.py --client vllm|sglang --wrapper FILE --nccl LIBRARY [--steps N] [--count N]
                                [--fault half-count --rank R --step S]

FILE is the client's released pynccl_wrapper.py (scripts/client_wrappers.sh installs it; tests/clients/README.md);
LIBRARY the NCCL it loads, as NCCLLibrary(so_file=LIBRARY) (VLLM_NCCL_SO_PATH / SGLANG_NCCL_SO_PATH do the same).
The wrapper's imports come from tests/clients/stand_ins (a stand-in torch, and vLLM's few modules), put first on
sys.path here. Under ts-launch: rank 0's ncclUniqueId, made by the wrapper, is relayed to the others.

Each step is collective_steps.py's: six collectives, every result checked. Around the loop, what each client adds:
vLLM suspends and resumes the communicator (ncclCommSuspend/ncclCommResume, which its wrapper requires of the library)
and registers a window on the buffer the collectives receive into; SGLang creates the communicator with
ncclCommInitRankConfig (its own, newer ncclConfig_t), allocates with ncclMemAlloc and registers a window on that
memory.
Output, one line per rank: "rank R: CLIENT's pynccl_wrapper, NCCL VERSION, S steps of N, digest D".
--fault half-count: rank R all-reduces N/2 elements at step S, a count mismatch (without trainscope it waits forever,
as on real NCCL). A wrong result exits 3 with "test program: WHAT failed (STEP)" on stderr, as the other jobs.
"""

import ctypes
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
sys.path.insert(0, os.path.join(_HERE, "..", "..", "clients", "stand_ins"))

import collective_steps  # noqa: E402
import nccl_ctypes as nc  # noqa: E402
import torch  # noqa: E402  (the stand-in of tests/clients/stand_ins)

USAGE = (
    "usage: client_wrapper_job.py --client vllm|sglang --wrapper FILE --nccl LIBRARY [--steps N] [--count N]\n"
    "                             [--fault half-count --rank R --step S]\n"
)

# Where each client keeps its wrapper: the module is loaded under that name, as the client imports it.
MODULES = {
    "vllm": "vllm.distributed.device_communicators.pynccl_wrapper",
    "sglang": "sglang.srt.distributed.device_communicators.pynccl_wrapper",
}

NCCL_SUSPEND_MEM = 0x01  # nccl.h 2.29.7
NCCL_WIN_COLL_SYMMETRIC = 0x01  # nccl.h 2.27


def parse(argv):
    defaults = {"client": "", "wrapper": "", "nccl": "", "steps": 3, "count": 4096, "fault": "", "rank": -1, "step": -1}
    options = nc.parse_options(argv, defaults, USAGE)
    if (
        options["client"] not in MODULES
        or not options["wrapper"]
        or not options["nccl"]
        or options["fault"] not in ("", "half-count")
        or options["count"] < 2
    ):
        sys.stderr.write(USAGE)
        sys.exit(2)
    return options


def load_wrapper(client, path):
    spec = importlib.util.spec_from_file_location(MODULES[client], path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[MODULES[client]] = module
    spec.loader.exec_module(module)
    return module


class WrapperClient:
    """The wrapper's NCCLLibrary as collective_steps.run drives a client: its methods, with its own enum values."""

    def __init__(self, lib, comm, float32, total, stream):
        self.lib, self.comm, self.float32, self.sum, self.stream = lib, comm, float32, total, stream

    def all_reduce(self, send, recv, count):
        self.lib.ncclAllReduce(send, recv, count, self.float32, self.sum, self.comm, self.stream)

    def broadcast(self, send, recv, count, root):
        self.lib.ncclBroadcast(send, recv, count, self.float32, root, self.comm, self.stream)

    def all_gather(self, send, recv, count):
        self.lib.ncclAllGather(send, recv, count, self.float32, self.comm, self.stream)

    def reduce_scatter(self, send, recv, count):
        self.lib.ncclReduceScatter(send, recv, count, self.float32, self.sum, self.comm, self.stream)

    def reduce(self, send, recv, count, root):
        self.lib.ncclReduce(send, recv, count, self.float32, self.sum, root, self.comm, self.stream)

    def exchange(self, send, recv, count, to, source):
        self.lib.ncclGroupStart()
        self.lib.ncclSend(send, count, self.float32, to, self.comm, self.stream)
        self.lib.ncclRecv(recv, count, self.float32, source, self.comm, self.stream)
        self.lib.ncclGroupEnd()


def main(argv):
    nc.c_like_signals()
    options = parse(argv)
    client = options["client"]
    count = options["count"]
    job = nc.job()
    world = job.world
    rank = job.rank
    if count % world != 0:
        sys.stderr.write("client_wrapper_job: --count %d is not a multiple of the world size %d\n" % (count, world))
        return 2
    wrapper = load_wrapper(client, options["wrapper"])
    lib = wrapper.NCCLLibrary(so_file=options["nccl"])
    version = lib.ncclGetVersion()
    data = nc.relayed_unique_id(job, lambda: bytes(lib.ncclGetUniqueId()))
    if client == "vllm":
        uid = lib.unique_id_from_bytes(data)
        comm = lib.ncclCommInitRank(world, uid, rank)
    else:
        uid = wrapper.ncclUniqueId()
        ctypes.memmove(ctypes.addressof(uid), data, len(data))
        comm = lib.ncclCommInitRankConfig(world, uid, rank)

    float32 = wrapper.ncclDataTypeEnum.from_torch(torch.float32)
    total = wrapper.ncclRedOpTypeEnum.from_torch(torch.distributed.ReduceOp.SUM)
    stream = wrapper.cudaStream_t()
    recv = (ctypes.c_float * count)()

    if client == "vllm" and lib.has_symbol("ncclCommSuspend"):
        lib.ncclCommSuspend(comm, NCCL_SUSPEND_MEM)  # vLLM's sleep mode: the communicator's memory is let go...
        lib.ncclCommResume(comm)  # ...and taken back before the next collective
    if client == "vllm":
        window = lib.ncclCommWindowRegister(comm, ctypes.addressof(recv), ctypes.sizeof(recv), NCCL_WIN_COLL_SYMMETRIC)
    else:
        device_memory = lib.ncclMemAlloc(ctypes.sizeof(recv))
        window = lib.ncclCommWindowRegister(comm, device_memory, ctypes.sizeof(recv), NCCL_WIN_COLL_SYMMETRIC)

    h = collective_steps.run(WrapperClient(lib, comm, float32, total, stream), options, world, rank, recv)

    lib.ncclCommWindowDeregister(comm, window)
    if client == "sglang":
        lib.ncclMemFree(device_memory)
    lib.ncclCommDestroy(comm)
    nc.say(
        "rank %d: %s's pynccl_wrapper, NCCL %s, %d steps of %d, digest %016x"
        % (rank, client, version, options["steps"], count, h)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
