"""The verl FSDP training engine (not implemented yet)."""


class VerlTrainingEngine:
    """Placeholder until the verl engine lands; fails loudly instead of training wrongly."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError(
            "trainer_type 'verl' is registered by trinity-verl but not implemented yet; "
            "use trainer.trainer_type: torch (the reference engine of trinity-core) for now"
        )
