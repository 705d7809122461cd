"""The environment torchrun gives a job of one rank (RANK, WORLD_SIZE, MASTER_ADDR, a free MASTER_PORT), for the
one-process jobs of frameworks that read it to set up their process group (module_deepspeed_job.py,
module_megatron_job.py). A variable already set is kept."""

import os
import socket


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_environment():
    for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_WORLD_SIZE", "1"),
                       ("MASTER_ADDR", "127.0.0.1")):
        os.environ.setdefault(key, value)
    os.environ.setdefault("MASTER_PORT", str(free_port()))
