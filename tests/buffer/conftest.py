"""Fixtures of the buffer tests."""

from __future__ import annotations

import pytest
from buffer_helpers import POSTGRES


@pytest.fixture(scope="module")
def ray_session():
    """One local Ray for a test module (start-up costs ~2.5 s). Shut down after the module:
    while Ray runs, every queue without a path becomes a Ray actor."""
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, namespace="trinity-buffer-tests")
    yield ray
    ray.shutdown()


@pytest.fixture(autouse=True)
def _postgres_for_postgres_kinds(request):
    """Tests parametrised with a ``postgres*`` kind get the session's server (or skip)."""
    callspec = getattr(request.node, "callspec", None)
    if callspec and str(callspec.params.get("kind", "")).startswith("postgres"):
        POSTGRES["url"] = request.getfixturevalue("postgres_url")
