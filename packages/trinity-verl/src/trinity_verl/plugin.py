"""Registers the verl training engine."""

from trinity.plugin_api import hookimpl


@hookimpl
def trinity_register_trainer_engines(register):
    register("verl", "trinity_verl.engine:VerlTrainingEngine")
