"""torch.distributed of the stand-in (see torch/__init__.py): only ReduceOp, which the wrappers map to ncclRedOp_t."""


class ReduceOp:
    class RedOpType:
        def __init__(self, name):
            self.name = name

        def __repr__(self):
            return "ReduceOp." + self.name

    SUM = RedOpType("SUM")
    PRODUCT = RedOpType("PRODUCT")
    MIN = RedOpType("MIN")
    MAX = RedOpType("MAX")
    AVG = RedOpType("AVG")
