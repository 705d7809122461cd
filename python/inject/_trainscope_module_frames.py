"""The module hooks of TRAINSCOPE_WATCH=modules, installed by trainscope's sitecustomize once the job imported torch.

Every torch.nn.Module forward becomes a frame in the format of transformers' DebugUnderflowOverflow (DUO): the header
names the module by its qualified name in its root's named_modules() and its class; the rows are its own parameters,
then its positional inputs, then its outputs, labelled as DUO labels them. A root is a module whose forward runs
while no other module's forward runs on the thread; while a root runs only modules of its tree make frames (DUO hooks
the tree it is given: a loss module created inside a forward is in no tree). The model's forward (the root with the
largest tree) ends a batch; a module of its tree run alone (activation checkpointing's recompute) keeps its name in
it.

Statistics are trainscope's, never torch's: each tensor goes to libtrainscope.so as its address, element count, type,
sizes, strides, device and stream, in one call per frame (shim/module_frame_abi.h). A host tensor is read there, a
CUDA tensor gets the statistics kernel on its current stream; nothing here synchronises, and a frame allocates no
tensor and keeps none (only a fused optimizer's found-inf is copied back, 4 bytes a step: _FoundInfLater). A hook
never raises into the job: what goes wrong is said once and the hooks stand down.

With TRAINSCOPE_WATCH=modules,backward a watched module's gradients are a frame of their own, after its backward:
grad_output[i] (the gradient of the loss by its outputs), then grad_input[i] (by its positional inputs that require
grad: the input tensor's whole gradient, every use of it summed, as its .grad would be). The gradients are seen by
gradient hooks on those tensors (register_multi_grad_hook), which add no node to the autograd graph: the backward
runs the same operations in the same order, so every gradient and weight is the same bit for bit. (PyTorch's full
backward hooks are not used: they wrap the inputs in a custom autograd Function, and a module that modifies its input
in place, ReLU(inplace=True), then fails; views of the inputs would change the order in which a tensor's gradients
are summed.) AMP's GradScaler skipping a step is told to the library, so that the inf/nan it skipped is not called a
failure: the step GradScaler itself skips, and the one a fused optimizer (Adam(fused=True)) skips given GradScaler's
found-inf tensor, which is read without waiting on the GPU (_FoundInfLater); and so is the step DeepSpeed's own loss
scaling skips (_DEEPSPEED_SKIPPING_OPTIMIZERS), and Megatron's (_MEGATRON_OPTIMIZER_MODULES). An enabled loss scaler
is told when it is made:
TRAINSCOPE_ON_NONFINITE=abort then stops only on an inf/nan whose step was not skipped.
"""

import array
import atexit
import ctypes
import os
import sys
import threading
import warnings
import weakref

_VERSION = 1
_ROOT, _BACKWARD, _STEP_SKIPPED, _LOSS_SCALER, _BESIDE, _STEP_APPLIED = 1, 2, 4, 8, 16, 32
_TENSOR, _NONE, _NOT_A_TENSOR, _UNREADABLE = 0, 1, 2, 3
# Where a fused optimizer's found-inf is read at once (host memory) and where it is copied back first (_FoundInfLater).
# Another device's (XPU, MPS) is not read: its skips are not told.
_READ_NOW, _READ_LATER = ("cpu",), ("cuda",)
# DeepSpeed's optimizers that check the gradients for inf/nan and skip the step where they find it, by the module
# that defines each, with when one of them does (FP16_Optimizer: where it scales the loss, float16; ZeRO 1 and 2: fp16,
# or bf16 with "check_grad_overflow"; ZeRO 3: fp16). Each tells its verdict to its own _update_scale(overflow) before
# it steps or returns: that is where the hooks hear it (so from DeepSpeed 0.6 to 0.19; before 0.6, ZeRO's classes had
# other names, and their skips are not told).
_DEEPSPEED_SKIPPING_OPTIMIZERS = (
    ("deepspeed.runtime.fp16.fused_optimizer", "FP16_Optimizer",
     lambda optimizer, torch: getattr(getattr(optimizer, "loss_scale_config", None), "use_grad_scaling", True)),
    ("deepspeed.runtime.fp16.unfused_optimizer", "FP16_UnfusedOptimizer",
     lambda optimizer, torch: getattr(getattr(optimizer, "loss_scale_config", None), "use_grad_scaling", True)),
    ("deepspeed.runtime.zero.stage_1_and_2", "DeepSpeedZeroOptimizer",
     lambda optimizer, torch: getattr(optimizer, "check_grad_overflow", True)),
    ("deepspeed.runtime.zero.stage3", "DeepSpeedZeroOptimizer_Stage3",
     lambda optimizer, torch: getattr(optimizer, "dtype", torch.float16) == torch.float16),
)

# Megatron's optimizers (Megatron Core, and Megatron-LM's own before it moved them there), by the modules that define
# them. With fp16 (or a bf16 loss scale) MixedPrecisionOptimizer holds a grad_scaler: its step() unscales, checks the
# gradients for inf/nan across the model-parallel ranks, and returns (False, None, None) without updating when it
# finds any; a ChainedOptimizer (several parameter groups) skips them all when one finds any. Every class of these
# modules that defines step() is wrapped: the outermost step() of a thread is the training loop's, whose verdict is
# told (a subclass's step() calls its base's, LayerWiseDistributedOptimizer's calls ChainedOptimizer's).
_MEGATRON_OPTIMIZER_MODULES = (
    "megatron.core.optimizer.optimizer", "megatron.core.optimizer.distrib_optimizer",
    "megatron.core.optimizer.layer_wise_optimizer", "megatron.optimizer.optimizer",
    "megatron.optimizer.distrib_optimizer",
)


def _no_module():
    return None


def _warn(text):
    sys.stderr.write("[trainscope] warn: module frames: %s\n" % text)


def _class_name(module):
    """The class a header names. torch.compile(model)'s wrapper is named by the model's class, marked compiled: its
    frame is the model's forward as a whole (what it calls runs compiled, without frames)."""
    kind = type(module).__name__
    if kind == "OptimizedModule":
        original = getattr(module, "_orig_mod", None)
        if original is not None:
            return type(original).__name__ + " (compiled)"
    return kind


def install(torch, after_import=None):
    """Registers the global module hooks. Returns whether they were installed. after_import(name, then): sitecustomize's
    meta path finder, with which the hooks wait for the job's import of torch._dynamo (its first torch.compile)."""
    try:
        library = ctypes.CDLL(None)  # the process's global scope, where the preloaded libtrainscope.so is
        take_frame = library.trainscope_module_frame
        is_watched = library.trainscope_module_watched
    except (OSError, AttributeError):
        return False  # PYTHONPATH was inherited by a process without the library: nothing to do
    take_frame.restype = ctypes.c_int
    take_frame.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint64, ctypes.c_void_p,
                           ctypes.c_uint64]
    is_watched.restype = ctypes.c_int
    is_watched.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    backward = getattr(library, "trainscope_module_backward", None)
    if backward is not None:
        backward.restype = ctypes.c_int
        backward.argtypes = []
    _Hooks(torch, take_frame, is_watched, backward is not None and backward() == 1, after_import).register()
    return True


class _Running:
    __slots__ = ("module", "root", "names", "gradients")

    def __init__(self, module, root, names):
        self.module = module
        self.root = root
        self.names = names
        self.gradients = None  # backward: this forward's _Gradients


class _Gradients:
    """One forward's gradients, gathered for its backward frame."""

    __slots__ = ("name", "kind", "outputs", "output_grads", "inputs")

    def __init__(self, name, kind, inputs):
        self.name = name
        self.kind = kind
        self.outputs = []  # labels of the outputs that require grad, in order (set after the forward)
        self.output_grads = None
        self.inputs = inputs  # labels of the inputs that require grad, in order


class _FoundInfLater:
    """GradScaler's found-inf tensors on CUDA devices, copied to pinned host memory behind the step that used them
    (the copy is queued on each device's current stream, after the kernels that wrote them), with an event to tell
    when the copy is done. Nothing waits on them: ready() is a query."""

    def __init__(self, torch, tensors, scaler_name, batches_begun):
        self.scaler_name = scaler_name
        self.batches_begun = batches_begun
        self._copies = []
        for tensor in tensors:
            with torch.cuda.device(tensor.device):
                copy = tensor.detach().to("cpu", non_blocking=True)
                event = torch.cuda.Event()
                event.record()
            self._copies.append((copy, event))

    def ready(self):
        return all(event.query() for _, event in self._copies)

    def found(self):
        return sum(float(copy) for copy, _ in self._copies) != 0


class _Hooks:
    def __init__(self, torch, take_frame, is_watched, backward=False, after_import=None):
        self._torch = torch
        self._take_frame = take_frame
        self._is_watched = is_watched
        self._tensor = torch.Tensor
        self._strided = torch.strided
        self._dtypes = self._dtype_codes(torch)
        self._thread = threading.local()
        self._names = weakref.WeakKeyDictionary()  # root -> {module: qualified name}
        self._watched = weakref.WeakKeyDictionary()  # module -> bool (modules:REGEX)
        self._handles = []
        self._stopped = False
        self._warned_compiling = False
        self._compiles_watched = False  # torch.compile's compilations are told to _compile_started
        self._after_import = after_import
        compiler = getattr(torch, "compiler", None)
        self._is_compiling = getattr(compiler, "is_compiling", None) or (lambda: False)
        graph = getattr(getattr(torch, "autograd", None), "graph", None)
        self._multi_grad_hook = getattr(graph, "register_multi_grad_hook", None)
        self._backward = backward
        if backward and self._multi_grad_hook is None:
            self._backward = False
            _warn("TRAINSCOPE_WATCH=...,backward needs torch.autograd.graph.register_multi_grad_hook (PyTorch 2.0 "
                  "or later); this PyTorch %s gets forward frames only" % getattr(torch, "__version__", "?"))
        self._scaler_patched = []  # (GradScaler, attribute, its own function) for each one wrapped
        # The engine's module batches, as it counts them (shim/engine/engine_frame_feed.cc): a forward frame after a
        # root's begins the next. A found-inf read late says how many batches ago its step was.
        self._batches_begun = 0
        self._after_root = False
        self._found_inf_later = []  # _FoundInfLater, oldest first
        self._exit_check_registered = False
        self._read_fused_found_inf = True
        self._told_loss_scaler = False
        self._deferred = []  # backward frames waiting for the other hooks of their gradient (_defer)
        self._deferred_lock = threading.Lock()
        self._flush_queued = False
        # The root whose forward ends a batch is the one with the largest tree seen: the model, not a loss module
        # called beside it (DUO counts the batches of the model it is given).
        self._batch_root_size = 0
        self._batch_root = _no_module  # weakref.ref of that root once it has run

    @staticmethod
    def _dtype_codes(torch):
        codes = {}
        for name, code in (("float64", 0), ("float32", 1), ("float16", 2), ("bfloat16", 3), ("float8_e4m3fn", 4),
                           ("float8_e5m2", 5), ("int8", 6), ("uint8", 7), ("int32", 8), ("uint32", 9),
                           ("int64", 10), ("uint64", 11), ("bool", 7)):  # a bool is one byte, 0 or 1
            dtype = getattr(torch, name, None)
            if dtype is not None:
                codes[dtype] = code
        return codes

    def register(self):
        # torch.compile(model) warns that global hooks fire for its wrapper too: that is ours, and said by our own
        # warning once; a job that turns warnings into errors must not fail for it.
        warnings.filterwarnings("ignore", message=r"Using `torch\.compile\(module\)` when there are global hooks",
                                category=UserWarning)
        module = self._torch.nn.modules.module
        self._handles.append(module.register_module_forward_pre_hook(self._before))
        try:
            handle = module.register_module_forward_hook(self._after, always_call=True)
        except TypeError:  # torch < 2.0: no always_call (a forward that raises leaves the thread's stack; see _before)
            handle = module.register_module_forward_hook(self._after)
        self._handles.append(handle)
        self._watch_loss_scaler()
        self._watch_deepspeed()
        self._watch_megatron()
        self._watch_compiles()

    def _stop(self, why):
        if self._stopped:
            return
        self._stopped = True
        for handle in self._handles:
            handle.remove()
        for scaler, attribute, original in self._scaler_patched:
            setattr(scaler, attribute, original)
        self._scaler_patched = []
        _warn(why + "; no more module frames in this process")

    # ---- torch.compile -------------------------------------------------------------------------------------------

    def _watch_compiles(self):
        """Whatever torch.compile compiles runs without frames (the hooks do nothing in what dynamo traces): the job is
        told once, at its first compilation, whichever way it compiles (torch.compile(model), model.compile(), a
        compiled training step). Dynamo is imported by the job's first torch.compile, never by us: the start callback
        is registered then."""
        if "torch._dynamo" in sys.modules:
            self._register_compile_callback(sys.modules["torch._dynamo"])
        elif self._after_import is not None:
            sys.meta_path.insert(0, self._after_import("torch._dynamo", self._register_compile_callback))

    def _register_compile_callback(self, dynamo):
        try:
            handler = getattr(getattr(dynamo, "callback", None), "callback_handler", None)
            register = getattr(handler, "register_start_callback", None)
            if register is None:
                return  # an older PyTorch, without compile callbacks: the wrapper of torch.compile(model) tells it
            register(self._compile_started)
            self._compiles_watched = True
        except Exception:
            pass  # only the warning is lost

    def _compile_started(self, *args):
        # Runs inside dynamo's compilation: nothing may raise into it.
        try:
            if self._warned_compiling or self._stopped:
                return
            self._warned_compiling = True
            self._warn_compiled(self._what_compiles())
        except Exception:
            pass

    @staticmethod
    def _what_compiles():
        """What dynamo is about to compile, from its _compile frame: a module's forward (torch.compile(model) and
        model.compile() compile a wrapper of torch's that holds the module, or its bound method, in its closure;
        torch.compile(model.forward) compiles the forward itself), else the function and where it is defined."""
        frame = sys._getframe(1)
        for _ in range(64):
            if frame is None or frame.f_code.co_name == "_compile":
                break
            frame = frame.f_back
        found = frame.f_locals if frame is not None else {}
        code = found.get("code")
        if code is None or not hasattr(code, "co_filename"):
            return "part of this job"
        candidates = []
        if code.co_name == "forward":
            candidates.append(getattr(found.get("locals"), "get", lambda _: None)("self"))
        elif "%storch%s" % (os.sep, os.sep) in code.co_filename:
            for cell in found.get("closure") or ():
                try:
                    candidates.append(cell.cell_contents)
                except ValueError:  # an empty cell
                    pass
        for candidate in candidates:
            owner = getattr(candidate, "__self__", candidate)  # a module's bound method: the module
            if hasattr(owner, "named_modules") and hasattr(owner, "forward"):
                return "%s's forward" % type(owner).__name__
        return "%s (%s:%d)" % (code.co_name, os.path.basename(code.co_filename), code.co_firstlineno)

    @staticmethod
    def _warn_compiled(what):
        _warn("torch.compile compiles %s: the modules that run in compiled code get no frame, the modules run eagerly "
              "do (TORCHDYNAMO_DISABLE=1 runs the job uncompiled, every module with its frame)" % what)

    def _watch_loss_scaler(self):
        """AMP's GradScaler skips optimizer.step() when the unscaled gradients hold inf/nan (what loss scaling is
        for): the library is told, so that the summary says the step was skipped. The check is GradScaler's own, on
        the values it has just synchronised for the same check; the result and the step are GradScaler's. A fused
        optimizer (_step_supports_amp_scaling: Adam, AdamW, SGD, Adagrad with fused=True) is given GradScaler's
        found-inf tensor and skips its update itself, with no synchronisation: that found-inf is read when it is
        ready (_found_inf_of_fused_step)."""
        scaler = getattr(getattr(getattr(self._torch, "amp", None), "grad_scaler", None), "GradScaler", None)
        original = scaler.__dict__.get("_maybe_opt_step") if scaler is not None else None
        original_step = scaler.__dict__.get("step") if scaler is not None else None
        original_init = scaler.__dict__.get("__init__") if scaler is not None else None
        if not all(callable(f) for f in (original, original_step, original_init)):
            return  # another PyTorch: no step is told skipped (the frames are the same)
        hooks = self

        def __init__(scaler_self, *args, **kwargs):
            original_init(scaler_self, *args, **kwargs)
            if getattr(scaler_self, "_enabled", False):
                hooks._loss_scaler_made(type(scaler_self).__name__)

        def _maybe_opt_step(scaler_self, optimizer, optimizer_state, *args, **kwargs):
            try:
                found = sum(v.item() for v in optimizer_state["found_inf_per_device"].values())
            except Exception:
                found = None  # unreadable here: GradScaler decides alone, and nothing is told
            result = original(scaler_self, optimizer, optimizer_state, *args, **kwargs)
            if found is not None:
                hooks._step_taken(type(scaler_self).__name__, bool(found))
            return result

        def step(scaler_self, optimizer, *args, **kwargs):
            fused = getattr(scaler_self, "_enabled", False) and getattr(optimizer, "_step_supports_amp_scaling", False)
            result = original_step(scaler_self, optimizer, *args, **kwargs)
            if fused and hooks._read_fused_found_inf:
                hooks._found_inf_of_fused_step(scaler_self, optimizer)
            return result

        for attribute, wrapper, wrapped in (("_maybe_opt_step", _maybe_opt_step, original),
                                            ("step", step, original_step), ("__init__", __init__, original_init)):
            self._patch(scaler, attribute, wrapper, wrapped)

    def _patch(self, owner, attribute, wrapper, wrapped):
        wrapper.__wrapped__ = wrapped
        wrapper.__doc__ = getattr(wrapped, "__doc__", None)
        wrapper.__name__ = wrapped.__name__
        wrapper.__qualname__ = getattr(wrapped, "__qualname__", wrapped.__name__)
        setattr(owner, attribute, wrapper)
        self._scaler_patched.append((owner, attribute, wrapped))

    def _watch_deepspeed(self):
        """DeepSpeed's loss scaling (fp16, ZeRO) skips the step on inf/nan gradients by its own check, not GradScaler's:
        each of its optimizers that does is wrapped once the job imports the module that defines it (never imported
        by us), told when made and at every step as GradScaler is."""
        for module_name, class_name, checks_overflow in _DEEPSPEED_SKIPPING_OPTIMIZERS:
            def then(module, class_name=class_name, checks_overflow=checks_overflow):
                self._watch_deepspeed_optimizer(module, class_name, checks_overflow)

            if module_name in sys.modules:
                then(sys.modules[module_name])
            elif self._after_import is not None:
                sys.meta_path.insert(0, self._after_import(module_name, then))

    def _watch_deepspeed_optimizer(self, module, class_name, checks_overflow):
        # Runs at the end of the job's import of DeepSpeed's module: nothing may raise into that import.
        try:
            if not self._stopped:
                self._wrap_deepspeed_optimizer(module, class_name, checks_overflow)
        except Exception as error:
            _warn("watching DeepSpeed's %s failed (%r); the steps it skips are not told" % (class_name, error))

    def _wrap_deepspeed_optimizer(self, module, class_name, checks_overflow):
        optimizer_class = getattr(module, class_name, None)
        original_init = getattr(optimizer_class, "__dict__", {}).get("__init__")
        original_update = getattr(optimizer_class, "__dict__", {}).get("_update_scale")
        if not (callable(original_init) and callable(original_update)):
            return  # another DeepSpeed: its skipped steps are not told (the frames are the same)
        hooks = self
        torch = self._torch

        def __init__(optimizer, *args, **kwargs):
            original_init(optimizer, *args, **kwargs)
            try:
                skips = bool(checks_overflow(optimizer, torch))
            except Exception:
                skips = False
            if skips:
                hooks._loss_scaler_made(class_name)

        def _update_scale(optimizer, *args, **kwargs):
            # _update_scale(overflow): ZeRO names it has_overflow, FP16_Optimizer skip; True: the step is skipped.
            overflow = args[0] if args else next(iter(kwargs.values()), False)
            result = original_update(optimizer, *args, **kwargs)
            try:
                skipped = bool(overflow)
            except Exception:
                return result  # unreadable here: DeepSpeed decides alone, and nothing is told
            hooks._step_taken(class_name, skipped)
            return result

        self._patch(optimizer_class, "__init__", __init__, original_init)
        self._patch(optimizer_class, "_update_scale", _update_scale, original_update)

    def _watch_megatron(self):
        """Megatron's loss scaling skips the step on inf/nan gradients by its own check (_MEGATRON_OPTIMIZER_MODULES):
        its optimizers are wrapped once the job imports the modules that define them (never imported by us), told
        when one with a loss scale is made and at every step from then on."""
        for module_name in _MEGATRON_OPTIMIZER_MODULES:
            if module_name in sys.modules:
                self._watch_megatron_module(sys.modules[module_name])
            elif self._after_import is not None:
                sys.meta_path.insert(0, self._after_import(module_name, self._watch_megatron_module))

    def _watch_megatron_module(self, module):
        # Runs at the end of the job's import of Megatron's module: nothing may raise into that import.
        try:
            if not self._stopped:
                self._wrap_megatron_optimizers(module)
        except Exception as error:
            _warn("watching Megatron's optimizers in %s failed (%r); the steps they skip are not told"
                  % (getattr(module, "__name__", "?"), error))

    def _wrap_megatron_optimizers(self, module):
        for optimizer_class in list(vars(module).values()):
            if not (isinstance(optimizer_class, type) and optimizer_class.__module__ == module.__name__ and
                    any(base.__name__ == "MegatronOptimizer" for base in optimizer_class.__mro__[1:])):
                continue  # imported from elsewhere (wrapped there), or not an optimizer
            original_init = optimizer_class.__dict__.get("__init__")
            if optimizer_class.__name__ == "MixedPrecisionOptimizer" and callable(original_init):
                self._patch(optimizer_class, "__init__", self._megatron_init(original_init), original_init)
            original_step = optimizer_class.__dict__.get("step")
            if callable(original_step):
                self._patch(optimizer_class, "step", self._megatron_step(original_step), original_step)

    def _megatron_init(self, original_init):
        hooks = self

        def __init__(optimizer, *args, **kwargs):
            original_init(optimizer, *args, **kwargs)
            try:
                scales = bool(getattr(optimizer, "grad_scaler", None))  # None: bf16 without a loss scale skips nothing
            except Exception:
                return  # another Megatron: nothing is told, and the job's optimizer is made as without us
            if scales:
                hooks._loss_scaler_made(type(optimizer).__name__)

        return __init__

    def _megatron_step(self, original_step):
        hooks = self

        def step(optimizer, *args, **kwargs):
            depth = getattr(hooks._thread, "megatron_steps", 0)
            hooks._thread.megatron_steps = depth + 1
            try:
                result = original_step(optimizer, *args, **kwargs)
            finally:
                hooks._thread.megatron_steps = depth
            if depth == 0 and hooks._told_loss_scaler:  # without a loss scaler no step is held for its verdict
                try:
                    skipped = not result[0]  # (update_successful, grad_norm, num_zeros_in_grad)
                except Exception:
                    return result  # another Megatron: it decides alone, and nothing is told
                hooks._step_taken(type(optimizer).__name__, skipped)
            return result

        return step

    def _found_inf_of_fused_step(self, scaler, optimizer):
        """After a fused optimizer's step under GradScaler: GradScaler's found-inf of that optimizer (nonzero: the
        optimizer skipped its update). On the CPU it is read now; a CUDA one is copied to the host behind the step and
        read once the copy is done, at a later batch's start, never waiting for it (_check_found_inf_later)."""
        try:
            state = getattr(scaler, "_per_optimizer_states", {}).get(id(optimizer))
            found = list(state["found_inf_per_device"].values()) if state else []
            host = [t for t in found if t.device.type in _READ_NOW]
            device = [t for t in found if t.device.type in _READ_LATER]
            host_found = bool(sum(t.item() for t in host))
            if host_found or (host and not device):
                self._step_taken(type(scaler).__name__, host_found)
            elif device:
                self._found_inf_later.append(_FoundInfLater(self._torch, device, type(scaler).__name__,
                                                            self._batches_begun))
                del self._found_inf_later[:-64]  # a GPU 64 batches behind: those skips are not told
                self._check_found_inf_at_exit()
        except Exception as error:
            self._found_inf_unreadable(error)

    def _found_inf_unreadable(self, error):
        # Only these skips are lost; the frames go on.
        self._found_inf_later = []
        self._read_fused_found_inf = False
        _warn("reading the loss scaler's found-inf after a fused optimizer's step failed (%r); the steps a fused "
              "optimizer skips are not told in this process" % (error,))

    def _check_found_inf_later(self):
        """The found-infs copied to the host whose copy is done are read, oldest first; a skip is told with how many
        batches ago its step was. Runs before the forward frame that begins a batch, and at exit."""
        try:
            while self._found_inf_later and self._found_inf_later[0].ready():
                later = self._found_inf_later.pop(0)
                self._step_taken(later.scaler_name, later.found(), self._batches_begun - later.batches_begun)
        except Exception as error:
            self._found_inf_unreadable(error)

    def _check_found_inf_at_exit(self):
        # At exit the last steps' found-infs are read if the GPU has made them (a query: exit never waits on it).
        if self._exit_check_registered:
            return
        self._exit_check_registered = True
        atexit.register(self._found_inf_at_exit)

    def _found_inf_at_exit(self):
        if not self._stopped:
            self._check_found_inf_later()  # raises nothing: exit goes on, at worst without the last skips

    def _loss_scaler_made(self, scaler_name):
        """An enabled loss scaler exists in this process, told once, before the gradients it scales: with
        TRAINSCOPE_ON_NONFINITE=abort the library then waits for a batch's step before stopping on its inf/nan."""
        if self._told_loss_scaler:
            return
        self._told_loss_scaler = True
        try:
            if not self._stopped:
                self._send(scaler_name, "loss scaler", array.array("q", (_VERSION, _LOSS_SCALER, 0)), [])
        except Exception as error:
            self._stop("telling a loss scaler failed (%r)" % (error,))

    def _step_taken(self, scaler_name, skipped, batches_ago=0):
        """The loss scaler's step: skipped (its gradients held inf/nan) or applied, batches_ago batches ago. Every step
        is told: under TRAINSCOPE_ON_NONFINITE=abort an applied one over a batch with inf/nan stops the job."""
        try:
            if self._stopped:
                return
            words = array.array("q", (_VERSION, _STEP_SKIPPED if skipped else _STEP_APPLIED, 0, batches_ago))
            self._send(scaler_name, "step skipped" if skipped else "step applied", words, [])
        except Exception as error:
            self._stop("telling a loss scaler's step failed (%r)" % (error,))

    # ---- which module, named how --------------------------------------------------------------------------------

    def _stack(self):
        stack = getattr(self._thread, "stack", None)
        if stack is None:
            stack = self._thread.stack = []
        return stack

    def _before(self, module, args):
        # torch.compile traces the global hooks into the graph it compiles: there the hooks do nothing (is_compiling()
        # is a constant True to the tracer, so the rest is never traced, and the compiled code holds nothing of ours).
        if self._is_compiling():
            return None
        try:
            stack = self._stack()
            if stack:
                top = stack[-1]
                running = _Running(module, top.root, top.names)
            else:
                running = self._new_root(module)
            stack.append(running)
            if self._backward:
                self._watch_inputs(running, args)
        except Exception as error:
            self._stop("the forward pre-hook failed (%r)" % (error,))
        return None

    def _new_root(self, module):
        """A module whose forward runs while no other module's does. One of the model's own modules run alone (the
        recomputed forward of activation checkpointing, during the backward and maybe on autograd's thread; or the
        job calling model.lm_head itself) keeps its name in the model: it is neither a root nor named from itself."""
        model = self._batch_root()
        if model is not None and model is not module:
            model_names = self._names.get(model)
            if model_names is not None and module in model_names:
                return _Running(module, model, model_names)
        names = self._names.get(module)
        if names is None:
            names = self._tree_names(module)
            self._names[module] = names
        return _Running(module, module, names)

    @staticmethod
    def _tree_names(root):
        """{module: qualified name} in the root's tree. torch.compile(model)'s wrapper holds the model as _orig_mod:
        its tree is named as the model's, so that what runs eagerly in it (after a graph break, or with
        TORCH_COMPILE_DISABLE=1) is named as without torch.compile."""
        original = getattr(root, "_orig_mod", None) if type(root).__name__ == "OptimizedModule" else None
        if original is None or not hasattr(original, "named_modules"):
            return {m: name for name, m in root.named_modules()}
        names = {m: name for name, m in original.named_modules()}
        names[root] = ""
        return names

    def _watched_name(self, module, names):
        """The module's qualified name when it gets frames (in the running root's tree, and watched), else None."""
        name = names.get(module)
        if name is None:
            return None
        watched = self._watched.get(module)
        if watched is None:
            watched = bool(self._is_watched(name.encode(), _class_name(module).encode()))
            self._watched[module] = watched
        return name if watched else None

    def _watch_inputs(self, running, args):
        """Backward frames: gradient hooks on the positional inputs that require grad, before the forward (a module
        that modifies its input in place changes the tensor's history; a hook registered before sees the gradient of
        the value the module was given)."""
        torch = self._torch
        if not isinstance(args, tuple) or not torch.is_grad_enabled():
            return
        module = running.module
        name = self._watched_name(module, running.names)
        if name is None:
            return
        inputs = [(i, value) for i, value in enumerate(args) if isinstance(value, self._tensor) and value.requires_grad]
        gradients = _Gradients(name, _class_name(module), ["grad_input[%d]" % i for i, _ in inputs])
        running.gradients = gradients
        if not inputs:
            return
        hooks = self

        def on_inputs(grads):
            try:
                hooks._flush_deferred(grads)
                hooks._defer(gradients, tuple(grads), grads)
            except Exception as error:
                hooks._stop("a gradient hook failed (%r)" % (error,))

        self._multi_grad_hook([value for _, value in inputs], on_inputs)

    def _after(self, module, args, output):
        if self._is_compiling():
            return None
        try:
            stack = self._stack()
            # A forward that raised (torch < 2.0, no always_call) left its entries above this module's: dropped here.
            while stack and stack[-1].module is not module:
                stack.pop()
            if not stack:
                return None
            running = stack.pop()
            if sys.exc_info()[0] is not None and output is None:
                return None  # the forward raised: always_call runs the hook, but there is no frame
            name = running.names.get(module)
            if name is None:
                return None  # not in the running root's tree (DUO never sees it)
            if not self._warned_compiling and type(module).__name__ == "OptimizedModule":
                self._compiled_wrapper_ran(module)
            watched = self._watched_name(module, running.names) is not None
            batch_root = module is running.root and len(running.names) >= self._batch_root_size
            if batch_root:
                self._batch_root_size = len(running.names)
                if self._batch_root() is not module:
                    self._batch_root = weakref.ref(module)
            # A smaller root's tree (a loss module called beside the model) runs within the batch in progress.
            beside = len(running.names) < self._batch_root_size
            if watched or batch_root:
                self._frame(module, name, args, output, batch_root, watched, beside)
            if running.gradients is not None:
                self._watch_outputs(running.gradients, output)
        except Exception as error:
            self._stop("the forward hook failed (%r)" % (error,))
        return None

    def _compiled_wrapper_ran(self, module):
        """torch.compile(model)'s wrapper ran. Without compile callbacks it is where the job is told that what was
        compiled made no frame; with them, it was told at the compilation if there was one (none with
        TORCH_COMPILE_DISABLE=1, where the wrapper runs the model eagerly)."""
        if self._compiles_watched:
            return
        config = sys.modules.get("torch._dynamo.config")
        if getattr(config, "disable", False):
            return
        self._warned_compiling = True
        self._warn_compiled("%s's forward" % type(getattr(module, "_orig_mod", module)).__name__)

    # ---- the backward frame -------------------------------------------------------------------------------------

    def _watch_outputs(self, gradients, output):
        outputs = [(label, t) for label, t in self._labelled(output, "grad_output")
                   if isinstance(t, self._tensor) and t.requires_grad]
        if not outputs:
            return  # nothing of this forward gets a gradient
        gradients.outputs = [label for label, _ in outputs]
        hooks = self

        def on_outputs(grads):
            try:
                gradients.output_grads = tuple(grads)
                hooks._flush_deferred(grads)
                if not gradients.inputs:
                    hooks._defer(gradients, (), grads)
            except Exception as error:
                hooks._stop("a gradient hook failed (%r)" % (error,))

        self._multi_grad_hook([t for _, t in outputs], on_outputs)

    # A tensor's gradient goes first to the hooks of the modules that made it in the forward (their grad_output), inner
    # modules first, then to those of the modules that took it as input (their grad_input), outer modules first: the
    # order the hooks were registered in. The frames are told in the order the backward made the gradient: the
    # modules that took it, inner first (the innermost one's backward made it), then the ones that receive it. So they
    # wait, grouped by gradient, until the hooks move on to another tensor's gradient or the backward ends; the first
    # frame holding an inf is then that of the module whose backward made it.
    @staticmethod
    def _first_tensor(grads):
        for grad in grads:
            if grad is not None:
                return grad
        return None

    def _defer(self, gradients, input_grads, grads):
        if self._stopped:
            return
        key = self._first_tensor(grads)
        with self._deferred_lock:
            self._deferred.append((gradients, input_grads, key))
            queue = not self._flush_queued
            self._flush_queued = True
        if queue:
            try:
                self._torch.autograd.Variable._execution_engine.queue_callback(self._flush_all_deferred)
            except Exception:
                self._flush_all_deferred()  # no end-of-backward callback here: told now rather than never

    def _tell(self, entries):
        start = 0
        while start < len(entries):  # by gradient, in the order they came
            end = start + 1
            while end < len(entries) and entries[end][2] is entries[start][2]:
                end += 1
            group = entries[start:end]
            taking = [entry for entry in group if entry[1]]
            receiving = [entry for entry in group if not entry[1]]
            for gradients, input_grads, _ in list(reversed(taking)) + receiving:
                self._backward_frame(gradients, input_grads)
            start = end

    def _flush_deferred(self, grads):
        key = self._first_tensor(grads)
        with self._deferred_lock:
            if not self._deferred:
                return
            ready = [entry for entry in self._deferred if entry[2] is not key]
            if not ready:
                return
            self._deferred = [entry for entry in self._deferred if entry[2] is key]
        self._tell(ready)

    def _flush_all_deferred(self):
        try:
            with self._deferred_lock:
                ready, self._deferred = self._deferred, []
                self._flush_queued = False
            self._tell(ready)
        except Exception as error:
            self._stop("a gradient hook failed (%r)" % (error,))

    @staticmethod
    def _labelled(value, label):
        """(label, item) for an output as DUO labels it: `output`, `output[i]`, `output[i][j]` for tuples of tuples."""
        if not isinstance(value, tuple):
            yield label, value
            return
        for i, item in enumerate(value):
            if isinstance(item, tuple):
                for j, inner in enumerate(item):
                    yield "%s[%d][%d]" % (label, i, j), inner
            else:
                yield "%s[%d]" % (label, i), item

    def _backward_frame(self, gradients, input_grads):
        if self._stopped or (not gradients.outputs and not gradients.inputs):
            return
        words = array.array("q", (_VERSION, _BACKWARD, 0))
        labels = []
        output_grads = gradients.output_grads or (None,) * len(gradients.outputs)
        for label, grad in zip(gradients.outputs, output_grads):
            self._row(words, labels, grad, label)
        for label, grad in zip(gradients.inputs, input_grads):
            self._row(words, labels, grad, label)
        gradients.output_grads = None  # the frame is taken: the gradients are the job's again
        self._send(gradients.name, gradients.kind, words, labels)

    # ---- the frame ----------------------------------------------------------------------------------------------

    def _frame(self, module, name, args, output, root, watched, beside=False):
        if not beside:
            if self._after_root:  # this frame begins the engine's next batch
                if self._found_inf_later:
                    self._check_found_inf_later()
                self._batches_begun += 1
            self._after_root = root
        words = array.array("q", (_VERSION, _ROOT if root else _BESIDE if beside else 0, 0))
        labels = []
        if watched:
            seen = set()
            for label, parameter in module._parameters.items():  # named_parameters(recurse=False), as DUO lists
                if parameter is None or id(parameter) in seen:
                    continue
                seen.add(id(parameter))
                self._row(words, labels, parameter, label)
            if isinstance(args, tuple):
                for i, value in enumerate(args):
                    self._row(words, labels, value, "input[%d]" % i)
            else:
                self._row(words, labels, args, "input")
            if isinstance(output, tuple):
                for label, value in self._labelled(output, "output"):
                    self._row(words, labels, value, label)
            else:  # the common case, without a generator on every frame
                self._row(words, labels, output, "output")
        self._send(name, _class_name(module), words, labels)

    def _send(self, name, kind, words, labels):
        """One frame (or event) to the library: words[0:3] are the version, the flags and the row count, set here."""
        words[2] = len(labels)
        packed = b"\0".join(labels) + b"\0" if labels else b""
        result = self._take_frame(name.encode(), kind.encode(), packed, len(packed), words.buffer_info()[0],
                                  len(words))
        if result < 0:
            self._stop("the library refused a frame (%d)" % result)

    def _row(self, words, labels, value, label):
        labels.append(label.encode())
        if value is None:
            words.extend((_NONE, -1, 0, 0, 0, -1, 0))
            return
        if not isinstance(value, self._tensor):
            words.extend((_NOT_A_TENSOR, -1, 0, 0, 0, -1, 0))
            return
        code = self._dtypes.get(value.dtype)
        device = value.device
        if code is None or value.layout is not self._strided or device.type not in ("cpu", "cuda"):
            words.extend((_UNREADABLE, -1, 0, 0, 0, -1, 0))
            return
        stream = 0
        index = -1
        if device.type == "cuda":
            index = device.index if device.index is not None else self._torch.cuda.current_device()
            stream = self._torch.cuda.current_stream(index).cuda_stream
        sizes = value.shape
        words.extend((_TENSOR, code, value.data_ptr(), value.numel(), len(sizes), index, stream))
        words.extend(sizes)
        words.extend(value.stride())
