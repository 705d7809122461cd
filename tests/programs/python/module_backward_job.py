"""A small fp32 model trained for a few steps on the CPU whose gradient overflows in one named module, for the backward
frames of TRAINSCOPE_WATCH=modules,backward (tests/integration/module_frames_test.cc).

The forward stays finite: before the forward of batch --overflow-batch, head.proj's weight is scaled so that its
output is large but finite; the loss is multiplied by --loss-scale (a loss scaler's scale), so the gradient the head
receives is finite and the one it passes back (grad_input = grad_output x weight) is not: head.proj is the first
module whose backward makes an inf. The body has a ReLU(inplace=True), which PyTorch's own full backward hooks refuse.

  module_backward_job.py [--steps N] [--overflow-batch B] [--grad-scaler] [--fused] [--found-inf-read-late N]
                         [--digest] [--no-overflow] [--device cpu|cuda] [--sync-check] [--inf-unused-batch B]
                         [--nan-weight-batch B]

--grad-scaler trains through AMP's GradScaler (device "cpu", init_scale = --loss-scale), which skips the optimizer
step of the batch whose gradients hold inf/nan. --fused uses SGD(fused=True), which takes GradScaler's found-inf and
skips its update itself. --found-inf-read-late N stands in for a GPU behind the host: trainscope's hooks read the
fused step's found-inf as they read a CUDA one (_FoundInfLater), and the copy is back at their Nth look (one look per
batch start, one at exit). --inf-unused-batch B runs head.proj on an inf input before batch B's forward, under
no_grad: an inf the gradients never see, so a loss scaler applies that step. --nan-weight-batch B writes a nan into head.proj's weight before batch B's forward,
for good: every later gradient holds nan and the scaler skips every step. --digest prints a digest of every gradient and weight after each step: runs with and without
trainscope must print the same. --device cuda trains on the GPU (tests/gpu/module_frames_gpu.sh); --sync-check then
runs every step after the first in PyTorch's sync debug mode "error", so that a hook that synchronised the host with
the GPU would raise (with --fused: GradScaler's own check synchronises).
"""

import argparse
import hashlib
import sys

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
        h.update(p.detach().cpu().numpy().tobytes())
        if p.grad is not None:
            h.update(p.grad.cpu().numpy().tobytes())
    return h.hexdigest()[:16]


class _ReadLate:
    """A CUDA found-inf's host copy as trainscope's hooks see it (_trainscope_module_frames._FoundInfLater), made of a
    CPU one: not ready until the hooks' Nth look."""

    looks_needed = 1

    def __init__(self, torch_, tensors, scaler_name, batches_begun):
        self.scaler_name = scaler_name
        self.batches_begun = batches_begun
        self._found = sum(float(t) for t in tensors) != 0
        self._looks = 0

    def ready(self):
        self._looks += 1
        return self._looks >= self.looks_needed

    def found(self):
        return self._found


def read_found_inf_late(looks):
    hooks = sys.modules.get("_trainscope_module_frames")  # loaded once torch was imported, when trainscope watches
    if hooks is None:
        return
    _ReadLate.looks_needed = looks
    hooks._READ_NOW, hooks._READ_LATER, hooks._FoundInfLater = (), ("cpu",), _ReadLate


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--overflow-batch", type=int, default=2)
    parser.add_argument("--loss-scale", type=float, default=2.0**64)
    parser.add_argument("--weight-scale", type=float, default=1e26)
    parser.add_argument("--grad-scaler", action="store_true")
    parser.add_argument("--fused", action="store_true")
    parser.add_argument("--found-inf-read-late", type=int, default=0)
    parser.add_argument("--digest", action="store_true")
    parser.add_argument("--no-overflow", action="store_true")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--sync-check", action="store_true")
    parser.add_argument("--inf-unused-batch", type=int, default=-1)
    parser.add_argument("--nan-weight-batch", type=int, default=-1)
    args = parser.parse_args()

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = Net().to(args.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, **({"fused": True} if args.fused else {}))
    if args.found_inf_read_late:
        read_found_inf_late(args.found_inf_read_late)
    scaler = torch.amp.GradScaler(args.device, init_scale=args.loss_scale) if args.grad_scaler else None
    criterion = nn.MSELoss()  # a root of its own beside the model: it must not count batches
    generator = torch.Generator(args.device).manual_seed(1)
    for step in range(args.steps):
        if args.sync_check and step == 1:
            torch.cuda.set_sync_debug_mode("error")
        if step == args.overflow_batch and not args.no_overflow:
            with torch.no_grad():
                model.head.proj.weight.mul_(args.weight_scale)
        if step == args.nan_weight_batch:
            with torch.no_grad():
                model.head.proj.weight[0, 0] = float("nan")
        if step == args.inf_unused_batch:
            with torch.no_grad():
                model.head(torch.full((4, 16), float("inf"), device=args.device))
        x = torch.randn(4, 8, generator=generator, device=args.device)
        target = torch.zeros(4, 4, device=args.device)
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
