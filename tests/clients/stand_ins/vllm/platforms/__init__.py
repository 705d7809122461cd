"""vllm.platforms of the stand-in: current_platform is a CUDA machine, as on the NVIDIA GPUs trainscope serves."""

import torch


class _CudaPlatform:
    device_type = "cuda"

    def is_rocm(self):
        return False

    def is_cuda(self):
        return True

    def fp8_dtype(self):
        return torch.float8_e4m3fn


current_platform = _CudaPlatform()
