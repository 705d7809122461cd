"""A 2-rank torch.distributed DDP job on the CPU (gloo), started by torchrun, whose rank --bad-rank makes an inf in one
named module at batch --overflow-batch: the other rank gets it only through the gradients' all-reduce, and sees it in
its own modules a batch later. For the origin of module frames (tests/integration/module_frames_test.cc).

  torchrun --nproc-per-node 2 module_ddp_job.py [--steps N] [--overflow-batch B] [--bad-rank R]
"""

import argparse
import gc
import os

import torch
import torch.distributed as dist
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.act = nn.Tanh()

    def forward(self, x):
        return self.act(self.fc(x))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(Block(), Block())
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        return self.head(self.encoder(x))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--overflow-batch", type=int, default=2)
    parser.add_argument("--bad-rank", type=int, default=1)
    args = parser.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(Model())
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    generator = torch.Generator().manual_seed(1 + rank)
    for step in range(args.steps):
        if step == args.overflow_batch and rank == args.bad_rank:
            with torch.no_grad():
                model.module.encoder[1].fc.weight.mul_(float("inf"))
        x = torch.randn(4, 8, generator=generator)
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print("rank %d step %d loss %s" % (rank, step, float(loss)), flush=True)
    # The DDP wrapper holds the process group, whose gloo workers free each finished work with the thread-local state
    # it captured, which may hold a Python object: freed after the interpreter began to finalise, that takes the GIL
    # from a worker thread and ends the process in std::terminate (torch's own race: 3 of 14 runs of this job without
    # trainscope). Dropped here, the group and its workers end while Python still runs.
    del model, optimizer, loss
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
