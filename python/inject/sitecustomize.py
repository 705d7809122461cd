"""trainscope's module frames (TRAINSCOPE_WATCH=modules): put first on PYTHONPATH by libtrainscope.so at load.

Runs the job's own sitecustomize (the next one on sys.path, as ddtrace-run and opentelemetry-instrument do) and waits
for the job to import torch: the hooks (_trainscope_module_frames) are installed once torch's own import has ended.
trainscope never imports torch itself; a process that never imports it pays one string comparison per top-level
import, and nothing once torch is in (but the same for torch._dynamo, until the job's first torch.compile imports
it: the hooks watch for it with the same _AfterImport).
"""

import os as _os
import sys as _sys


class _AfterImport:
    """A meta path finder that finds nothing itself: once the job's import of `name` has ended, `then(module)` runs,
    once. Here for torch; the hooks use it for torch._dynamo (this module is not importable by name: the job's own
    sitecustomize takes its place in sys.modules)."""

    def __init__(self, name, then):
        self._name = name
        self._then = then
        self._busy = False

    def find_spec(self, name, path=None, target=None):
        if name != self._name or self._busy:
            return None
        self._busy = True
        try:
            spec = None
            for finder in _sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
        finally:
            self._busy = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _LoaderThen(spec.loader, self)
        return spec

    def imported(self, module):
        try:
            _sys.meta_path.remove(self)
        except ValueError:
            pass
        self._then(module)


class _LoaderThen:
    def __init__(self, loader, watcher):
        self._loader = loader
        self._watcher = watcher

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)  # the job's import: its errors are the job's, raised as they are
        self._watcher.imported(module)

    def __getattr__(self, name):
        return getattr(self._loader, name)


def _install_hooks(torch):
    try:
        import _trainscope_module_frames

        _trainscope_module_frames.install(torch, _AfterImport)
    except Exception as error:  # never the reason a job fails
        _sys.stderr.write("[trainscope] warn: module frames could not be installed: %r\n" % (error,))


def _run_the_jobs_sitecustomize():
    here = _os.path.dirname(_os.path.abspath(__file__))
    import importlib.machinery
    import importlib.util

    path = [entry for entry in _sys.path if _os.path.abspath(entry or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    _sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)  # its errors are reported by site.py, as without trainscope


if "torch" in _sys.modules:  # imported by something that ran before us (a .pth file)
    _install_hooks(_sys.modules["torch"])
else:
    _sys.meta_path.insert(0, _AfterImport("torch", _install_hooks))
_run_the_jobs_sitecustomize()
