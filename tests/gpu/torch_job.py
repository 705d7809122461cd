# A one-rank PyTorch job (torch.distributed, NCCL backend) for tests/gpu/run.sh: trainscope must record its
# ncclAllReduce calls (PyTorch links libnccl.so.2) with the line of this file that called dist.all_reduce.
import os

import torch
import torch.distributed as dist


def reduce_gradients(tensor):
    dist.all_reduce(tensor)  # the call site tests/gpu/run.sh looks for in `trainscope report`


def main():
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
    tensor = torch.ones(1 << 20, device="cuda")
    for _ in range(5):
        reduce_gradients(tensor)
    torch.cuda.synchronize()
    print("all_reduce ok", tensor[0].item(), os.getpid())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
