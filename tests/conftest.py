"""Settings every test shares: no network, no Ray token auth, quiet tokenizers."""

import os
from pathlib import Path

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Qwen2 model + tokenizer directory, built once per session; treat it as read-only."""
    from trinity.common.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny_model"))


@pytest.fixture(scope="session")
def tool_model_dir(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model taught to call the calculator (``tests/tool_model.py``), built once per session."""
    from tool_model import teach_tool_use

    return teach_tool_use(tiny_model_dir, tmp_path_factory.mktemp("tool_model") / "model")
