"""The small model of the distributed module-frame jobs (module_ddp_job.py, module_fsdp_job.py): two Linear+Tanh
blocks and a head, 8 features wide, so that each rank's frames and their numbers are few and fixed."""

import argparse
import gc

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


def start(steps):
    """Parses the jobs' arguments (--steps, --overflow-batch B (-1: none), --bad-rank R), joins the gloo process group
    torchrun describes, and returns (arguments, rank, a model with the same weights on every rank)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=steps)
    parser.add_argument("--overflow-batch", type=int, default=2, help="-1: none")
    parser.add_argument("--bad-rank", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    return args, dist.get_rank(), Model()


def end_process_group():
    """Ends the process group once the caller has dropped its model and optimizer.

    The model holds the process group, whose gloo workers free each finished work with the thread-local state it
    captured, which may hold a Python object: freed after the interpreter began to finalise, that takes the GIL from a
    worker thread and ends the process in std::terminate (torch's own race: 3 of 14 runs of the DDP job without
    trainscope). Ended here, the group and its workers end while Python still runs."""
    gc.collect()
    dist.destroy_process_group()
