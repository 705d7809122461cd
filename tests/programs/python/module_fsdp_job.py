"""A 2-rank FSDP2 job on the CPU (gloo), started by torchrun: each block and the model sharded with fully_shard, so
every parameter is a DTensor shard between forwards and is gathered for each block's forward. Rank --bad-rank feeds
an inf into its batch --overflow-batch: only that rank's modules see it in that batch, and the other rank gets it
through the gradients' reduce-scatter, in its parameters a batch later. For module frames under FSDP2
(tests/integration/module_frames_test.cc): the frames are named like the model, with FSDP2's classes where it sharded (FSDPBlock).

  torchrun --nproc-per-node 2 module_fsdp_job.py [--steps N] [--overflow-batch B] [--bad-rank R]

Prints each rank's loss per step and, at the end, a digest of its parameter shards.
"""

import hashlib
import sys

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

from two_block_model import end_process_group, start


def say(line):
    # One write per line: the ranks share torchrun's stdout, and print() writes its end apart from the text, so that
    # under PYTHONUNBUFFERED one rank's line can land inside another's.
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main():
    args, rank, model = start(steps=4)
    mesh = dist.device_mesh.init_device_mesh("cpu", (dist.get_world_size(),))
    for block in model.encoder:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    generator = torch.Generator().manual_seed(1 + rank)
    for step in range(args.steps):
        x = torch.randn(4, 8, generator=generator)
        if step == args.overflow_batch and rank == args.bad_rank:
            x[0, 0] = float("inf")
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        say("rank %d step %d loss %s" % (rank, step, float(loss)))
    digest = hashlib.sha256()
    for name, parameter in model.named_parameters():
        digest.update(name.encode())
        digest.update(parameter.detach().to_local().numpy().tobytes())
    say("rank %d digest %s" % (rank, digest.hexdigest()[:16]))
    del model, optimizer, loss
    end_process_group()


if __name__ == "__main__":
    main()
