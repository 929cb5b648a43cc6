"""The ``tensorboard`` monitor: event files under ``<job_dir>/monitor/tensorboard/<role>``.

Written with TensorBoard's own event writer, so neither torch nor TensorFlow is needed;
``tensorboard --logdir <job_dir>/monitor/tensorboard`` shows the explorer and trainer
as two runs. (The plugin registry imports this module only when a config names it.)
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from trinity.plugin_api import Monitor, PluginArgs, lazy_module

# 0.4 s of protobuf modules: only when a run logs, not when the config check reads Args.
event_pb2 = lazy_module("tensorboard.compat.proto.event_pb2")
summary_pb2 = lazy_module("tensorboard.compat.proto.summary_pb2")
tensor_pb2 = lazy_module("tensorboard.compat.proto.tensor_pb2")
tensor_shape_pb2 = lazy_module("tensorboard.compat.proto.tensor_shape_pb2")
types_pb2 = lazy_module("tensorboard.compat.proto.types_pb2")
event_file_writer = lazy_module("tensorboard.summary.writer.event_file_writer")


def markdown_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Rows as a Markdown table (columns from the first row), as TensorBoard's text tab renders it."""
    if not rows:
        return "(no rows)"
    columns = list(rows[0])

    def line(cells: Sequence[Any]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|").replace("\n", "<br>") for c in cells) + " |"

    body = [line([row.get(c, "") for c in columns]) for row in rows]
    return "\n".join([line(columns), line(["---"] * len(columns)), *body])


class TensorboardMonitor(Monitor):
    """Scalars as TensorBoard scalars, tables as Markdown text summaries (the Text tab)."""

    Args = PluginArgs  # no arguments

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.log_dir = self.monitor_dir / "tensorboard" / self.role
        self._writer = event_file_writer.EventFileWriter(str(self.log_dir), flush_secs=10)

    def _write(self, step: int, values: list[Any]) -> None:
        self._writer.add_event(
            event_pb2.Event(wall_time=time.time(), step=step, summary=summary_pb2.Summary(value=values))
        )

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        self._write(
            step, [summary_pb2.Summary.Value(tag=key, simple_value=float(value)) for key, value in metrics.items()]
        )

    def log_table(self, table_name: str, rows: Sequence[Mapping[str, Any]], step: int) -> None:
        tensor = tensor_pb2.TensorProto(
            dtype=types_pb2.DT_STRING,
            string_val=[markdown_table(rows).encode("utf-8")],
            tensor_shape=tensor_shape_pb2.TensorShapeProto(dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=1)]),
        )
        text = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="text"))
        self._write(step, [summary_pb2.Summary.Value(tag=table_name, metadata=text, tensor=tensor)])

    def close(self) -> None:
        self._writer.close()
