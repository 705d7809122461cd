"""What TRAINSCOPE_WATCH=modules costs a training step (issue 21's figures, not a test): a small T5 trained on the CPU,
and the cost per frame and per tensor row of the module hooks' path, split into its Python and its native side.
tests/bench/module_step.sh runs every mode and prints the medians and ratios.

    module_step.py step [--duo] [--warmup N] [--steps M]
        The T5 loop (transformers' T5ForConditionalGeneration from a T5Config: 4 encoder + 4 decoder layers, d_model
        128, d_kv 32, d_ff 512, 4 heads, vocab 256, dropout 0; batch 8 x 64 random ids, seeded; SGD; one CPU thread).
        N warm-up steps, then M timed ones, each forward + backward + optimizer step. Run plain (unwatched), with
        --duo (transformers.debug_utils.DebugUnderflowOverflow attached), or under LD_PRELOAD=libtrainscope.so with
        TRAINSCOPE_WATCH=modules. Prints: step median_ms=... min_ms=...
    module_step.py python --hooks-dir BUILD/shim/trainscope-python
        Without trainscope. The Python side of the hooks: trainscope's own hooks (_trainscope_module_frames) on a
        deep nn.Sequential of Linear(4, 4), the library call replaced by a Python no-op, against the same chain with
        no hook (interleaved); the difference per frame and per row. Then the frames, rows and elements of one T5
        training step, counted by the same hooks.
    module_step.py native
        Under LD_PRELOAD=libtrainscope.so with TRAINSCOPE_WATCH=modules. The same chain with the real hooks (the whole
        path per frame), and the library's side alone: trainscope_module_frame called directly through ctypes with
        frames the hooks' own code packed (Linear(4, 4) on 1 x 4; Linear(128, 512) on 8 x 64 x 128), less the same
        ctypes call on an empty frame (the library returns at its first checks): the time inside the call.
"""

import argparse
import array
import ctypes
import statistics
import sys
import time

import torch

CHAIN_DEPTH = 256
CHAIN_WIDTH = 4


def t5_model():
    import transformers

    config = transformers.T5Config(vocab_size=256, d_model=128, d_kv=32, d_ff=512, num_layers=4, num_decoder_layers=4,
                                   num_heads=4, decoder_start_token_id=0, pad_token_id=0, dropout_rate=0.0)
    return transformers.T5ForConditionalGeneration(config)


def t5_batches(count):
    generator = torch.Generator().manual_seed(1)
    return [torch.randint(1, 256, (8, 64), generator=generator) for _ in range(count)]


def t5_step(model, optimizer, ids):
    loss = model(input_ids=ids, labels=ids).loss
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def run_steps(duo, warmup, steps):
    torch.manual_seed(0)
    model = t5_model()
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    if duo:
        from transformers.debug_utils import DebugUnderflowOverflow

        DebugUnderflowOverflow(model)
    batches = t5_batches(warmup + steps)
    times = []
    for i, ids in enumerate(batches):
        start = time.perf_counter_ns()
        t5_step(model, optimizer, ids)
        if i >= warmup:
            times.append((time.perf_counter_ns() - start) / 1e6)
    print("step median_ms=%.2f min_ms=%.2f steps=%d warmup=%d" % (statistics.median(times), min(times), steps, warmup))


# ---- the chain: many tiny modules, so that the hooks' cost per frame is most of a forward's --------------------------


def chain():
    torch.manual_seed(0)
    layers = [torch.nn.Linear(CHAIN_WIDTH, CHAIN_WIDTH) for _ in range(CHAIN_DEPTH)]
    return torch.nn.Sequential(*layers), torch.randn(1, CHAIN_WIDTH)


def forward_ns(model, x, reps=20):
    """Nanoseconds per forward of `model` on `x`: the median of 7 rounds of `reps` forwards (no autograd)."""
    with torch.no_grad():
        for _ in range(3):
            model(x)
        rounds = []
        for _ in range(7):
            start = time.perf_counter_ns()
            for _ in range(reps):
                model(x)
            rounds.append((time.perf_counter_ns() - start) / reps)
    return statistics.median(rounds)


class Counter:
    """A stand-in for trainscope_module_frame that counts frames, rows and tensor elements (reads the packed words)."""

    def __init__(self):
        self.frames = self.rows = self.elements = 0

    def __call__(self, name, kind, labels, labels_len, address, word_count):
        words = (ctypes.c_int64 * word_count).from_address(address)
        self.frames += 1
        self.rows += words[2]
        at = 3
        for _ in range(words[2]):
            if words[at] == 0:
                self.elements += words[at + 3]
            at += 7 + 2 * words[at + 4]
        return 0


def no_op_frame(name, kind, labels, labels_len, address, word_count):
    return 0


def every_module(name, kind):
    return 1


def python_side(hooks_dir):
    sys.path.insert(0, hooks_dir)
    import _trainscope_module_frames as frames

    model, x = chain()
    counter = Counter()
    counting = frames._Hooks(torch, counter, every_module)
    counting.register()
    with torch.no_grad():
        model(x)
    for handle in counting._handles:
        handle.remove()
    per_forward = counter.frames
    rows = counter.rows

    bare, hooked = [], []
    for _ in range(5):  # interleaved: bare, then the hooks with a no-op library call, then bare again ...
        bare.append(forward_ns(model, x))
        hooks = frames._Hooks(torch, no_op_frame, every_module)
        hooks.register()
        hooked.append(forward_ns(model, x))
        for handle in hooks._handles:
            handle.remove()
    bare_ns, hooked_ns = statistics.median(bare), statistics.median(hooked)
    print("chain bare_ns=%.0f hooked_noop_ns=%.0f frames=%d rows=%d python_per_frame_ns=%.0f python_per_row_ns=%.0f"
          % (bare_ns, hooked_ns, per_forward, rows, (hooked_ns - bare_ns) / per_forward, (hooked_ns - bare_ns) / rows))

    torch.manual_seed(0)
    model = t5_model()
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    counter = Counter()
    counting = frames._Hooks(torch, counter, every_module)
    counting.register()
    t5_step(model, optimizer, t5_batches(1)[0])
    for handle in counting._handles:
        handle.remove()
    print("t5 frames=%d rows=%d elements=%d" % (counter.frames, counter.rows, counter.elements))


# ---- the library's side ------------------------------------------------------------------------------------------


class Capture:
    """A stand-in for trainscope_module_frame that keeps a copy of the frame the hooks packed."""

    def __call__(self, name, kind, labels, labels_len, address, word_count):
        words = array.array("q", (ctypes.c_int64 * word_count).from_address(address))
        self.frame = (name, kind, labels, labels_len, words)
        return 0


def packed_frame(frames, module, x):
    """The frame trainscope's hooks make for one forward of `module` on `x` (not a root), as packed by their code."""
    capture = Capture()
    hooks = frames._Hooks(torch, capture, every_module)
    with torch.no_grad():
        output = module(x)
    hooks._frame(module, "layer", (x,), output, False, True)
    return capture.frame, output


def call_ns(function, frame, word_count, calls):
    name, kind, labels, labels_len, words = frame
    address = words.buffer_info()[0]
    rounds = []
    for _ in range(7):
        # The frame thread takes the frames off the watch board every 20 ms; a frame that finds the board full is
        # refused at once, before its statistics, and would time nothing. Each round starts with the board drained
        # (a pause outside the timed part) and adds fewer frames than the board holds.
        time.sleep(0.1)
        start = time.perf_counter_ns()
        for _ in range(calls):
            function(name, kind, labels, labels_len, address, word_count)
        rounds.append((time.perf_counter_ns() - start) / calls)
    return statistics.median(rounds)


def native_side():
    import _trainscope_module_frames as frames  # on PYTHONPATH: put there by libtrainscope.so

    model, x = chain()
    real_ns = forward_ns(model, x)
    print("chain watched_ns=%.0f" % real_ns)

    library = ctypes.CDLL(None)
    take_frame = library.trainscope_module_frame
    take_frame.restype = ctypes.c_int
    take_frame.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint64, ctypes.c_void_p,
                           ctypes.c_uint64]
    torch.manual_seed(0)
    small_module, small_x = torch.nn.Linear(4, 4), torch.randn(1, 4)
    large_module, large_x = torch.nn.Linear(128, 512), torch.randn(8, 64, 128)
    small, small_out = packed_frame(frames, small_module, small_x)
    large, large_out = packed_frame(frames, large_module, large_x)
    for frame in (small, large):
        result = take_frame(*frame[:4], frame[4].buffer_info()[0], len(frame[4]))
        if result != 0:
            sys.exit("module_step: trainscope_module_frame returned %d (run under LD_PRELOAD with "
                     "TRAINSCOPE_WATCH=modules)" % result)
    empty_ns = call_ns(take_frame, small, 0, 5000)  # word_count 0: returns at its first checks
    large_ns = call_ns(take_frame, large, len(large[4]), 100)
    small_ns = call_ns(take_frame, small, len(small[4]), 5000)
    small_elements = sum(t.numel() for t in (small_module.weight, small_module.bias, small_x, small_out))
    large_elements = sum(t.numel() for t in (large_module.weight, large_module.bias, large_x, large_out))
    print("native ctypes_call_ns=%.0f small_frame_ns=%.0f small_rows=4 small_elements=%d large_frame_ns=%.0f "
          "large_rows=4 large_elements=%d per_element_ns=%.4f"
          % (empty_ns, small_ns - empty_ns, small_elements, large_ns - empty_ns, large_elements,
             (large_ns - small_ns) / (large_elements - small_elements)))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("step", "python", "native"))
    parser.add_argument("--duo", action="store_true")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--hooks-dir")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.mode == "step":
        run_steps(args.duo, args.warmup, args.steps)
    elif args.mode == "python":
        if not args.hooks_dir:
            sys.exit("module_step: python mode needs --hooks-dir BUILD/shim/trainscope-python")
        python_side(args.hooks_dir)
    else:
        native_side()
    return 0


if __name__ == "__main__":
    sys.exit(main())
