"""torch.version of the stand-in (see torch/__init__.py): a CUDA build, as the wrappers expect on NVIDIA machines."""

__version__ = "0.0.0+trainscope.stand.in"
cuda = "13.0"
hip = None
