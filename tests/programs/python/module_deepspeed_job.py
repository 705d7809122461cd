"""A small model trained by DeepSpeed (deepspeed.initialize, engine.backward, engine.step) in one process on the CPU,
whose scaled gradient overflows in one named module at batch --overflow-batch: DeepSpeed's own loss scaling finds the
inf/nan and skips that step. For the loss scalers of TRAINSCOPE_WATCH=modules,backward other than GradScaler
(tests/integration/module_frames_test.cc).

  module_deepspeed_job.py [--zero 1|2|3] [--bf16] [--steps N] [--overflow-batch B] [--digest]

fp16 (the default) is DeepSpeed's loss-scaled training: ZeRO stages 1 and 2 train through DeepSpeedZeroOptimizer, 3
through DeepSpeedZeroOptimizer_Stage3; the optimizer is torch's Adam, from the config. (ZeRO 0 is left out: DeepSpeed
0.19.8's engine.backward scales the loss only for a ZeRO optimizer.)
--bf16 trains in bfloat16 with ZeRO's check_grad_overflow, which skips a step on inf/nan without scaling. The forward
stays finite: before batch B's forward, head.proj's weight is multiplied so that its output is large but finite, and
the gradient it passes back is not: with the loss scale of DeepSpeed's fp16 (2**16), and in bf16 (no loss scale) with
the loss of that batch multiplied by 1e38, a loss that diverged.

DeepSpeed's CPU accelerator refuses fp16 where oneDNN has no fp16 kernels (most CPUs): here it is told it may, as a
stand-in for the GPU a real job trains on (the arithmetic is the same). The process group is a one-rank gloo group on
a free port, as torchrun would set it up, without the shared-memory all-reduce of DeepSpeed's for the CPU.
"""

import argparse
import contextlib
import hashlib
import os

from one_rank import torchrun_environment


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--zero", type=int, default=1, choices=(1, 2, 3))
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--overflow-batch", type=int, default=2)
    parser.add_argument("--digest", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    torchrun_environment()

    import deepspeed
    import torch
    from deepspeed.accelerator import get_accelerator

    from module_backward_job import Net  # the same small model: head.proj is where the gradient overflows

    if not args.bf16:
        get_accelerator().is_fp16_supported = lambda: True
    # The shared-memory all-reduce DeepSpeed compiles for CPU training at its first init_distributed (a C++ build of a
    # minute per CPython on two cores) is not built: one rank has nothing to reduce.
    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = Net()
    config = {
        "train_micro_batch_size_per_gpu": 4,
        "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "torch_adam": True}},
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": args.zero},
        "steps_per_print": 1000000,
    }
    if args.bf16:
        config["bf16"] = {"enabled": True, "check_grad_overflow": True}
    else:
        config["fp16"] = {"enabled": True, "initial_scale_power": 16, "loss_scale_window": 1000, "hysteresis": 2}
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    dtype = torch.bfloat16 if args.bf16 else torch.float16
    multiplier = 1e2 if args.bf16 else 1e3
    generator = torch.Generator().manual_seed(1)
    proj = engine.module.head.proj

    def digest():
        h = hashlib.sha256()
        parameters = list(engine.module.named_parameters())
        gathered = deepspeed.zero.GatheredParameters([p for _, p in parameters]) if args.zero == 3 else None
        with gathered or contextlib.nullcontext():
            for name, p in parameters:
                h.update(name.encode())
                h.update(p.detach().float().numpy().tobytes())
        return h.hexdigest()[:16]

    def scale_weight(factor):
        # ZeRO 3 keeps each rank's shard of a parameter between forwards: the whole one is gathered to change it.
        gathered = deepspeed.zero.GatheredParameters([proj.weight], modifier_rank=0) if args.zero == 3 else None
        with gathered or contextlib.nullcontext(), torch.no_grad():
            proj.weight.mul_(factor)

    for step in range(args.steps):
        if step == args.overflow_batch:
            scale_weight(multiplier)
        x = torch.randn(4, 8, generator=generator).to(dtype)
        loss = engine(x).float().mean()
        if args.bf16 and step == args.overflow_batch:
            loss = loss * 1e38  # unscaled, bf16's gradients overflow where its loss does
        engine.backward(loss)
        engine.step()
        if step == args.overflow_batch:
            scale_weight(1 / multiplier)
        if args.digest:
            print("step %d digest %s" % (step + 1, digest()), flush=True)
    print("done: %d steps, %d skipped" % (args.steps, getattr(engine, "skipped_steps", -1)), flush=True)
    deepspeed.comm.destroy_process_group()


if __name__ == "__main__":
    main()
