"""An explorer blocked on weights tells the trainer through the buffer, whatever the sync method:
the trainer, short of a batch, then trains on what it has instead of waiting for rows that cannot
come before its own update (no back-channel through weight sync)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import torch

from trinity.buffer import open_experience_reader, open_experience_writer
from trinity.common.experience import EID, Experience
from trinity.config.schema import Config, ExperienceBufferConfig
from trinity.synchronizer.explorer_sync import ExplorerSync
from trinity.synchronizer.methods import CheckpointSync
from trinity.trainer.reading import StepReader


def checkpoint_config(tmp_path: Path, read_timeout: float = 30.0) -> Config:
    config = Config(mode="train")
    config.checkpoint_job_dir = str(tmp_path / "job")
    config.synchronizer.sync_method = "checkpoint"
    config.buffer.train_batch_size = 4
    config.buffer.trainer_input.experience_buffer = ExperienceBufferConfig(
        name="exp", storage_type="sql", path=str(tmp_path / "exp.db"), max_read_timeout=read_timeout
    )
    return config


def test_a_blocked_fetch_is_on_the_writer_until_its_version_comes(tmp_path: Path) -> None:
    config = checkpoint_config(tmp_path)
    storage = config.buffer.trainer_input.experience_buffer
    reader = open_experience_reader(storage, auto_commit=False)
    explorer = ExplorerSync(config, open_experience_writer(storage, "explorer"))
    got = []
    fetching = threading.Thread(target=lambda: got.append(explorer.fetch(1, timeout=30)))
    fetching.start()
    deadline = time.monotonic() + 10
    while reader.awaited_version() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert reader.awaited_version() == 1
    CheckpointSync(config).publish({"w": torch.zeros(1)}, 1)
    fetching.join(timeout=10)
    assert got[0].version == 1
    assert reader.awaited_version() is None  # the wait is over: so is its mark


def test_an_explorer_without_a_writer_waits_all_the_same(tmp_path: Path) -> None:
    """bench mode writes no experiences: its fetches wait for the version, telling no one."""
    config = checkpoint_config(tmp_path)
    threading.Timer(0.3, CheckpointSync(config).publish, ({"w": torch.zeros(1)}, 1)).start()
    assert ExplorerSync(config, None).fetch(1, timeout=30).version == 1


def read_seconds(config: Config, waiting_for: int) -> tuple[int, float]:
    """Rows a trainer at step 0 reads while an explorer waits for ``waiting_for``, and in how long."""
    storage = config.buffer.trainer_input.experience_buffer
    writer = open_experience_writer(storage, "explorer")
    rows = [Experience(tokens=torch.arange(10), prompt_length=4, eid=EID(task=str(i))) for i in range(2)]
    writer.write(rows)  # half a batch: the explorer's step came up short
    writer.set_waiting(waiting_for)
    readers = StepReader(config, "trainer", "rollout", None, threading.Event())
    started = time.monotonic()
    rows = readers.read(0)
    return len(rows), time.monotonic() - started


def test_a_trainer_short_of_a_batch_trains_once_an_explorer_waits_for_its_update(tmp_path: Path) -> None:
    """Waiting for version 1 (this step's update): the 2 rows go in after one read slice (1 s).
    The control, a wait for version 0 (weights the trainer already published), is no reason:
    the trainer waits out ``max_read_timeout`` (3 s) as it would with no explorer waiting."""
    rows, seconds = read_seconds(checkpoint_config(tmp_path / "waits", read_timeout=3), waiting_for=1)
    assert rows == 2 and seconds < 2.0
    rows, seconds = read_seconds(checkpoint_config(tmp_path / "control", read_timeout=3), waiting_for=0)
    assert rows == 2 and seconds >= 2.9
