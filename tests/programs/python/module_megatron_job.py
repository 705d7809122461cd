"""A small model trained in float16 by Megatron Core's own optimizer (Float16OptimizerWithFloat16Params with a
DynamicGradScaler, as megatron.core.optimizer.get_megatron_optimizer builds it for fp16) in one process on the CPU,
whose scaled gradient overflows in one named module at batch --overflow-batch: Megatron's loss scaling finds the
inf/nan and skips that step. For the loss scalers of TRAINSCOPE_WATCH=modules,backward other than GradScaler
(tests/integration/module_frames_test.cc).

  module_megatron_job.py [--chained | --layer-wise] [--steps N] [--overflow-batch B] [--digest]

--chained puts the model's parameters in two optimizers (body, head) under Megatron's ChainedOptimizer, as Megatron
does for parameter groups of their own (a mixture of experts' expert weights): the head's finds the inf, and the
chain skips both. --layer-wise chains them in a LayerWiseDistributedOptimizer, whose step() calls ChainedOptimizer's.

Megatron's optimizer keeps its loss scale and found-inf on the GPU, named "cuda" in its code: here a torch function
mode (CudaOnTheCpu) puts them on the CPU, as a stand-in for the GPU a real job trains on (the arithmetic is the same).
Everything else is Megatron's own code: the unscale and the check (torch._amp_foreach_non_finite_check_and_unscale_),
the all-reduce of the found-inf over a one-rank gloo group (as torchrun would set it up, on a free port), the grad
scaler's backoff and the step it skips.
"""

import argparse
import hashlib

from one_rank import torchrun_environment


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--chained", action="store_true")
    parser.add_argument("--layer-wise", action="store_true")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--overflow-batch", type=int, default=2)
    parser.add_argument("--digest", action="store_true")
    args = parser.parse_args()

    import warnings

    # Without Transformer Engine or Apex (a CPU machine), Megatron warns once per module that it uses its own
    # multi-tensor functions: that is what it runs here.
    warnings.filterwarnings("ignore", message="Transformer Engine and Apex are not installed")

    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state
    from megatron.core.optimizer.grad_scaler import DynamicGradScaler
    from megatron.core.optimizer.layer_wise_optimizer import LayerWiseDistributedOptimizer
    from megatron.core.optimizer.optimizer import ChainedOptimizer, Float16OptimizerWithFloat16Params
    from megatron.core.optimizer.optimizer_config import OptimizerConfig
    from megatron.core.process_groups_config import ProcessGroupCollection
    from torch.overrides import TorchFunctionMode

    from module_backward_job import Net  # the same small model: head.proj is where the gradient overflows

    class CudaOnTheCpu(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if str(kwargs.get("device", "")).startswith("cuda"):
                kwargs["device"] = "cpu"
            if func is torch.Tensor.type and len(args) == 1 and not kwargs:
                return func(*args).replace("torch.", "torch.cuda.", 1)  # Megatron accepts only CUDA parameters
            return func(*args, **kwargs)

    torchrun_environment()
    dist.init_process_group("gloo", rank=0, world_size=1)
    parallel_state.initialize_model_parallel()  # one rank: tensor and pipeline parallel sizes 1
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = Net().half()

    def fp16_optimizer(parameters):
        return Float16OptimizerWithFloat16Params(
            torch.optim.Adam(parameters, lr=1e-3),
            OptimizerConfig(fp16=True, lr=1e-3, clip_grad=1.0),
            DynamicGradScaler(initial_scale=2.0**16, min_scale=1.0, growth_factor=2.0, backoff_factor=0.5,
                              growth_interval=1000, hysteresis=2),
            None)

    with CudaOnTheCpu():
        if args.chained or args.layer_wise:
            optimizers = [fp16_optimizer(model.body.parameters()), fp16_optimizer(model.head.parameters())]
            if args.layer_wise:
                optimizer = LayerWiseDistributedOptimizer(optimizers, OptimizerConfig(fp16=True, lr=1e-3),
                                                          ProcessGroupCollection.use_mpu_process_groups())
            else:
                optimizer = ChainedOptimizer(optimizers)
        else:
            optimizer = fp16_optimizer(model.parameters())

    def digest():
        h = hashlib.sha256()
        for name, p in model.named_parameters():
            h.update(name.encode())
            h.update(p.detach().float().numpy().tobytes())
        return h.hexdigest()[:16]

    generator = torch.Generator().manual_seed(1)
    proj = model.head.proj
    skipped = 0
    for step in range(args.steps):
        if step == args.overflow_batch:
            with torch.no_grad():
                proj.weight.mul_(1e3)  # large but finite forward; its gradient times the loss scale is not
        x = torch.randn(4, 8, generator=generator).half()
        optimizer.zero_grad()
        loss = model(x).float().mean()
        with CudaOnTheCpu():
            (loss * optimizer.get_loss_scale()).backward()
            update_successful, _, _ = optimizer.step()
        skipped += not update_successful
        if step == args.overflow_batch:
            with torch.no_grad():
                proj.weight.mul_(1e-3)
        if args.digest:
            print("step %d digest %s" % (step + 1, digest()), flush=True)
    print("done: %d steps, %d skipped" % (args.steps, skipped), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
