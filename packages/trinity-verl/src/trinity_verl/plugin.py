"""Registers the verl training engine."""

from trinity.plugin_api import hookimpl


@hookimpl
def trinity_register_trainer_engines(register):
    register("verl", "trinity_verl.engine:VerlTrainingEngine")


@hookimpl
def trinity_check_config(config, issues):
    """``trainer.trainer_config`` against verl's own schema, before anything starts (where verl is
    installed: its defaults file is read, verl is not imported)."""
    import importlib.util

    if config.trainer.trainer_type != "verl" or config.mode not in ("both", "train", "colocate"):
        return
    for key in ("rope_scaling", "rope_theta"):  # verl's override_config recurses into dicts: no rope_parameters
        if getattr(config.model, key) is not None:
            issues.refuse_at_run(
                f"model.{key}",
                "not passed to verl (its override_config cannot set transformers' rope_parameters): "
                "use trainer_type torch, or leave the model's own RoPE",
            )
    if importlib.util.find_spec("verl") is None:
        return  # the engine's start says what to install; `trinity config check` works without it
    from trinity_verl.config import build_verl_config

    build_verl_config(config, issues)
