"""A small model trained through torch.compile on the CPU (inductor), printing a digest of its weights: run with and
without TRAINSCOPE_WATCH=modules,backward, the digests must be equal and the job must not fail (the global module
hooks are traced by dynamo: they must do nothing there). For tests/integration/module_frames_test.cc.
"""

import hashlib

import torch
from torch import nn


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(inplace=True), nn.Linear(16, 4))
    compiled = torch.compile(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    generator = torch.Generator().manual_seed(1)
    for _ in range(3):
        x = torch.randn(4, 8, generator=generator)
        loss = compiled(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    digest = hashlib.sha256()
    for p in model.parameters():
        digest.update(p.detach().numpy().tobytes())
    print("job: digest %s" % digest.hexdigest()[:16], flush=True)


if __name__ == "__main__":
    main()
