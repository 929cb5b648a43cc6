"""Fixtures of the buffer tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray for the whole session (start-up costs ~2.5 s)."""
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, namespace="trinity-buffer-tests")
    yield ray
    ray.shutdown()
