"""trainscope's module frames (TRAINSCOPE_WATCH=modules): put first on PYTHONPATH by libtrainscope.so at load.

Runs the job's own sitecustomize (the next one on sys.path, as ddtrace-run and opentelemetry-instrument do) and waits
for the job to import torch: the hooks (_trainscope_module_frames) are installed once torch's own import has ended.
trainscope never imports torch itself; a process that never imports it pays one string comparison per top-level
import, and nothing once torch is in.
"""

import os as _os
import sys as _sys


class _TorchImportWatcher:
    """A meta path finder that finds nothing itself: it wraps the loader of `torch` to install the hooks after it."""

    def __init__(self):
        self._busy = False

    def find_spec(self, name, path=None, target=None):
        if name != "torch" or self._busy:
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
        spec.loader = _LoaderThenHooks(spec.loader, self)
        return spec


class _LoaderThenHooks:
    def __init__(self, loader, watcher):
        self._loader = loader
        self._watcher = watcher

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)  # torch's import: its errors are the job's, raised as they are
        try:
            _sys.meta_path.remove(self._watcher)
        except ValueError:
            pass
        try:
            import _trainscope_module_frames

            _trainscope_module_frames.install(module)
        except Exception as error:  # never the reason a job fails
            _sys.stderr.write("[trainscope] warn: module frames could not be installed: %r\n" % (error,))

    def __getattr__(self, name):
        return getattr(self._loader, name)


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
    try:
        import _trainscope_module_frames

        _trainscope_module_frames.install(_sys.modules["torch"])
    except Exception as _error:
        _sys.stderr.write("[trainscope] warn: module frames could not be installed: %r\n" % (_error,))
else:
    _sys.meta_path.insert(0, _TorchImportWatcher())
_run_the_jobs_sitecustomize()
