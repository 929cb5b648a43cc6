"""Settings every test shares: no network, no Ray token auth, quiet tokenizers, a clean checkout after the run."""

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.fixtures import ray_session  # noqa: F401 (one local Ray for a module that asks)
from helpers.house import checkout_left_clean  # noqa: F401 (autouse: a run leaves git status as it found it)

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Qwen2 model + tokenizer directory, built once per session; treat it as read-only."""
    from trinity.testing.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny_model"))


@pytest.fixture(scope="session")
def tiny_vl_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Qwen2-VL model + tokenizer + image processor directory, built once per session; read-only."""
    from trinity.testing.tiny_model import build_tiny_vl_model

    return build_tiny_vl_model(tmp_path_factory.mktemp("tiny_vl_model"))


@pytest.fixture(scope="session")
def tiny_moe_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Qwen3-MoE model + tokenizer directory (router replay), built once per session; read-only."""
    from trinity.testing.tiny_model import build_tiny_moe_model

    return build_tiny_moe_model(tmp_path_factory.mktemp("tiny_moe_model"))


@pytest.fixture(scope="session")
def tool_model_dir(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model taught to call the calculator (``tests/helpers/tool_model.py``), built once per session."""
    from helpers.tool_model import teach_tool_use

    return teach_tool_use(tiny_model_dir, tmp_path_factory.mktemp("tool_model") / "model")


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A throwaway PostgreSQL cluster for the session (``tests/helpers/pg_cluster.py``), skipped with the
    reason where it cannot start. Tests share its one database: name tables uniquely."""
    from helpers.pg_cluster import missing_reason, throwaway_postgres

    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    with throwaway_postgres(fsync="off") as cluster:
        yield cluster.url
