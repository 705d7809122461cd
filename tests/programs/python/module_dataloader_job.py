"""A small model trained on the CPU from a DataLoader with worker processes, as most training scripts feed their model:
under TRAINSCOPE_WATCH=modules,backward the job must print and end as without trainscope, its workers included
(tests/integration/module_frames_test.cc).

  module_dataloader_job.py --start fork|spawn|forkserver [--workers N] [--epochs N]

The workers are started the given way (DataLoader's multiprocessing_context): fork copies the parent, hooks and engine
included; spawn and forkserver start new interpreters, which import torch (and so our hooks) without running a module.
Prints, after each epoch, "job: epoch E loss L digest D" (D: the weights' bytes), then "job: done".
"""

import argparse
import hashlib

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def digest(model):
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().numpy().tobytes())
    return h.hexdigest()[:16]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--start", choices=["fork", "spawn", "forkserver"], required=True)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 16), torch.randn(64, 1))
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = DataLoader(
        data,
        batch_size=8,
        shuffle=True,
        generator=torch.Generator().manual_seed(1),
        num_workers=args.workers,
        multiprocessing_context=args.start,
        persistent_workers=args.start != "fork",
    )
    for epoch in range(args.epochs):
        for x, y in loader:
            loss = ((model(x) - y) ** 2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print("job: epoch %d loss %.6f digest %s" % (epoch, loss.item(), digest(model)), flush=True)
    print("job: done", flush=True)


if __name__ == "__main__":
    main()
