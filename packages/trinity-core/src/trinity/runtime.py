"""What the explorer and the trainer set up the same way: logs, threads, priority, monitors, GC."""

from __future__ import annotations

import gc
import logging
import os
import socket
import sys
from collections.abc import Callable
from pathlib import Path

from trinity.config.schema import Config
from trinity.monitor.base import MonitorGroup, create_monitors

logger = logging.getLogger(__name__)

WORKER_NICENESS = "RAY_worker_niceness"
"""Ray's setting for how many nice levels below its raylet it starts worker processes (15 unless set)."""


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
    """Log to the role's file and the console at ``log.level``, take the cluster's priority,
    set torch threads, start monitors.

    Called first thing in the explorer's and trainer's constructors, so a monitor that
    cannot start fails the run before any work.
    """
    path = actor_log_path(config, role)
    path.parent.mkdir(parents=True, exist_ok=True)
    root = logging.getLogger()
    root.setLevel(config.log.level.upper())
    for client in ("httpx", "httpx2"):  # a line per HTTP request of the OpenAI clients (httpx2: openai >= 3)
        logging.getLogger(client).setLevel(logging.WARNING)
    _root_handler(f"trinity-file:{path}", lambda: logging.FileHandler(path))
    _root_handler(CONSOLE_HANDLER, logging.StreamHandler)
    keep_cluster_priority(role)
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
        config.model_dump(mode="json"),
    )


CONSOLE_HANDLER = "trinity-console"


def _root_handler(name: str, make: Callable[[], logging.Handler]) -> logging.Handler:
    """The root logger's handler of that name, added with trinity's format if missing (Ray
    workers bring handlers of their own)."""
    root = logging.getLogger()
    for handler in root.handlers:
        if handler.get_name() == name:
            return handler
    handler = make()
    handler.set_name(name)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    return handler


def quiet_console() -> None:
    """Only warnings and errors of this process reach the console; its log file keeps every line.

    ``trinity run`` calls it in its role actors unless ``--verbose``: the driver shows their
    progress instead of a line per step (``trinity.progress``). Also silences the progress bars
    of transformers and Hugging Face Hub (loading and saving weights).
    """
    _root_handler(CONSOLE_HANDLER, logging.StreamHandler).setLevel(logging.WARNING)
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    if "transformers" in sys.modules:
        sys.modules["transformers"].utils.logging.disable_progress_bar()


def keep_cluster_priority(role: str) -> None:
    """Run this role at its raylet's priority rather than Ray's worker default of nice +15.

    Ray starts workers below its own processes so that they cannot starve them. Explorer and
    trainer are the run's compute, and at +15 every wakeup of a process of normal priority
    (Ray's, the system's) preempts them: the same GRPO step measured 10-20% slower on 2
    cores. The Ray that ``trinity run`` starts keeps its workers at the raylet's level
    (``RAY_worker_niceness=0``); in a cluster started otherwise the role raises its own
    priority (its threads started later inherit it) where the OS lets it, and says how to
    start the cluster where it does not.
    """
    if not _in_ray_actor():
        return  # the priority is the user's
    mine, raylet = os.getpriority(os.PRIO_PROCESS, 0), os.getpriority(os.PRIO_PROCESS, os.getppid())
    if mine <= raylet:
        return
    try:
        os.setpriority(os.PRIO_PROCESS, 0, raylet)
    except PermissionError:
        logger.warning(
            "%s runs at nice %d, %d levels below Ray's own processes, which then preempt its compute; "
            "start the cluster with %s=0 (`trinity run` does so for the Ray it starts)",
            role,
            mine,
            mine - raylet,
            WORKER_NICENESS,
        )


def freeze_long_lived_objects() -> None:
    """Exempt what a role holds after its first step (modules, models, engines, the libraries
    the step imported) from the cyclic GC's full collections.

    A full collection in a process holding torch, transformers and Ray walks about a million
    objects: 0.15-0.24 s, every few explorer steps. Frozen objects are skipped, and never
    collected if they become cyclic garbage; so only in a Ray actor, a process that lives for
    this one role. After the first step, not at start-up: the collection that comes first
    (0.3 s) then runs while the role waits for the other one, not before the first rollout.
    """
    if _in_ray_actor():
        gc.collect()
        gc.freeze()


def _in_ray_actor() -> bool:
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized() and ray.get_runtime_context().get_actor_id() is not None


def default_threads(config: Config, roles_in_process_group: int) -> int:
    """Torch threads per role: all cores when explorer and trainer take turns, a share when they overlap."""
    if config.cluster.cpu_threads:
        return config.cluster.cpu_threads
    cores = os.cpu_count() or 1
    alternating = config.synchronizer.sync_style == "fixed" and config.synchronizer.sync_offset == 0
    return cores if alternating else max(1, cores // roles_in_process_group)
