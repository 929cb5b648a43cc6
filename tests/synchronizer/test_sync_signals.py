"""Both directions of the sync signals, as the roles use them: an explorer blocked on weights
tells the trainer, which then trains on what it has instead of waiting for rows that cannot
come before its own update; the trainer's end stops an explorer's wait. The signals are files
in the job folder, so separate processes (and nodes sharing it) see them whatever the sync
method and buffer: here checkpoint sync and a sqlite buffer; memory sync in test_shared_actors."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import torch

from trinity.buffer import open_experience_writer
from trinity.common.experience import EID, Experience
from trinity.config.schema import Config, ExperienceBufferConfig
from trinity.synchronizer.explorer_sync import ExplorerSync
from trinity.synchronizer.methods import CheckpointSync, SyncTimeout
from trinity.synchronizer.signals import SyncSignals, TrainerFinished
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


def test_a_blocked_fetch_is_on_the_signals_until_its_version_comes(tmp_path: Path) -> None:
    config = checkpoint_config(tmp_path)
    trainer = SyncSignals(config)
    explorer = ExplorerSync(config, "explorer")
    got = []
    fetching = threading.Thread(target=lambda: got.append(explorer.fetch(1, timeout=30)))
    fetching.start()
    deadline = time.monotonic() + 10
    while trainer.awaited_version() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert trainer.awaited_version() == 1
    CheckpointSync(config).publish({"w": torch.zeros(1)}, 1)
    fetching.join(timeout=10)
    assert got[0].version == 1
    assert trainer.awaited_version() is None  # the wait is over: so is its mark


def test_an_explorer_that_tells_no_trainer_waits_all_the_same(tmp_path: Path) -> None:
    """bench mode writes no experiences: its fetches wait for the version, telling no one."""
    config = checkpoint_config(tmp_path)
    seen = []

    def trainer() -> None:
        seen.append(SyncSignals(config).awaited_version())
        CheckpointSync(config).publish({"w": torch.zeros(1)}, 1)

    threading.Timer(0.3, trainer).start()
    assert ExplorerSync(config, None).fetch(1, timeout=30).version == 1
    assert seen == [None]


def test_the_trainer_sees_the_lowest_wait_and_a_restarted_explorer_forgets_its_crashed_one(tmp_path) -> None:
    config = checkpoint_config(tmp_path)
    trainer, first, second = SyncSignals(config), SyncSignals(config), SyncSignals(config)
    with first.waiting("explorer", 3):
        with second.waiting("explorer_2", 2):
            assert trainer.awaited_version() == 2
        assert trainer.awaited_version() == 3
    assert trainer.awaited_version() is None
    crashed = first.waiting("explorer", 4)
    crashed.__enter__()  # its process died waiting: the mark stays
    assert trainer.awaited_version() == 4
    ExplorerSync(config, "explorer")  # the same explorer, restarted
    assert trainer.awaited_version() is None


def test_the_trainers_end_stops_a_waiting_explorer_but_an_earlier_runs_end_does_not(tmp_path) -> None:
    config = checkpoint_config(tmp_path)
    SyncSignals(config).finish(0)  # the job's previous run
    time.sleep(0.05)
    explorer = ExplorerSync(config, "explorer")
    with pytest.raises(SyncTimeout, match="no weights of version >= 1 published after 1 s"):
        explorer.fetch(1, timeout=1)
    threading.Timer(0.3, SyncSignals(config).finish, (0,)).start()
    started = time.monotonic()
    with pytest.raises(TrainerFinished, match="the trainer finished at version 0: no version >= 1 will come"):
        explorer.fetch(1, timeout=30)
    assert time.monotonic() - started < 5
    assert SyncSignals(config).awaited_version() is None
    with pytest.raises(TrainerFinished):  # a look without waiting says so too (the serve proxy's)
        explorer.fetch(1, timeout=0)


def read_seconds(config: Config, waiting_for: int) -> tuple[int, float]:
    """Rows a trainer at step 0 reads while an explorer waits for ``waiting_for``, and in how long."""
    storage = config.buffer.trainer_input.experience_buffer
    writer = open_experience_writer(storage, "explorer")
    rows = [Experience(tokens=torch.arange(10), prompt_length=4, eid=EID(task=str(i))) for i in range(2)]
    writer.write(rows)  # half a batch: the explorer's step came up short
    signals = SyncSignals(config)
    readers = StepReader(config, "trainer", "rollout", None, threading.Event(), signals)
    with signals.waiting("explorer", waiting_for):
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
