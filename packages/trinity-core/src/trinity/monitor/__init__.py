"""Monitors: the interface, the console monitor, metric names and the Ray timeline export.

Tracker monitors (tensorboard, wandb, mlflow) come from trinity-monitors through the plugins.
"""

from trinity.monitor.base import Monitor, MonitorError, MonitorGroup, create_monitors

__all__ = ["Monitor", "MonitorError", "MonitorGroup", "create_monitors"]
