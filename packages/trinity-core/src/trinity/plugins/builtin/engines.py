"""trinity-core's reference engines: transformers rollout and torch training (CPU or one GPU)."""

from trinity.plugins import hookimpl


@hookimpl
def trinity_register_rollout_engines(register):
    register("transformers", "trinity.rollout.transformers_rollout:TransformersRolloutEngine")
    register("external", "trinity.rollout.external:ExternalEngine")


@hookimpl
def trinity_register_trainer_engines(register):
    register("torch", "trinity.training.torch_trainer:TorchTrainingEngine")
