"""The ``mlflow`` monitor: one MLflow run per role, ``<name>_<role>``, in experiment ``project``.

``monitor_args.uri`` names the tracking server; without it the runs go to a local
sqlite store, ``sqlite:///<job_dir>/monitor/mlflow.db`` (view it with
``mlflow ui --backend-store-uri <that uri>``). ``monitor_args.username`` and ``password``
override ``MLFLOW_TRACKING_USERNAME`` and ``MLFLOW_TRACKING_PASSWORD``. The flattened config
is logged as the run's params. (The plugin registry imports this module only when a config
names it.)
"""

from __future__ import annotations

import os
import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from filelock import FileLock

from trinity.plugin_api import Field, Monitor, MonitorError, PluginArgs, lazy_module

# mlflow takes 1-1.7 s to import: only when a run logs, not when the config check reads Args.
entities = lazy_module("mlflow.entities")
exceptions = lazy_module("mlflow.exceptions")
tracking = lazy_module("mlflow.tracking")
limits = lazy_module("mlflow.utils.validation")

REACHABILITY_TIMEOUT_S = 5.0


def mlflow_key(name: str) -> str:
    """A metric or param name MLflow accepts: ``@`` reads ``_at_`` (``mean@4`` -> ``mean_at_4``),
    other characters outside ``[/\\w.\\- :]`` become ``_``, cut to MLflow's key length."""
    return re.sub(r"[^/\w.\- :]", "_", name.replace("@", "_at_"))[: limits.MAX_ENTITY_KEY_LENGTH]


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": "1"}``, values cut to MLflow's param value length."""
    flat: dict[str, str] = {}
    for key, value in config.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, f"{path}."))
        else:
            flat[path] = str(value)[: limits.MAX_PARAM_VAL_LENGTH]
    return flat


def check_reachable(uri: str, timeout: float = REACHABILITY_TIMEOUT_S) -> None:
    """Raise MonitorError unless an HTTP server answers at ``uri`` (any HTTP status counts)."""
    try:
        urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout).close()
    except urllib.error.HTTPError:
        return
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise MonitorError(
            f"cannot reach the MLflow tracking server at {uri} ({reason}); start it, fix "
            "monitor.monitor_args.uri, or leave uri out to use a local sqlite store under the job dir"
        ) from exc


def _batches(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class MlflowMonitor(Monitor):
    """Scalars as MLflow metrics, tables as JSON table artifacts, the config as params."""

    class Args(PluginArgs):
        uri: str | None = Field(None, description="Tracking server URI; unset: a sqlite store in the job folder.")
        username: str | None = Field(None, description="Tracking server user (MLFLOW_TRACKING_USERNAME).")
        password: str | None = Field(None, description="Tracking server password (MLFLOW_TRACKING_PASSWORD).")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for arg, env in (("username", "MLFLOW_TRACKING_USERNAME"), ("password", "MLFLOW_TRACKING_PASSWORD")):
            if self.monitor_args.get(arg):
                os.environ[env] = str(self.monitor_args[arg])
        remote = self.monitor_args.get("uri")
        self.tracking_uri = remote or f"sqlite:///{self.monitor_dir / 'mlflow.db'}"
        if self.tracking_uri.startswith(("http://", "https://")):
            check_reachable(self.tracking_uri)
        artifacts = None if remote else (self.monitor_dir / "mlflow_artifacts").as_uri()
        run_name = f"{self.name}_{self.role}"
        try:
            with FileLock(self.monitor_dir / "mlflow.lock"):  # explorer and trainer create the schema in turn
                self._client = tracking.MlflowClient(tracking_uri=self.tracking_uri)  # creates a new store's schema
                experiment_id = self._experiment_id(artifacts)
                self.run_id = self._client.create_run(experiment_id, run_name=run_name).info.run_id
            params = [entities.Param(mlflow_key(k), v) for k, v in flatten(self.config).items()]
            for batch in _batches(params, limits.MAX_PARAMS_TAGS_PER_BATCH):
                self._client.log_batch(self.run_id, params=batch)
        except Exception as exc:
            raise MonitorError(
                f"mlflow could not start run '{run_name}' in experiment '{self.project}' at {self.tracking_uri}: {exc}"
            ) from exc

    def _experiment_id(self, artifact_location: str | None) -> str:
        """The experiment named ``project``, created by whichever role comes first."""
        experiment = self._client.get_experiment_by_name(self.project)
        if experiment is not None:
            return experiment.experiment_id
        try:
            return self._client.create_experiment(self.project, artifact_location=artifact_location)
        except exceptions.MlflowException:  # the other role, on another host, created it meanwhile
            experiment = self._client.get_experiment_by_name(self.project)
            if experiment is None:
                raise
            return experiment.experiment_id

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        now = int(time.time() * 1000)
        entries = [entities.Metric(mlflow_key(k), float(v), now, step) for k, v in metrics.items()]
        for batch in _batches(entries, limits.MAX_METRICS_PER_BATCH):
            self._client.log_batch(self.run_id, metrics=batch)

    def log_table(self, table_name: str, rows: Sequence[Mapping[str, Any]], step: int) -> None:
        if not rows:
            return
        columns = list(rows[0])
        data = {c: [row.get(c) for row in rows] for c in columns}
        self._client.log_table(self.run_id, data=data, artifact_file=f"tables/{table_name}/step_{step}.json")

    def close(self) -> None:
        self._client.set_terminated(self.run_id)
