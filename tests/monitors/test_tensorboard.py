"""The tensorboard monitor, read back with TensorBoard's own event reader."""

import pytest
from monitor_testdata import NAME, PROJECT, ROWS

from trinity.monitor.base import create_monitors

event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")


def test_scalars_and_tables_of_each_role_are_read_back(tmp_path):
    for role in ("explorer", "trainer"):
        with create_monitors("tensorboard", PROJECT, NAME, role, tmp_path) as group:
            group.log({"actor/pg_loss": 0.5, "eval/gsm8k/accuracy/mean@4": 0.25}, step=1)
            group.log({"actor/pg_loss": 0.25}, step=2)
            group.log_table("rollout_examples", ROWS, step=2)

    for role in ("explorer", "trainer"):
        events = event_accumulator.EventAccumulator(str(tmp_path / "monitor" / "tensorboard" / role))
        events.Reload()
        scalars = {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}
        assert scalars == {"actor/pg_loss": [(1, 0.5), (2, 0.25)], "eval/gsm8k/accuracy/mean@4": [(1, 0.25)]}
        [text] = events.Tensors("rollout_examples")
        assert text.step == 2
        assert text.tensor_proto.string_val[0].decode().splitlines() == [
            "| prompt | response | reward |",
            "| --- | --- | --- |",
            "| 1+1? | 2 | 1.0 |",
            "| 2+2? | 5 | 0.0 |",
        ]
