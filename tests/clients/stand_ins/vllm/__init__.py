"""A stand-in for the vLLM package around its pynccl_wrapper.py, NOT vLLM: only the modules and names that file
imports (vllm.envs, vllm.logger, vllm.platforms, vllm.utils.nccl), so that the real wrapper runs unchanged."""
