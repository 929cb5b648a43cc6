"""Registers the tracker monitors."""

from trinity.plugin_api import hookimpl


@hookimpl
def trinity_register_monitors(register):
    register("tensorboard", "trinity_monitors.tensorboard:TensorboardMonitor")
    register("wandb", "trinity_monitors.wandb:WandbMonitor")
    register("mlflow", "trinity_monitors.mlflow:MlflowMonitor")
