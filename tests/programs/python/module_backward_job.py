"""A small fp32 model trained for a few steps on the CPU whose gradient overflows in one named module, for the backward
frames of TRAINSCOPE_WATCH=modules,backward (tests/integration/module_frames_test.cc).

The forward stays finite: before the forward of batch --overflow-batch, head.proj's weight is scaled so that its
output is large but finite; the loss is multiplied by --loss-scale (a loss scaler's scale), so the gradient the head
receives is finite and the one it passes back (grad_input = grad_output x weight) is not: head.proj is the first
module whose backward makes an inf. The body has a ReLU(inplace=True), which PyTorch's own full backward hooks refuse.

  module_backward_job.py [--steps N] [--overflow-batch B] [--grad-scaler] [--digest] [--no-overflow]

--grad-scaler trains through AMP's GradScaler (device "cpu", init_scale = --loss-scale), which skips the optimizer
step of the batch whose gradients hold inf/nan. --digest prints a digest of every gradient and weight after each step:
runs with and without trainscope must print the same.
"""

import argparse
import hashlib

import torch
from torch import nn


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 4)

    def forward(self, x):
        return self.proj(x)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.ReLU(inplace=True), nn.Linear(16, 16), nn.Tanh())
        self.head = Head()

    def forward(self, x):
        return self.head(self.body(x))


def digest(model):
    h = hashlib.sha256()
    for name, p in model.named_parameters():
        h.update(name.encode())
        h.update(p.detach().numpy().tobytes())
        if p.grad is not None:
            h.update(p.grad.numpy().tobytes())
    return h.hexdigest()[:16]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--overflow-batch", type=int, default=2)
    parser.add_argument("--loss-scale", type=float, default=2.0**64)
    parser.add_argument("--weight-scale", type=float, default=1e26)
    parser.add_argument("--grad-scaler", action="store_true")
    parser.add_argument("--digest", action="store_true")
    parser.add_argument("--no-overflow", action="store_true")
    args = parser.parse_args()

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu", init_scale=args.loss_scale) if args.grad_scaler else None
    criterion = nn.MSELoss()  # a root of its own beside the model: it must not count batches
    generator = torch.Generator().manual_seed(1)
    for step in range(args.steps):
        if step == args.overflow_batch and not args.no_overflow:
            with torch.no_grad():
                model.head.proj.weight.mul_(args.weight_scale)
        x = torch.randn(4, 8, generator=generator)
        target = torch.zeros(4, 4)
        optimizer.zero_grad()
        out = model(x)
        loss = criterion(out, target) if args.no_overflow else out.mean()
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            # The scale of a loss scaler, in the overflow batch only: the other steps stay sane.
            overflow = step == args.overflow_batch and not args.no_overflow
            (loss * args.loss_scale if overflow else loss).backward()
            optimizer.step()
        if step == args.overflow_batch and not args.no_overflow:
            with torch.no_grad():
                model.head.proj.weight.div_(args.weight_scale)
        if args.digest:
            print("step %d digest %s" % (step + 1, digest(model)), flush=True)
    print("done", flush=True)


if __name__ == "__main__":
    main()
