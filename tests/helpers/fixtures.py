"""Fixtures every test folder may ask for (``tests/conftest.py`` imports them): one local Ray."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType

import pytest


@contextmanager
def local_ray(namespace: str) -> Iterator[ModuleType]:
    """A local Ray (2 CPUs, no dashboard) in ``namespace``, shut down on exit if this started it: a
    Ray that a wider fixture holds stays up. Skips where Ray is not installed."""
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, namespace=namespace)
    try:
        yield ray
    finally:
        if started:
            ray.shutdown()


@pytest.fixture(scope="module")
def ray_session(request: pytest.FixtureRequest) -> Iterator[ModuleType]:
    """One local Ray for a test module (start-up costs about 3 s), in the namespace
    ``trinity-<folder>-tests``. Shut down after the module: while Ray runs, a buffer queue
    without a path becomes a Ray actor."""
    with local_ray(f"trinity-{request.path.parent.name}-tests") as ray:
        yield ray
