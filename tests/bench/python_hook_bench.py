"""The shim's cost for a Python caller (issue 10's figures): an all-reduce into the no-op NCCL made from a Python
stack 30 frames deep, on the first call of a call site (the Python frames are read and written to the recorder)
and on every later call (the stack is hashed to find the site). Run once without trainscope and once with
LD_PRELOAD=libtrainscope.so (tests/bench/python_hook_bench.sh does both and prints the difference).

    python3 python_hook_bench.py NOOP_LIBNCCL HELPERS_LIB [handle|global]

handle: the NCCL is opened with ctypes.CDLL and looked up on its handle (vLLM, SGLang); global: it is loaded
RTLD_GLOBAL and looked up through the process-wide scope (a linked libnccl.so.2, as PyTorch's)."""
import ctypes
import statistics
import sys

DEPTH = 30
LOOP = 200000
SITES = 200


def at_depth(depth, fn):
    return fn() if depth <= 1 else at_depth(depth - 1, fn)


def main():
    nccl_path, helpers_path = sys.argv[1], sys.argv[2]
    mode = sys.argv[3] if len(sys.argv) > 3 else "handle"
    if mode == "global":
        ctypes.CDLL(nccl_path, mode=ctypes.RTLD_GLOBAL)
        nccl = ctypes.CDLL(None)
    else:
        nccl = ctypes.CDLL(nccl_path)
    helpers = ctypes.CDLL(helpers_path)
    helpers.ts_all_reduce_loop.restype = ctypes.c_uint64
    helpers.ts_all_reduce_loop.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long]
    helpers.ts_all_reduce_once.restype = ctypes.c_uint64
    helpers.ts_all_reduce_once.argtypes = [ctypes.c_void_p, ctypes.c_void_p]

    unique_id = (ctypes.c_char * 128)()
    comm = ctypes.c_void_p()
    assert nccl.ncclGetUniqueId(unique_id) == 0
    assert nccl.ncclCommInitRank(ctypes.byref(comm), 1, unique_id, 0) == 0
    all_reduce = ctypes.cast(nccl.ncclAllReduce, ctypes.c_void_p).value

    # Later calls: one site, called LOOP times from C, five rounds; the median round.
    at_depth(DEPTH, lambda: helpers.ts_all_reduce_loop(all_reduce, comm, 1000))  # first sight, warm-up
    rounds = [at_depth(DEPTH, lambda: helpers.ts_all_reduce_loop(all_reduce, comm, LOOP)) / LOOP for _ in range(5)]
    later = statistics.median(rounds)

    # First calls: SITES functions of their own (each a different code object, so a different call site), each
    # called at the same depth; the first call of each is a first sight, the second is not.
    namespace = {"helpers": helpers, "all_reduce": all_reduce, "comm": comm}
    sites = []
    for i in range(SITES):
        exec(f"def site_{i}():\n    return helpers.ts_all_reduce_once(all_reduce, comm)\n", namespace)
        sites.append(namespace[f"site_{i}"])
    first, second = [], []
    for site in sites:
        # The same instruction makes both calls: the same Python stack, the same call site.
        timings = [at_depth(DEPTH, site) for _ in range(2)]
        first.append(timings[0])
        second.append(timings[1])
    print(f"python {sys.version_info.major}.{sys.version_info.minor} {mode}: depth {DEPTH}: later calls "
          f"{later:.1f} ns, first call of a site {statistics.median(first):.0f} ns (median of {SITES}), "
          f"its second call {statistics.median(second):.0f} ns")


if __name__ == "__main__":
    main()
