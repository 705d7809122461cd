"""A stand-in for the few names of PyTorch that the clients' pynccl_wrapper.py touch, NOT PyTorch.

PyTorch's CPU wheels are not on the package index our machines reach, and its CUDA wheels are gigabytes; the wrappers
only need dtype objects to map to NCCL's (ncclDataTypeEnum.from_torch), ReduceOp (torch.distributed) and
torch.version. Buffers are passed to NCCL as addresses, so no tensor is needed. A name the wrappers start to use
and this module lacks fails the tests with an AttributeError naming it: add it here.
"""

from . import distributed, version  # noqa: F401


class dtype:
    """torch.dtype: compared by identity, as the wrappers do (dtype == torch.float32, dict keys)."""

    def __init__(self, name, itemsize):
        self.name = name
        self.itemsize = itemsize

    def __repr__(self):
        return "torch." + self.name


int8 = dtype("int8", 1)
uint8 = dtype("uint8", 1)
int32 = dtype("int32", 4)
int64 = dtype("int64", 8)
float16 = dtype("float16", 2)
bfloat16 = dtype("bfloat16", 2)
float32 = dtype("float32", 4)
float64 = dtype("float64", 8)
float8_e4m3fn = dtype("float8_e4m3fn", 1)
