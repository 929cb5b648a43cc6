"""Data-Juicer recipes on rows: what the ``data_juicer`` experience operator and the task
pipeline run.

py-data-juicer is optional (``pip install "trinity-core[data-juicer]"``): without it a recipe
fails at its start with an error naming its config key and the install command. A recipe is
Data-Juicer's own: a list of operators (``[{op_name: {args}}]``) run with ``num_process``
workers, or a recipe file (``config_path``, which wins, as in Trinity-RFT). Its filters drop
rows, its mappers rewrite them, and the statistics its filters compute land in each row's
``__dj__stats__``. The operators load once per recipe (loading Data-Juicer takes seconds).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from typing import Any

from trinity.common.errors import PicklableError

STATS_KEY = "__dj__stats__"
"""The column of Data-Juicer's per-row statistics (``data_juicer.utils.constant.Fields.stats``)."""

INSTALL_HINT = 'pip install "trinity-core[data-juicer]" (or pip install py-data-juicer)'


class DataJuicerError(PicklableError, RuntimeError):
    """A recipe cannot run: Data-Juicer missing, a bad recipe, an unreachable server."""

    def __init__(self, key: str, reason: str):
        self.key, self.reason = key, reason
        super().__init__(f"{key}: {reason}")


def require_data_juicer(key: str) -> None:
    """Raise a ``DataJuicerError`` naming ``key`` unless py-data-juicer is installed."""
    if importlib.util.find_spec("data_juicer") is None:
        raise DataJuicerError(key, f"Data-Juicer is not installed: {INSTALL_HINT}")


class RecipeRunner:
    """A loaded Data-Juicer recipe; ``run`` applies it to rows (``key``: its config key, for errors)."""

    def __init__(
        self,
        key: str,
        operators: Sequence[dict[str, Any]] | None = None,
        config_path: str | None = None,
        num_process: int = 1,
        text_keys: str | list[str] = "text",
    ):
        self.key = key
        if not (config_path or operators):
            raise DataJuicerError(key, "a Data-Juicer recipe needs operators or config_path")
        require_data_juicer(key)
        if config_path and not os.path.isfile(config_path):
            raise DataJuicerError(f"{key}.config_path", f"no Data-Juicer recipe at {config_path!r}")
        from data_juicer.ops import load_ops

        try:
            self.ops = load_ops(_recipe(operators, config_path, num_process, text_keys).process)
        except Exception as exc:  # Data-Juicer reports unknown ops and bad args in its own types
            raise DataJuicerError(key, f"Data-Juicer rejects the recipe ({type(exc).__name__}: {exc})") from exc

    def run(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The rows the recipe keeps, as it leaves them (statistics under ``STATS_KEY``)."""
        if not rows:
            return []
        from data_juicer.core.data import NestedDataset
        from datasets import Dataset

        return NestedDataset(Dataset.from_list(rows)).process(self.ops).to_list()


def _recipe(operators: Sequence[dict[str, Any]] | None, config_path: str | None, num_process: int, text_keys: Any):
    """Data-Juicer's parsed config of the recipe (its global settings filled in)."""
    from data_juicer.config import get_init_configs, prepare_side_configs
    from jsonargparse import Namespace

    if config_path:
        return get_init_configs(prepare_side_configs(config_path))
    return get_init_configs(
        Namespace(process=[dict(op) for op in operators or ()], np=num_process, text_keys=text_keys)
    )
