"""Explorer and trainer run at their raylet's priority, not Ray's worker default of nice +15
(at +15 every Ray or system process preempts their compute)."""

from __future__ import annotations

import logging
import os

import pytest

from trinity.runtime import WORKER_NICENESS, keep_cluster_priority

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def cluster_with_ray_default_niceness():
    """A local Ray that starts its workers 15 nice levels below the raylet, as ``ray start`` does."""
    assert not ray.is_initialized()
    with pytest.MonkeyPatch.context() as env:
        env.setenv(WORKER_NICENESS, "15")  # the raylet reads it when it starts
        ray.init(num_cpus=2, include_dashboard=False)
    yield
    ray.shutdown()


@ray.remote(num_cpus=0)
class Role:
    def set_up(self) -> tuple[int, int, list[str]]:
        """Niceness before and after ``keep_cluster_priority``, and what it logged."""
        messages: list[str] = []
        handler = logging.Handler()
        handler.emit = lambda record: messages.append(record.getMessage())
        logging.getLogger("trinity.runtime").addHandler(handler)
        before = os.getpriority(os.PRIO_PROCESS, 0)
        keep_cluster_priority("explorer")
        return before, os.getpriority(os.PRIO_PROCESS, 0), messages


def test_a_role_in_a_cluster_of_default_niceness_takes_the_raylets_priority(cluster_with_ray_default_niceness):
    raylet = os.getpriority(os.PRIO_PROCESS, 0)  # this process started the raylet
    before, after, messages = ray.get(Role.remote().set_up.remote())
    assert before == min(raylet + 15, 19)
    if os.geteuid() == 0:  # may raise its priority
        assert (after, messages) == (raylet, [])
    else:
        assert after == before
        assert f"explorer runs at nice {before}" in messages[0] and f"{WORKER_NICENESS}=0" in messages[0]
