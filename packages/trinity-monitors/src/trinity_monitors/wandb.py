"""The ``wandb`` monitor: one W&B run per role, ``<name>_<role>``, grouped under ``name``.

``monitor_args.api_key`` and ``monitor_args.base_url`` override ``WANDB_API_KEY`` and
``WANDB_BASE_URL``. ``WANDB_MODE=offline`` writes the run under
``<job_dir>/monitor/wandb/offline-run-*`` with no key and no network (``wandb sync`` it later).
(The plugin registry imports this module only when a config names it.)
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from trinity.plugin_api import Field, Monitor, MonitorError, PluginArgs, lazy_module

wandb = lazy_module("wandb")  # 0.4 s: only when a run logs, not when the config check reads Args


class WandbMonitor(Monitor):
    """Scalars through ``run.log``, tables as ``wandb.Table``; the config as the run's config."""

    class Args(PluginArgs):
        api_key: str | None = Field(None, description="W&B API key; unset: WANDB_API_KEY.")
        base_url: str | None = Field(None, description="W&B server; unset: WANDB_BASE_URL.")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Read now, not from wandb's process-wide setup, which keeps the env of its first run.
        chosen = {
            "api_key": self.monitor_args.get("api_key") or os.environ.get("WANDB_API_KEY"),
            "base_url": self.monitor_args.get("base_url") or os.environ.get("WANDB_BASE_URL"),
            "mode": os.environ.get("WANDB_MODE"),
        }
        settings = wandb.Settings(**{key: value for key, value in chosen.items() if value})
        run_name = f"{self.name}_{self.role}"
        try:
            self._run = wandb.init(
                project=self.project,
                name=run_name,
                group=self.name,
                dir=str(self.monitor_dir),
                config=self.config,
                settings=settings,
                reinit="create_new",  # the explorer and trainer may share a process
            )
        except Exception as exc:
            raise MonitorError(
                f"wandb could not start run '{run_name}' in project '{self.project}': {exc} "
                "(set WANDB_API_KEY or monitor.monitor_args.api_key, check WANDB_BASE_URL or "
                "monitor.monitor_args.base_url, or run without network with WANDB_MODE=offline)"
            ) from exc

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        self._run.log(dict(metrics), step=step)

    def log_table(self, table_name: str, rows: Sequence[Mapping[str, Any]], step: int) -> None:
        if not rows:
            return
        columns = list(rows[0])
        table = wandb.Table(columns=columns, data=[[row.get(c) for c in columns] for row in rows])
        self._run.log({table_name: table}, step=step)

    def close(self) -> None:
        self._run.finish()
