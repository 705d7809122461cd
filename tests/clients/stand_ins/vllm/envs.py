"""vllm.envs of the stand-in: the one setting pynccl_wrapper.py reads (when a window function is missing)."""

VLLM_USE_NCCL_SYMM_MEM = False
