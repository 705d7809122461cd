"""NCCL through ctypes, the way vLLM's pynccl_wrapper.py and SGLang reach it, shared by the Python test jobs.

Standard library only; CPython 3.9 to 3.13. What tests/programs/bootstrap.h is to the C programs:

- load(): the library, in one of three ways (argument `mode`, else env TS_NCCL_LOAD, else "handle"):
    handle  ctypes.CDLL(path) (RTLD_LOCAL, as ctypes loads), each function looked up as an attribute of that
            handle, i.e. dlsym(handle, name): vLLM's and SGLang's way;
    global  the library loaded with RTLD_GLOBAL, each function looked up through ctypes.CDLL(None), i.e.
            dlsym on the process's global scope: what a library linked into the process (PyTorch's libnccl) gets;
    scope-first  loaded RTLD_LOCAL, each function looked up in the global scope first, then on the handle:
            nccl4py's way (under the shim the global scope holds our exported hooks, the handle the rest).
  The path is argument `path`, else env TS_NCCL_PATH, else "libnccl.so.2" (found as dlopen finds it), so that a
  renamed copy of the library can be used. Every function used is looked up once, at load, with its argtypes and
  restype.
- job(), shared_unique_id(): RANK / WORLD_SIZE, and the ncclUniqueId (a 128-byte structure) that rank 0 writes to
  TS_UID_WRITE_FD and ts-launch relays to the other ranks' TS_UID_READ_FD; blocking reads, no polling.
  relayed_unique_id(): the same relay for a job that makes the id its own way (a client's wrapper).
- digest(): tsprog::digest's FNV-1a, so outputs compare byte for byte with the C programs'.
- fail(), check(): "test program: WHAT failed (CODE)" on stderr and exit status 3, as tsprog::fail; say(): a line
  of output in one write.
- half_bits(), bfloat16_bits(), uint16_buffer(): fp16 / bf16 buffers as ctypes arrays of uint16.
"""

import ctypes
import os
import struct
import sys

# ncclResult_t
ncclSuccess = 0
ncclInProgress = 7

# ncclDataType_t
ncclInt8 = 0
ncclUint8 = 1
ncclInt32 = 2
ncclUint32 = 3
ncclInt64 = 4
ncclUint64 = 5
ncclFloat16 = 6
ncclFloat32 = 7
ncclFloat64 = 8
ncclBfloat16 = 9

# ncclRedOp_t
ncclSum = 0
ncclProd = 1
ncclMax = 2
ncclMin = 3
ncclAvg = 4

NCCL_UNIQUE_ID_BYTES = 128

ncclResult_t = ctypes.c_int
ncclDataType_t = ctypes.c_int
ncclRedOp_t = ctypes.c_int
ncclComm_t = ctypes.c_void_p
cudaStream_t = ctypes.c_void_p
buffer_type = ctypes.c_void_p


class ncclUniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * NCCL_UNIQUE_ID_BYTES)]


# ncclConfig_t of nccl.h 2.28 (ncclConfig_v22800) and its NCCL_CONFIG_INITIALIZER.
NCCL_CONFIG_UNDEF_INT = -(2**31)
NCCL_CONFIG_MAGIC = 0xCAFEBEEF
NCCL_HEADER_VERSION = 22809  # NCCL_VERSION(2, 28, 9)


class ncclConfig_t(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("magic", ctypes.c_uint),
        ("version", ctypes.c_uint),
        ("blocking", ctypes.c_int),
        ("cgaClusterSize", ctypes.c_int),
        ("minCTAs", ctypes.c_int),
        ("maxCTAs", ctypes.c_int),
        ("netName", ctypes.c_char_p),
        ("splitShare", ctypes.c_int),
        ("trafficClass", ctypes.c_int),
        ("commName", ctypes.c_char_p),
        ("collnetEnable", ctypes.c_int),
        ("CTAPolicy", ctypes.c_int),
        ("shrinkShare", ctypes.c_int),
        ("nvlsCTAs", ctypes.c_int),
        ("nChannelsPerNetPeer", ctypes.c_int),
        ("nvlinkCentricSched", ctypes.c_int),
    ]


def config_initializer():
    """An ncclConfig_t as NCCL_CONFIG_INITIALIZER makes it."""
    config = ncclConfig_t()
    for name, _ in ncclConfig_t._fields_:
        if name not in ("netName", "commName"):
            setattr(config, name, NCCL_CONFIG_UNDEF_INT)
    config.size = ctypes.sizeof(ncclConfig_t)
    config.magic = NCCL_CONFIG_MAGIC
    config.version = NCCL_HEADER_VERSION
    return config


# Every function the jobs use: name -> (restype, argtypes), as in nccl.h.
_FUNCTIONS = {
    "ncclGetVersion": (ncclResult_t, [ctypes.POINTER(ctypes.c_int)]),
    "ncclGetErrorString": (ctypes.c_char_p, [ncclResult_t]),
    "ncclGetUniqueId": (ncclResult_t, [ctypes.POINTER(ncclUniqueId)]),
    "ncclCommInitRank": (ncclResult_t, [ctypes.POINTER(ncclComm_t), ctypes.c_int, ncclUniqueId, ctypes.c_int]),
    "ncclCommInitRankConfig": (
        ncclResult_t,
        [ctypes.POINTER(ncclComm_t), ctypes.c_int, ncclUniqueId, ctypes.c_int, ctypes.POINTER(ncclConfig_t)],
    ),
    "ncclCommDestroy": (ncclResult_t, [ncclComm_t]),
    "ncclCommGetAsyncError": (ncclResult_t, [ncclComm_t, ctypes.POINTER(ncclResult_t)]),
    "ncclAllReduce": (
        ncclResult_t,
        [buffer_type, buffer_type, ctypes.c_size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t],
    ),
    "ncclBroadcast": (
        ncclResult_t,
        [buffer_type, buffer_type, ctypes.c_size_t, ncclDataType_t, ctypes.c_int, ncclComm_t, cudaStream_t],
    ),
    "ncclSend": (ncclResult_t, [buffer_type, ctypes.c_size_t, ncclDataType_t, ctypes.c_int, ncclComm_t, cudaStream_t]),
    "ncclRecv": (ncclResult_t, [buffer_type, ctypes.c_size_t, ncclDataType_t, ctypes.c_int, ncclComm_t, cudaStream_t]),
    "ncclGroupStart": (ncclResult_t, []),
    "ncclGroupEnd": (ncclResult_t, []),
}

LOAD_MODES = ("handle", "global", "scope-first")


class _FirstOf:
    """Looks each function up in the process's global scope first, then on the library's handle: nccl4py's way
    (NVIDIA's nccl.bindings), and that of any loader that tries dlsym(RTLD_DEFAULT) before the handle."""

    def __init__(self, *lookups):
        self._lookups = lookups

    def __getattr__(self, name):
        for lookup in self._lookups:
            try:
                return getattr(lookup, name)
            except AttributeError:
                pass
        raise AttributeError(name)


class Nccl:
    """The loaded library: one attribute per function of _FUNCTIONS (None where the library lacks it)."""

    def __init__(self, path, mode, library, lookup):
        self.path = path
        self.mode = mode
        self.library = library  # the handle that keeps the library loaded
        for name, (restype, argtypes) in _FUNCTIONS.items():
            try:
                function = getattr(lookup, name)
            except AttributeError:
                function = None
            if function is not None:
                function.restype = restype
                function.argtypes = argtypes
            setattr(self, name, function)


def load(mode=None, path=None):
    """Loads NCCL (see the module's docstring); a failure ends the job as fail() does."""
    if mode is None:
        mode = os.environ.get("TS_NCCL_LOAD") or "handle"
    if path is None:
        path = os.environ.get("TS_NCCL_PATH") or "libnccl.so.2"
    if mode not in LOAD_MODES:
        sys.stderr.write("nccl_ctypes: TS_NCCL_LOAD must be handle, global or scope-first, not '%s'\n" % mode)
        sys.exit(2)
    try:
        if mode == "handle":
            library = ctypes.CDLL(path)
            lookup = library
        elif mode == "scope-first":
            library = ctypes.CDLL(path)  # RTLD_LOCAL, as ctypes loads: nothing of it is in the global scope
            lookup = _FirstOf(ctypes.CDLL(None), library)
        else:
            library = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            lookup = ctypes.CDLL(None)
    except OSError as error:
        sys.stderr.write("test program: loading %s failed: %s\n" % (path, error))
        sys.exit(3)
    return Nccl(path, mode, library, lookup)


def say(line, flush=False):
    """print() for the jobs' output: the line and its newline in one write, so that ranks sharing a pipe never
    interleave within a line (print() writes them separately, which shows under PYTHONUNBUFFERED=1)."""
    sys.stdout.write(line + "\n")
    if flush:
        sys.stdout.flush()


def fail(what, code):
    sys.stderr.write("test program: %s failed (%d)\n" % (what, code))
    sys.stderr.flush()
    sys.exit(3)


def check(result, what):
    if result != ncclSuccess:
        fail(what, result)


def atoi(text):
    """C's atoi/atol: leading blanks, a sign, the digits that follow; 0 if there are none."""
    text = text.lstrip(" \t\n\v\f\r")
    sign = 1
    if text[:1] in ("+", "-"):
        sign = -1 if text[0] == "-" else 1
        text = text[1:]
    digits = 0
    while digits < len(text) and "0" <= text[digits] <= "9":
        digits += 1
    return sign * int(text[:digits]) if digits else 0


def parse_options(argv, defaults, usage, flags=None):
    """The test programs' command lines: "--name VALUE" for each key of `defaults` (an int default reads its value
    as atoi does, a str default takes the word), and each "--flag" of `flags` ({"--flag": (key, value)}) sets its
    key. Anything else prints `usage` on stderr and exits 2, as the C programs do."""
    options = dict(defaults)
    flags = flags or {}
    i = 1
    while i < len(argv):
        arg = argv[i]
        key = arg[2:] if arg.startswith("--") else None
        if arg in flags:
            options[flags[arg][0]] = flags[arg][1]
        elif key in defaults and not isinstance(defaults[key], bool) and i + 1 < len(argv):
            i += 1
            options[key] = atoi(argv[i]) if isinstance(defaults[key], int) else argv[i]
        else:
            sys.stderr.write(usage)
            sys.exit(2)
        i += 1
    return options


def env_int(name, fallback):
    value = os.environ.get(name)
    return atoi(value) if value else fallback


class Job:
    def __init__(self, rank, world):
        self.rank = rank
        self.world = world


def job():
    return Job(env_int("RANK", 0), env_int("WORLD_SIZE", 1))


def shared_unique_id(nccl, the_job):
    """Every rank gets the same id: rank 0 creates it, the launcher relays it (tsprog::shared_unique_id)."""

    def make_id():
        made = ncclUniqueId()
        check(nccl.ncclGetUniqueId(ctypes.byref(made)), "ncclGetUniqueId")
        return bytes(made)

    uid = ncclUniqueId()
    data = relayed_unique_id(the_job, make_id)
    ctypes.memmove(ctypes.addressof(uid), data, NCCL_UNIQUE_ID_BYTES)
    return uid


def relayed_unique_id(the_job, make_id):
    """The 128 bytes of the job's ncclUniqueId on every rank: rank 0 makes them with make_id() (however the job
    calls NCCL) and writes them to TS_UID_WRITE_FD; the others read what ts-launch relays to TS_UID_READ_FD."""
    if the_job.world == 1 and os.environ.get("TS_UID_WRITE_FD") is None:
        return make_id()
    if the_job.rank == 0:
        data = make_id()
        fd = env_int("TS_UID_WRITE_FD", -1)
        try:
            written = os.write(fd, data) if fd >= 0 and len(data) == NCCL_UNIQUE_ID_BYTES else -1
        except OSError:
            written = -1
        if written != NCCL_UNIQUE_ID_BYTES:
            fail("writing the unique id", fd)
        os.close(fd)
        return data
    fd = env_int("TS_UID_READ_FD", -1)
    data = b""
    while fd >= 0 and len(data) < NCCL_UNIQUE_ID_BYTES:
        try:
            chunk = os.read(fd, NCCL_UNIQUE_ID_BYTES - len(data))
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    if len(data) != NCCL_UNIQUE_ID_BYTES:
        fail("reading the unique id", fd)
    os.close(fd)
    return data


FNV_OFFSET = 1469598103934665603
_FNV_PRIME = 1099511628211
_MASK = (1 << 64) - 1


def digest(data, h=FNV_OFFSET):
    """tsprog::digest: FNV-1a over bytes, or over a ctypes object's memory."""
    if not isinstance(data, (bytes, bytearray)):
        data = ctypes.string_at(ctypes.addressof(data), ctypes.sizeof(data))
    for byte in data:
        h = ((h ^ byte) * _FNV_PRIME) & _MASK
    return h


def c_like_signals():
    """SIGINT kills the job as it kills a C program (no KeyboardInterrupt), so ts-launch's forwarding agrees."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def half_bits(value):
    """The IEEE fp16 bit pattern of value (struct's 'e'), e.g. 1.0 -> 0x3C00."""
    return struct.unpack("<H", struct.pack("<e", value))[0]


def half_value(bits):
    return struct.unpack("<e", struct.pack("<H", bits))[0]


def bfloat16_bits(value):
    """The bfloat16 bit pattern of value: float32's upper half, rounded to nearest even (NaN kept a NaN)."""
    bits = struct.unpack("<I", struct.pack("<f", value))[0]
    if (bits & 0x7FFFFFFF) > 0x7F800000:
        return (bits >> 16) | 0x40
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


def bfloat16_value(bits):
    return struct.unpack("<f", struct.pack("<I", bits << 16))[0]


def uint16_buffer(count, bits=0):
    """count 16-bit elements (fp16 or bf16 bit patterns), each set to bits."""
    buffer = (ctypes.c_uint16 * count)()
    if bits:
        buffer[:] = [bits] * count
    return buffer


def float32_value(value):
    """value rounded to float32, as a C float holds it."""
    return struct.unpack("<f", struct.pack("<f", value))[0]


def float_buffer(count, value=0.0):
    buffer = (ctypes.c_float * count)()
    if value:
        buffer[:] = [value] * count
    return buffer


def double_buffer(count, value=0.0):
    buffer = (ctypes.c_double * count)()
    if value:
        buffer[:] = [value] * count
    return buffer
