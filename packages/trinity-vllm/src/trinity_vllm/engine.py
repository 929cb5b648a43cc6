"""The vLLM rollout engine (not implemented yet)."""


class VLLMRolloutEngine:
    """Placeholder until the vLLM engine lands; fails loudly instead of generating wrongly."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError(
            "engine_type 'vllm' is registered by trinity-vllm but not implemented yet; "
            "use explorer.rollout_model.engine_type: transformers (the reference engine of trinity-core) for now"
        )
