"""The named actors both sides of a sync method meet through: the launcher starts the roles
first and these right after, so a role must find an actor that does not exist yet."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from trinity.config.schema import Config
from trinity.synchronizer.explorer_sync import ExplorerSync
from trinity.synchronizer.methods import MemorySync, find_shared_actor
from trinity.synchronizer.signals import SyncSignals, TrainerFinished

NAMESPACE = "trinity-sync-tests"


def memory_config() -> Config:
    config = Config()
    config.ray_namespace = NAMESPACE
    config.synchronizer.sync_method = "memory"
    return config


def test_a_side_built_before_its_shared_actor_waits_for_it(ray_session) -> None:
    config = memory_config()
    (store,) = MemorySync.shared_actors(config)
    store.remove_leftover(NAMESPACE)
    built: list[MemorySync] = []
    explorer_side = threading.Thread(target=lambda: built.append(MemorySync(config)))
    explorer_side.start()
    time.sleep(0.5)
    assert built == []  # still waiting: the store does not exist yet
    actor = store.start(NAMESPACE)
    explorer_side.join(timeout=30)
    try:
        trainer, explorer = MemorySync(config), built[0]
        trainer.publish({"w": torch.full((2,), 3.0)}, 1)
        update = explorer.fetch(1, timeout=10)
        assert update.version == 1
        assert update.state_dict["w"].tolist() == [3.0, 3.0]
    finally:
        ray_session.kill(actor)


def test_a_leftover_of_an_earlier_run_is_replaced_by_a_fresh_actor(ray_session) -> None:
    config = memory_config()
    (store,) = MemorySync.shared_actors(config)
    store.remove_leftover(NAMESPACE)
    earlier = store.start(NAMESPACE)
    MemorySync(config).publish({"w": torch.zeros(1)}, 5)
    store.remove_leftover(NAMESPACE)
    fresh = store.start(NAMESPACE)
    try:
        assert MemorySync(config).fetch(1, timeout=0) is None  # version 5 went with the leftover
        with pytest.raises(ray_session.exceptions.RayActorError):
            ray_session.get(earlier.wait_for.remote(1, 0))
    finally:
        ray_session.kill(fresh)


def test_a_shared_actor_that_never_comes_fails_naming_it(ray_session) -> None:
    with pytest.raises(ValueError, match=r"no actor 'trinity_weight_store' in Ray namespace 'elsewhere' after 0 s"):
        find_shared_actor("trinity_weight_store", "elsewhere", timeout=0.3)


def test_memory_sync_carries_every_dtype_exactly(ray_session) -> None:
    """The weights travel as numpy arrays (bfloat16 as its bits) and come back as they left."""
    config = memory_config()
    (store,) = MemorySync.shared_actors(config)
    store.remove_leftover(NAMESPACE)
    actor = store.start(NAMESPACE)
    try:
        sent = {
            "float32": torch.randn(3, 4),
            "bfloat16": torch.randn(5).to(torch.bfloat16),
            "float16": torch.randn(2, 2).to(torch.float16),
            "int64": torch.arange(6).view(2, 3),
        }
        MemorySync(config).publish(sent, 2)
        received = MemorySync(config).fetch(2, timeout=10).state_dict
        assert received.keys() == sent.keys()
        for name, tensor in sent.items():
            assert received[name].dtype == tensor.dtype and torch.equal(received[name], tensor), name
    finally:
        ray_session.kill(actor)


def test_over_memory_sync_the_explorer_is_told_the_trainers_end_and_the_trainer_its_wait(ray_session, tmp_path):
    """The weights travel through the store, the signals beside them: the explorer's wait reaches
    the trainer, and the trainer's end stops that wait at once, not after sync_timeout."""
    config = memory_config()
    config.checkpoint_job_dir = str(tmp_path / "job")
    (store,) = MemorySync.shared_actors(config)
    store.remove_leftover(NAMESPACE)
    actor = store.start(NAMESPACE)
    try:
        explorer, trainer = ExplorerSync(config, "explorer"), SyncSignals(config)
        MemorySync(config).publish({"w": torch.zeros(1)}, 1)
        seen = []

        def trainer_ends() -> None:
            seen.append(trainer.awaited_version())
            trainer.finish(1)

        threading.Timer(0.5, trainer_ends).start()
        started = time.monotonic()
        with pytest.raises(TrainerFinished, match="finished at version 1: no version >= 2 will come"):
            explorer.fetch(2, timeout=60)
        assert time.monotonic() - started < 5 and seen == [2]
        assert explorer.fetch(1, timeout=0).version == 1  # its last weights are still there
    finally:
        ray_session.kill(actor)


WITHOUT_RAY = """
import json, sys, threading, time
import torch
from trinity.config.schema import Config
from trinity.synchronizer.methods import LocalActor, MemorySync, SyncTimeout, find_shared_actor

config = Config()
config.ray_namespace = "single"
config.synchronizer.sync_method = "memory"
(store,) = MemorySync.shared_actors(config)
fetched = []
explorer_side = threading.Thread(target=lambda: fetched.append(MemorySync(config).fetch(1, timeout=30)))
explorer_side.start()  # before the store exists, as a role built first waits for it
time.sleep(0.3)
actor = store.start("single")
trainer = MemorySync(config)
weights = {"w": torch.full((2,), 3.0), "b": torch.ones(3).to(torch.bfloat16)}
trainer.publish(weights, 1)
weights["w"] += 1  # the trainer's next step moves its weights in place
explorer_side.join(30)
try:
    MemorySync(config).fetch(2, timeout=0.2)
    timed_out = False
except SyncTimeout:
    timed_out = True
store.remove_leftover("single")  # the launcher's end of the run
try:
    find_shared_actor(MemorySync.ACTOR_NAME, "single", timeout=0.1)
    removed = False
except ValueError:
    removed = True
print(json.dumps({
    "local": isinstance(trainer.store, LocalActor),
    "version": fetched[0].version,
    "w": fetched[0].state_dict["w"].tolist(),
    "b": [str(fetched[0].state_dict["b"].dtype), fetched[0].state_dict["b"].float().tolist()],
    "removed": removed,
    "timed_out": timed_out,
    "ray": "ray" in sys.modules,
}))
"""


def test_without_ray_memory_sync_passes_a_copy_of_the_weights_in_the_process() -> None:
    """A single-process run (``cluster.single_process``): the weight store is an object of the
    process, found by a side built before it; the explorer gets the published values even after
    the trainer's weights moved on, and a version not published times out as on Ray."""
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", WITHOUT_RAY], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["local"] and not report["ray"]
    assert report["version"] == 1
    assert report["w"] == [3.0, 3.0]  # published before the in-place update
    assert report["b"] == ["torch.bfloat16", [1.0, 1.0, 1.0]]
    assert report["timed_out"] and report["removed"]
