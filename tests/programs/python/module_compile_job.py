"""A small model trained through torch.compile on the CPU, printing a digest of its weights: run with and without
TRAINSCOPE_WATCH=modules,backward, the digests must be equal and the job must not fail (the global module hooks are
traced by dynamo: they must do nothing there). For tests/integration/module_frames_test.cc.

  module_compile_job.py [--way wrap|inplace|function] [--backend inductor|eager|...]

--way: what is compiled, in the three ways jobs compile: torch.compile(model) (wrap, the default), model.compile()
(inplace), or a function that calls the model (function: compute_loss).
"""

import argparse
import hashlib

import torch
from torch import nn


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--way", choices=("wrap", "inplace", "function"), default="wrap")
    parser.add_argument("--backend", default="inductor")
    options = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(inplace=True), nn.Linear(16, 4))
    if options.way == "wrap":
        compiled = torch.compile(model, backend=options.backend)

        def compute_loss(x):
            return compiled(x).pow(2).mean()

    elif options.way == "inplace":
        model.compile(backend=options.backend)

        def compute_loss(x):
            return model(x).pow(2).mean()

    else:

        @torch.compile(backend=options.backend)
        def compute_loss(x):
            return model(x).pow(2).mean()

    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    generator = torch.Generator().manual_seed(1)
    for _ in range(3):
        x = torch.randn(4, 8, generator=generator)
        loss = compute_loss(x)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    digest = hashlib.sha256()
    for p in model.parameters():
        digest.update(p.detach().numpy().tobytes())
    print("job: digest %s" % digest.hexdigest()[:16], flush=True)


if __name__ == "__main__":
    main()
