"""vllm.utils.nccl of the stand-in: find_nccl_library as vLLM's (VLLM_NCCL_SO_PATH, else libnccl.so.2)."""

import os


def find_nccl_library():
    return os.environ.get("VLLM_NCCL_SO_PATH") or "libnccl.so.2"
