"""Shared fixtures: one tiny model built per test session (no downloads)."""

from __future__ import annotations

from pathlib import Path

import pytest

from trinity.common.tiny_model import build_tiny_model


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Qwen2 model + tokenizer directory, built once per session; treat it as read-only."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny_model"))
