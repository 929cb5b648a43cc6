"""The environment the seed configs (tests/config/seeds/) read, for tests that load them."""

from __future__ import annotations

from pathlib import Path

import pytest


def set_seed_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Their environment variables under ``tmp_path``, which also becomes the working directory."""
    monkeypatch.chdir(tmp_path)
    for var in ("TRINITY_TASKSET_PATH", "TRINITY_SFT_DATASET_PATH", "TRINITY_DATASET_PATH"):
        monkeypatch.setenv(var, str(tmp_path / var.lower()))
    monkeypatch.setenv("MODEL_PATH", str(tmp_path / "model"))
    monkeypatch.delenv("TRINITY_CHECKPOINT_ROOT_DIR", raising=False)
    monkeypatch.delenv("TRINITY_MODEL_PATH", raising=False)
