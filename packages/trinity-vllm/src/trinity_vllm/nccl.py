"""NCCL weight sync between the trainer and vLLM engines (not implemented yet)."""


class NCCLSync:
    """Placeholder until NCCL sync lands."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError(
            "sync_method 'nccl' is registered by trinity-vllm but not implemented yet; "
            "use synchronizer.sync_method: memory or checkpoint for now"
        )
