"""Checkpoint sync's folder when a resumed trainer publishes versions a crashed run published
before: an explorer reading the newest version never finds it gone."""

from __future__ import annotations

import threading
from pathlib import Path

import torch
from safetensors.torch import load_file

from trinity.config import Config
from trinity.synchronizer.methods import CheckpointSync


def checkpoint_sync(tmp_path: Path) -> CheckpointSync:
    return CheckpointSync(Config(checkpoint_job_dir=str(tmp_path / "job")))


def weights(version: int) -> dict[str, torch.Tensor]:
    return {"w": torch.full((256, 256), float(version))}


def test_a_resumed_trainers_version_survives_the_crashed_runs_higher_ones(tmp_path) -> None:
    """The crashed run published 4 and 5; the resumed trainer (checkpoint at 3) publishes 3,
    the explorer is pointed at it, and it stays until two newer publications."""
    sync = checkpoint_sync(tmp_path)
    for version in (3, 4, 5):
        sync.publish(weights(version), version)
    sync.publish(weights(3), 3)
    update = sync.fetch(0, 0)
    assert update.version == 3
    assert load_file(Path(update.path) / "model.safetensors")["w"][0, 0] == 3
    sync.publish(weights(4), 4)
    assert sorted(p.name for p in sync.root.glob("version_*")) == ["version_3", "version_4"]


def test_republishing_a_version_never_leaves_a_reader_without_its_file(tmp_path) -> None:
    """A reader loads what ``latest.json`` names while the same version is published again
    and again (a resumed trainer): every read finds the file, whole."""
    sync = checkpoint_sync(tmp_path)
    sync.publish(weights(3), 3)
    done, failures, reads = threading.Event(), [], [0]

    def read_forever() -> None:
        while not done.is_set():
            try:
                assert load_file(Path(sync.fetch(0, 0).path) / "model.safetensors")["w"][0, 0] == 3
                reads[0] += 1
            except Exception as exc:  # noqa: BLE001 (any failure is the finding)
                failures.append(repr(exc))

    reader = threading.Thread(target=read_forever)
    reader.start()
    for _ in range(100):
        sync.publish(weights(3), 3)
    done.set()
    reader.join()
    assert reads[0] > 50 and not failures, failures[:3]
