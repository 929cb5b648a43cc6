"""A local Ray session for the verl tests whose engine has more than one rank (Ray actors)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def ray_session():
    import ray

    ray.init(num_cpus=2, include_dashboard=False, namespace="trinity-verl-tests")
    yield
    ray.shutdown()
