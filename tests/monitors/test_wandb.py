"""The wandb monitor offline (no key, no network), read back from the run's ``.wandb`` file."""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

import pytest
from monitor_testdata import CONFIG, NAME, PROJECT, ROWS

from trinity.monitor.base import MonitorError

wandb_monitor = pytest.importorskip("trinity_monitors.wandb")
from google.protobuf.message import DecodeError  # noqa: E402
from wandb.proto import wandb_internal_pb2  # noqa: E402

BLOCK, HEADER = 32768, struct.Struct("<IHB")  # W&B's LevelDB-style log: crc32, length, chunk type
FULL, LAST = 1, 4
FILE_HEADER = 7  # ":W&B", then magic and version


def finished_records(path: Path, timeout: float = 30.0) -> list[wandb_internal_pb2.Record]:
    """The records of a finished run's log, once its ``exit`` record is there: W&B's service
    writes the log on its own, and under load it was seen to lag ``finish()`` (no ``run``
    record yet)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            records = read_records(path)
        except DecodeError:  # a record still being written
            records = []
        if any(r.WhichOneof("record_type") == "exit" for r in records):
            return records
        assert time.monotonic() < deadline, f"no exit record in {path} {timeout:.0f} s after finish()"
        time.sleep(0.1)


def read_records(path: Path) -> list[wandb_internal_pb2.Record]:
    """The records of a ``run-*.wandb`` transaction log, reassembling chunks split over blocks."""
    data = path.read_bytes()
    if len(data) < FILE_HEADER:  # not even its header yet
        return []
    assert data[:4] == b":W&B", "not a W&B transaction log"
    records, chunks, pos = [], b"", FILE_HEADER
    while pos + HEADER.size <= len(data):
        if BLOCK - pos % BLOCK < HEADER.size:  # a block's tail too short for a header is padding
            pos += BLOCK - pos % BLOCK
            continue
        _, length, kind = HEADER.unpack_from(data, pos)
        pos += HEADER.size
        chunks += data[pos : pos + length]
        pos += length
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(chunks)
            records.append(record)
            chunks = b""
    return records


@pytest.fixture
def wandb_env(tmp_path, monkeypatch):
    """No key, no stored login, W&B's own folders inside the test's tmp dir."""
    for var in ("WANDB_API_KEY", "WANDB_BASE_URL", "WANDB_MODE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for var in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(var, str(tmp_path / "home" / var.lower()))
    monkeypatch.setenv("WANDB_CONSOLE", "off")
    return monkeypatch


def test_offline_run_records_name_group_config_metrics_and_tables(tmp_path, wandb_env):
    wandb_env.setenv("WANDB_MODE", "offline")
    monitor = wandb_monitor.WandbMonitor(PROJECT, NAME, "trainer", tmp_path / "job", {}, CONFIG)
    monitor.log({"actor/pg_loss": 0.5, "eval/gsm8k/accuracy/mean@4": 0.25}, step=1)
    monitor.log({"actor/pg_loss": 0.25}, step=2)
    monitor.log_table("rollout_examples", ROWS, step=2)
    monitor.close()

    [log_file] = (tmp_path / "job" / "monitor" / "wandb").glob("offline-run-*/run-*.wandb")
    records = finished_records(log_file)
    [run] = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert (run.project, run.display_name, run.run_group) == (PROJECT, f"{NAME}_trainer", NAME)
    config = {item.key: json.loads(item.value_json) for item in run.config.update}
    assert config["algorithm"] == CONFIG["algorithm"]

    history = [
        {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in r.history.item}
        for r in records
        if r.WhichOneof("record_type") == "history"
    ]
    assert [(h["_step"], h["actor/pg_loss"]) for h in history] == [(1, 0.5), (2, 0.25)]
    assert history[0]["eval/gsm8k/accuracy/mean@4"] == 0.25
    assert history[1]["rollout_examples/_type"] == "table-file"
    table = json.loads((log_file.parent / "files" / history[1]["rollout_examples/path"]).read_text())
    assert [dict(zip(table["columns"], row, strict=True)) for row in table["data"]] == ROWS


def test_online_without_an_api_key_fails_at_construction_with_a_clear_message(tmp_path, wandb_env):
    wandb_env.setenv("WANDB_MODE", "online")
    with pytest.raises(MonitorError, match=r"wandb could not start run 'exp_explorer'.*set WANDB_API_KEY"):
        wandb_monitor.WandbMonitor(PROJECT, NAME, "explorer", tmp_path / "job")
