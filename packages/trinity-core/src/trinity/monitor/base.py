"""The monitor interface, the group that fans out to several monitors, and their factory.

The explorer and the trainer each build one :class:`MonitorGroup` at the start of a run
with :func:`create_monitors`. Every monitor is constructed there, so a tracker that
cannot start (unreachable server, missing key) stops the run before any training; once
running, a monitor that fails is logged and skipped so it never kills training.

This module imports no tracker library: each plugin class imports its own lazily.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from trinity.plugins import Kind, resolve

logger = logging.getLogger(__name__)

CONSOLE = "console"


class MonitorError(RuntimeError):
    """A monitor could not start: its message says which monitor and why."""


class Monitor(ABC):
    """One tracker's view of one role (the explorer's or trainer's name) of one experiment.

    Subclasses connect in ``__init__`` and raise :class:`MonitorError` when they cannot,
    so a misconfigured tracker fails the run at its start.

    Args:
        project: the experiment's project (``project`` in the config).
        name: the experiment's name (``name`` in the config).
        role: the explorer's or trainer's name; trackers show one run per role.
        job_dir: ``<checkpoint_root_dir>/<project>/<name>``; local files go under ``monitor/``.
        monitor_args: ``monitor.monitor_args``, the tracker-specific options.
        config: the full resolved config as a plain nested dict, for trackers that record it.
    """

    def __init__(
        self,
        project: str,
        name: str,
        role: str,
        job_dir: str | Path,
        monitor_args: Mapping[str, Any] | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        self.project = project
        self.name = name
        self.role = role
        self.job_dir = Path(job_dir).absolute()
        self.monitor_args = dict(monitor_args or {})
        self.config = dict(config or {})

    @property
    def monitor_dir(self) -> Path:
        """``<job_dir>/monitor``, created on first use."""
        path = self.job_dir / "monitor"
        path.mkdir(parents=True, exist_ok=True)
        return path

    @abstractmethod
    def log(self, metrics: Mapping[str, float], step: int) -> None:
        """Record scalar ``metrics`` (metric name -> value) at ``step``."""

    @abstractmethod
    def log_table(self, table_name: str, rows: Sequence[Mapping[str, Any]], step: int) -> None:
        """Record a table of rollout examples (one dict per row, same keys) at ``step``."""

    @abstractmethod
    def close(self) -> None:
        """Flush and finish the run; called once when the role stops."""


class MonitorGroup:
    """Fans every call out to several monitors and keeps a failing one from stopping the run.

    An error of one monitor is logged with its traceback the first time that monitor
    fails that way (same call, same exception type); repeats are logged at debug level.
    """

    def __init__(self, monitors: Mapping[str, Monitor]) -> None:
        self.monitors = dict(monitors)
        self._reported: set[tuple[str, str, type[BaseException]]] = set()

    def _each(self, action: str, call: Callable[[Monitor], None]) -> None:
        for monitor_type, monitor in self.monitors.items():
            try:
                call(monitor)
            except Exception as exc:
                key = (monitor_type, action, type(exc))
                if key in self._reported:
                    logger.debug("monitor %s failed again in %s: %s", monitor_type, action, exc)
                    continue
                self._reported.add(key)
                logger.exception(
                    "monitor %s failed in %s (training goes on; further %s errors of this monitor are not repeated)",
                    monitor_type,
                    action,
                    type(exc).__name__,
                )

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        self._each("log", lambda m: m.log(metrics, step))

    def log_table(self, table_name: str, rows: Sequence[Mapping[str, Any]], step: int) -> None:
        self._each("log_table", lambda m: m.log_table(table_name, rows, step))

    def close(self) -> None:
        self._each("close", lambda m: m.close())

    def __enter__(self) -> MonitorGroup:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def monitor_names(monitor_types: str | Sequence[str]) -> list[str]:
    """``console`` first, then the configured monitors in order, each once.

    ``monitor_types`` is ``monitor.monitor_type``: one name or a list (veRL's
    ``trainer.logger=['console','wandb']`` maps onto it unchanged).
    """
    names = [monitor_types] if isinstance(monitor_types, str) else list(monitor_types)
    return list(dict.fromkeys([CONSOLE, *(n for n in names if n)]))


def create_monitors(
    monitor_types: str | Sequence[str],
    project: str,
    name: str,
    role: str,
    job_dir: str | Path,
    monitor_args: Mapping[str, Any] | None = None,
    config: Mapping[str, Any] | None = None,
) -> MonitorGroup:
    """Build the console monitor and every configured one, resolving names through the plugins.

    Called once per role at the start of a run. An unknown name raises the registry's
    ``UnknownPluginError``; a monitor that cannot start raises :class:`MonitorError`
    naming it, after closing the monitors already started.
    """
    started: dict[str, Monitor] = {}
    for monitor_type in monitor_names(monitor_types):
        cls = resolve(Kind.MONITOR, monitor_type, config_key="monitor.monitor_type")
        try:
            started[monitor_type] = cls(project, name, role, job_dir, monitor_args, config)
        except Exception as exc:
            MonitorGroup(started).close()
            raise MonitorError(f"monitor '{monitor_type}' failed to start for {role}: {exc}") from exc
    return MonitorGroup(started)
