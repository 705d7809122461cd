"""The module hooks of TRAINSCOPE_WATCH=modules, installed by trainscope's sitecustomize once the job imported torch.

Every torch.nn.Module forward becomes a frame in the format of transformers' DebugUnderflowOverflow (DUO): the header
names the module by its qualified name in its root's named_modules() and its class; the rows are its own parameters,
then its positional inputs, then its outputs, labelled as DUO labels them. A root is a module whose forward runs
while no other module's forward runs on the thread; while a root runs only modules of its tree make frames (DUO hooks
the tree it is given: a loss module created inside a forward is in no tree). The root's forward ends a batch.

Statistics are trainscope's, never torch's: each tensor goes to libtrainscope.so as its address, element count, type,
sizes, strides, device and stream, in one call per frame (shim/module_frame_abi.h). A host tensor is read there, a
CUDA tensor gets the statistics kernel on its current stream; nothing here synchronises, allocates a tensor or keeps
one. A hook never raises into the job: what goes wrong is said once and the hooks stand down.
"""

import array
import ctypes
import sys
import threading
import weakref

_VERSION = 1
_ROOT = 1
_TENSOR, _NONE, _NOT_A_TENSOR, _UNREADABLE = 0, 1, 2, 3


def _warn(text):
    sys.stderr.write("[trainscope] warn: module frames: %s\n" % text)


def install(torch):
    """Registers the global module hooks. Returns whether they were installed."""
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
    _Hooks(torch, take_frame, is_watched).register()
    return True


class _Running:
    __slots__ = ("module", "root", "names")

    def __init__(self, module, root, names):
        self.module = module
        self.root = root
        self.names = names


class _Hooks:
    def __init__(self, torch, take_frame, is_watched):
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
        compiler = getattr(torch, "compiler", None)
        self._is_compiling = getattr(compiler, "is_compiling", None) or (lambda: False)

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
        module = self._torch.nn.modules.module
        self._handles.append(module.register_module_forward_pre_hook(self._before))
        try:
            handle = module.register_module_forward_hook(self._after, always_call=True)
        except TypeError:  # torch < 2.0: no always_call (a forward that raises leaves the thread's stack; see _before)
            handle = module.register_module_forward_hook(self._after)
        self._handles.append(handle)

    def _stop(self, why):
        if self._stopped:
            return
        self._stopped = True
        for handle in self._handles:
            handle.remove()
        _warn(why + "; no more module frames in this process")

    # ---- which module, named how --------------------------------------------------------------------------------

    def _stack(self):
        stack = getattr(self._thread, "stack", None)
        if stack is None:
            stack = self._thread.stack = []
        return stack

    def _before(self, module, args):
        try:
            stack = self._stack()
            if stack:
                top = stack[-1]
                stack.append(_Running(module, top.root, top.names))
                return None
            names = self._names.get(module)
            if names is None:
                names = {m: name for name, m in module.named_modules()}
                self._names[module] = names
            stack.append(_Running(module, module, names))
        except Exception as error:
            self._stop("the forward pre-hook failed (%r)" % (error,))
        return None

    def _after(self, module, args, output):
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
            if self._is_compiling():
                if not self._warned_compiling:
                    self._warned_compiling = True
                    _warn("modules run by torch.compile'd code get no frame (their forwards are compiled)")
                return None
            watched = self._watched.get(module)
            if watched is None:
                watched = bool(self._is_watched(name.encode(), type(module).__name__.encode()))
                self._watched[module] = watched
            if watched or module is running.root:
                self._frame(module, name, args, output, module is running.root, watched)
        except Exception as error:
            self._stop("the forward hook failed (%r)" % (error,))
        return None

    # ---- the frame ----------------------------------------------------------------------------------------------

    def _frame(self, module, name, args, output, root, watched):
        words = array.array("q", (_VERSION, _ROOT if root else 0, 0))
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
                for i, value in enumerate(output):
                    if isinstance(value, tuple):
                        for j, inner in enumerate(value):
                            self._row(words, labels, inner, "output[%d][%d]" % (i, j))
                    else:
                        self._row(words, labels, value, "output[%d]" % i)
            else:
                self._row(words, labels, output, "output")
        words[2] = len(labels)
        packed = b"\0".join(labels) + b"\0" if labels else b""
        address = words.buffer_info()[0]
        result = self._take_frame(name.encode(), type(module).__name__.encode(), packed, len(packed), address,
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
