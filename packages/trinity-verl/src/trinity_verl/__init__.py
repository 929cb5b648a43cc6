"""trinity-verl: the verl FSDP training engine for trinity (``trainer.trainer_type: verl``)."""
