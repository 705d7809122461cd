"""A small transformers model built from a config (random weights, seeded; nothing downloaded) trained for a few steps
on the CPU, one of its weights made to overflow before the forward of batch --overflow-batch.

Run unmodified under TRAINSCOPE_WATCH=modules, or with --duo to attach transformers' DebugUnderflowOverflow (the seed's
own tool) to the same model: the frames of both are compared by tests/integration/module_frames_test.cc.

  module_overflow_job.py --model t5|gpt2 [--duo] [--steps N] [--overflow-batch B] [--trace-batches 1,2]
                         [--abort-after-batch N] [--scale S] [--digest] [--checkpointing reentrant|non-reentrant]
                         [--device cpu|cuda] [--dtype float32|float16|bfloat16] [--sync-check] [--timing]
                         [--size tiny|small] [--batch B] [--seq-len L] [--weight NAME]

--checkpointing: activation checkpointing (transformers' gradient_checkpointing_enable, torch.utils.checkpoint with
use_reentrant True or False): each block's forward runs again during the backward, alone.
--device, --dtype: where the model runs and in which type. In float16 the default weight times --scale is itself inf;
GPT-2's activations overflow first with --weight transformer.h.1.mlp.c_fc.weight --scale 3e5. --sync-check (CUDA): PyTorch raises on any operation that synchronises the
host with the GPU during each step's forward and backward. --timing: the median time of a step, from the third on.
--size small: GPT-2 small (124M parameters) instead of the 2-layer model, for the time per step.
"""

import argparse
import hashlib
import statistics
import sys
import time

import torch
import transformers


def build(model_name, size):
    if model_name == "t5":
        config = transformers.T5Config(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2,
                                       num_heads=4, decoder_start_token_id=0, pad_token_id=0, dropout_rate=0.0)
        model = transformers.T5ForConditionalGeneration(config)
        weight = "encoder.block.1.layer.1.DenseReluDense.wo.weight"
    elif model_name == "gpt2":
        if size == "small":  # GPT-2 small (124M parameters), for the GPU kit's time per step
            config = transformers.GPT2Config(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        else:
            config = transformers.GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=4,
                                             resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        model = transformers.GPT2LMHeadModel(config)
        weight = "transformer.h.1.mlp.c_proj.weight"
    else:
        sys.exit("module_overflow_job: --model is t5 or gpt2, not %r" % model_name)
    return model, weight


def digest(model):
    """The weights and gradients, bit for bit: the same with and without trainscope."""
    h = hashlib.sha256()
    for name, p in model.named_parameters():
        h.update(name.encode())
        h.update(p.detach().contiguous().view(torch.uint8).cpu().numpy().tobytes())
        if p.grad is not None:
            h.update(p.grad.contiguous().view(torch.uint8).cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="t5")
    parser.add_argument("--duo", action="store_true")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--overflow-batch", type=int, default=2)
    parser.add_argument("--scale", type=float, default=3e38)
    parser.add_argument("--weight", default=None, help="the weight scaled (the model's default one otherwise)")
    parser.add_argument("--trace-batches", default="")
    parser.add_argument("--abort-after-batch", type=int, default=None)
    parser.add_argument("--digest", action="store_true", help="print a digest of the weights and gradients each step")
    parser.add_argument("--checkpointing", choices=["reentrant", "non-reentrant"], default=None)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default="float32")
    parser.add_argument("--sync-check", action="store_true")
    parser.add_argument("--timing", action="store_true")
    parser.add_argument("--size", choices=["tiny", "small"], default="tiny", help="small: GPT-2 small (gpt2 only)")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq-len", type=int, default=8)
    args = parser.parse_args()
    if args.sync_check and args.device != "cuda":
        sys.exit("module_overflow_job: --sync-check needs --device cuda")

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model, weight_name = build(args.model, args.size)
    weight_name = args.weight or weight_name
    model.to(device=args.device, dtype=getattr(torch, args.dtype))
    model.train()
    if args.checkpointing:
        reentrant = args.checkpointing == "reentrant"
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    if args.duo:
        from transformers.debug_utils import DebugUnderflowOverflow

        traced = [int(b) for b in args.trace_batches.split(",") if b]
        DebugUnderflowOverflow(model, trace_batch_nums=traced, abort_after_batch_num=args.abort_after_batch)
    generator = torch.Generator().manual_seed(1)
    step_times = []
    for step in range(args.steps):
        if step == args.overflow_batch:
            with torch.no_grad():
                dict(model.named_parameters())[weight_name].mul_(args.scale)
        ids = torch.randint(1, 64, (args.batch, args.seq_len), generator=generator).to(args.device)
        started = time.perf_counter()
        if args.sync_check:
            torch.cuda.set_sync_debug_mode("error")
        try:
            loss = model(input_ids=ids, labels=ids).loss
        except ValueError as error:  # DUO stops the job at the inf, or after its batch
            print("job: stopped: %s" % error, flush=True)
            return 0
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if args.sync_check:
            torch.cuda.set_sync_debug_mode("default")
        if args.timing:
            if args.device == "cuda":
                torch.cuda.synchronize()
            step_times.append(time.perf_counter() - started)
        print("job: step %d loss %s" % (step, float(loss)), flush=True)
        if args.digest:
            print("job: digest %d %s" % (step, digest(model)), flush=True)
    if args.timing and len(step_times) > 2:
        print("job: median step %.3f ms over %d steps" % (1e3 * statistics.median(step_times[2:]), len(step_times) - 2),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
