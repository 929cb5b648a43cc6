"""trinity-vllm: the vLLM rollout engine and NCCL weight sync for trinity."""
