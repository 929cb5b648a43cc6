"""Learning tests: each runs a cell of the learning matrix (learning_cells.py) for a short budget
with fixed seeds and asserts its stated margin. The models and data are built once a session."""

from __future__ import annotations

import pytest
from learning_cells import Workspace


@pytest.fixture(scope="session")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    """The tiny model, its SFT warm-up and the cells' data, shared by every learning test."""
    return Workspace(tmp_path_factory.mktemp("learning"))


@pytest.fixture(scope="module")
def learning_ray():
    """One Ray for a module's runs (each ``trinity.launcher.run`` joins it)."""
    import ray

    if ray.is_initialized():
        ray.shutdown()
    ray.init(include_dashboard=False)
    try:
        yield
    finally:
        ray.shutdown()
