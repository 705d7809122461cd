"""cuda_launches_program's twin in Python: the CUDA driver and NCCL through ctypes, as CuPy or a ctypes job reach them.

The same calls in the same order as tests/programs/cuda_launches_program.cc (its default scenario: two streams, a
launch before any NCCL call, a captured graph, a kernel that faults so that the next cuStreamSynchronize fails with
700, one more launch failing the same way) and the same stdout. Standard library only; CPython 3.9 to 3.13.

  python3 cuda_launches_job.py [--train STEPS INF_STEP [--optimizer]]
--train runs, as the C program's does, STEPS steps of add_kernel on A, an all-reduce and a synchronisation, with
inf_kernel after add_kernel at step INF_STEP; --optimizer ends each step with fused_adam_kernel (a fused Adam step,
which TRAINSCOPE_STEP_MARKER=auto takes for the end of a batch).
The driver is libcuda.so.1 as dlopen finds it (the stand-in in tests, through LD_LIBRARY_PATH); NCCL as in
nccl_ctypes.py.
"""

import ctypes
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import nccl_ctypes as nc  # noqa: E402

CUDA_SUCCESS = 0
CU_STREAM_NON_BLOCKING = 1
CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1

MODULE = (
    b"_Z12scale_kernelPfPKfi 8,8,4\n"
    b"_Z10add_kernelPfPKfS1_i 8,8,8,4\n"
    b"_Z12fault_kernelPf 8 fault\n"
    b"_Z11spin_kernelPi 8 hang\n"
    b"_Z10inf_kernelPf 8 inf\n"
    b"_Z17fused_adam_kernelPfPKfi 8,8,4\n"
)

p = ctypes.c_void_p
_FUNCTIONS = {
    "cuInit": [ctypes.c_uint],
    "cuModuleLoadData": [ctypes.POINTER(p), ctypes.c_char_p],
    "cuModuleGetFunction": [ctypes.POINTER(p), p, ctypes.c_char_p],
    "cuStreamCreate": [ctypes.POINTER(p), ctypes.c_uint],
    "cuMemAlloc_v2": [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t],
    "cuLaunchKernel": [p] + [ctypes.c_uint] * 7 + [p, ctypes.POINTER(p), ctypes.POINTER(p)],
    "cuStreamSynchronize": [p],
    "cuStreamBeginCapture_v2": [p, ctypes.c_int],
    "cuStreamEndCapture": [p, ctypes.POINTER(p)],
    "cuGraphInstantiateWithFlags": [ctypes.POINTER(p), p, ctypes.c_ulonglong],
    "cuGraphLaunch": [p, p],
}


def load_driver():
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError as error:
        sys.stderr.write("test program: loading libcuda.so.1 failed: %s\n" % error)
        sys.exit(3)
    for name, argtypes in _FUNCTIONS.items():
        function = getattr(driver, name)
        function.restype = ctypes.c_int
        function.argtypes = argtypes
    return driver


def check_cu(result, what):
    if result != CUDA_SUCCESS:
        nc.fail(what, result)


def parse_arguments(argv):
    """(train_steps, inf_step, optimizer); train_steps 0: the default scenario."""
    usage = "usage: cuda_launches_job.py [--train STEPS INF_STEP [--optimizer]]\n"
    if not argv:
        return 0, -1, False
    if argv[0] != "--train" or len(argv) not in (3, 4) or (len(argv) == 4 and argv[3] != "--optimizer"):
        sys.stderr.write(usage)
        sys.exit(2)
    try:
        return int(argv[1]), int(argv[2]), len(argv) == 4
    except ValueError:
        sys.stderr.write(usage)
        sys.exit(2)


def main():
    train_steps, inf_step, optimizer = parse_arguments(sys.argv[1:])
    cu = load_driver()
    check_cu(cu.cuInit(0), "cuInit")
    module = p()
    check_cu(cu.cuModuleLoadData(ctypes.byref(module), MODULE), "cuModuleLoadData")
    kernels = {}
    for name, mangled in (("scale", b"_Z12scale_kernelPfPKfi"), ("add", b"_Z10add_kernelPfPKfS1_i"),
                          ("fault", b"_Z12fault_kernelPf"), ("spin", b"_Z11spin_kernelPi"),
                          ("inf", b"_Z10inf_kernelPf"), ("adam", b"_Z17fused_adam_kernelPfPKfi")):
        kernels[name] = p()
        check_cu(cu.cuModuleGetFunction(ctypes.byref(kernels[name]), module, mangled), "cuModuleGetFunction " + name)
    a = p()
    b = p()
    check_cu(cu.cuStreamCreate(ctypes.byref(a), CU_STREAM_NON_BLOCKING), "cuStreamCreate a")
    check_cu(cu.cuStreamCreate(ctypes.byref(b), CU_STREAM_NON_BLOCKING), "cuStreamCreate b")
    count = 256
    x = ctypes.c_uint64()
    y = ctypes.c_uint64()
    check_cu(cu.cuMemAlloc_v2(ctypes.byref(x), count * 4), "cuMemAlloc x")
    check_cu(cu.cuMemAlloc_v2(ctypes.byref(y), count * 4), "cuMemAlloc y")
    n = ctypes.c_int(count)

    def launch(kernel, grid, block, shared, stream, args):
        params = (p * len(args))(*[ctypes.cast(ctypes.byref(arg), p) for arg in args])
        return cu.cuLaunchKernel(kernels[kernel], grid, 1, 1, block, 1, 1, shared, stream, params, None)

    # Before any NCCL call: seen only when the driver's injection started the collector.
    check_cu(launch("scale", 4, 64, 0, a, [x, y, n]), "scale on a")

    nccl = nc.load()
    job = nc.job()
    unique_id = nc.shared_unique_id(nccl, job)
    comm = nc.ncclComm_t()
    nc.check(nccl.ncclCommInitRank(ctypes.byref(comm), job.world, unique_id, job.rank), "ncclCommInitRank")
    buffer = (ctypes.c_float * count)(*([1.0] * count))

    def all_reduce(stream):
        nc.check(nccl.ncclAllReduce(buffer, buffer, count, nc.ncclFloat32, nc.ncclSum, comm, stream), "ncclAllReduce")

    if train_steps > 0:
        for step in range(train_steps):
            check_cu(launch("add", 8, 32, 0, a, [y, x, x, n]), "add on a")
            if step == inf_step:
                check_cu(launch("inf", 1, 32, 0, a, [y]), "inf on a")
            all_reduce(a)
            if optimizer:
                check_cu(launch("adam", 4, 64, 0, a, [x, y, n]), "fused_adam on a")
            check_cu(cu.cuStreamSynchronize(a), "cuStreamSynchronize a")
        nc.check(nccl.ncclCommDestroy(comm), "ncclCommDestroy")
        nc.say("trained %d steps" % train_steps, flush=True)
        return

    check_cu(launch("add", 8, 32, 128, b, [y, x, x, n]), "add on b")
    all_reduce(a)
    check_cu(cu.cuStreamSynchronize(a), "cuStreamSynchronize a")
    check_cu(cu.cuStreamSynchronize(b), "cuStreamSynchronize b")

    check_cu(cu.cuStreamBeginCapture_v2(a, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "cuStreamBeginCapture")
    check_cu(launch("scale", 2, 64, 0, a, [x, y, n]), "scale under capture")
    graph = p()
    check_cu(cu.cuStreamEndCapture(a, ctypes.byref(graph)), "cuStreamEndCapture")
    graph_exec = p()
    check_cu(cu.cuGraphInstantiateWithFlags(ctypes.byref(graph_exec), graph, 0), "cuGraphInstantiateWithFlags")
    check_cu(cu.cuGraphLaunch(graph_exec, a), "cuGraphLaunch")

    check_cu(launch("add", 8, 32, 0, b, [y, x, x, n]), "add on b")
    all_reduce(b)
    check_cu(launch("fault", 1, 32, 0, b, [x]), "fault on b")
    failed = cu.cuStreamSynchronize(b)
    after = launch("scale", 4, 64, 0, a, [x, y, n])
    nc.say("sync %d launch %d" % (failed, after))
    nc.check(nccl.ncclCommDestroy(comm), "ncclCommDestroy")
    nc.say("done", flush=True)


if __name__ == "__main__":
    main()
