"""A 2-rank torch.distributed DDP job on the CPU (gloo), started by torchrun, whose rank --bad-rank makes an inf in one
named module at batch --overflow-batch: the other rank gets it only through the gradients' all-reduce, and sees it in
its own modules a batch later. For the origin of module frames (tests/integration/module_frames_test.cc).

  torchrun --nproc-per-node 2 module_ddp_job.py [--steps N] [--overflow-batch B] [--bad-rank R]
"""

import torch
from torch import nn

from two_block_model import end_process_group, start


def main():
    args, rank, model = start(steps=5)
    model = nn.parallel.DistributedDataParallel(model)
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
    del model, optimizer, loss
    end_process_group()


if __name__ == "__main__":
    main()
