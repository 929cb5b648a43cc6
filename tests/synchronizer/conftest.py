"""Fixtures of the synchronizer tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def ray_session():
    """One local Ray for the module (start-up costs about 3 s)."""
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False)
    yield ray
    ray.shutdown()
