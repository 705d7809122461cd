"""vllm.utils of the stand-in: a package only, for vllm.utils.nccl."""
