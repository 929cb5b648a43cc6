"""What the explorer and the trainer set up the same way: logs, threads, monitors."""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
from pathlib import Path

from trinity.config.schema import Config
from trinity.monitor.base import MonitorGroup, create_monitors


def actor_log_path(config: Config, actor_name: str) -> Path:
    """``<job dir>/log/[<node ip>/]<actor name>.log`` per ``log.group_by_node``."""
    log_dir = Path(config.checkpoint_job_dir) / "log"
    if config.log.group_by_node:
        log_dir = log_dir / _node_ip()
    return log_dir / f"{actor_name}.log"


def _node_ip() -> str:
    try:
        import ray

        if ray.is_initialized():
            return ray.util.get_node_ip_address()
    except ImportError:
        pass
    return socket.gethostbyname(socket.gethostname())


def setup_role(config: Config, role: str, threads: int | None) -> MonitorGroup:
    """Log to the role's file and the console at ``log.level``, set torch threads, start monitors.

    Called first thing in the explorer's and trainer's constructors, so a monitor that
    cannot start fails the run before any work.
    """
    path = actor_log_path(config, role)
    path.parent.mkdir(parents=True, exist_ok=True)
    root = logging.getLogger()
    root.setLevel(config.log.level.upper())
    formatter = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    wanted = {f"trinity-file:{path}": lambda: logging.FileHandler(path), "trinity-console": logging.StreamHandler}
    present = {h.get_name() for h in root.handlers}  # Ray workers bring handlers of their own
    for name, make in wanted.items():
        if name not in present:
            handler = make()
            handler.set_name(name)
            handler.setFormatter(formatter)
            root.addHandler(handler)
    if threads:
        import torch

        torch.set_num_threads(threads)
    return create_monitors(
        config.monitor.monitor_type,
        config.project,
        config.name,
        role,
        config.checkpoint_job_dir,
        config.monitor.monitor_args,
        dataclasses.asdict(config),
    )


def default_threads(config: Config, roles_in_process_group: int) -> int:
    """Torch threads per role: all cores when explorer and trainer take turns, a share when they overlap."""
    if config.cluster.cpu_threads:
        return config.cluster.cpu_threads
    cores = os.cpu_count() or 1
    alternating = config.synchronizer.sync_style == "fixed" and config.synchronizer.sync_offset == 0
    return cores if alternating else max(1, cores // roles_in_process_group)
