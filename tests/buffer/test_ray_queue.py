"""A queue without a path inside a Ray cluster: one named actor shared by every process."""

from __future__ import annotations

import pytest
from buffer_helpers import buffer_config, make_experience, rewards

from trinity.buffer import EndOfBuffer, open_experience_reader, open_experience_writer
from trinity.buffer.storage.ray_queue import ACTOR_PREFIX, kill_queue_actor


def test_explorer_actor_writes_trainer_reads(ray_session, tmp_path):
    ray = ray_session
    storage = buffer_config("memory", tmp_path)

    @ray.remote(num_cpus=0)
    def explorer(storage, name, batches):
        writer = open_experience_writer(storage, name)
        for batch in batches:
            writer.write(batch)
        writer.finish()

    reader = open_experience_reader(storage)  # transparently the actor: Ray is running
    assert ray.get_actor(ACTOR_PREFIX + storage.name, namespace="trinity-buffer-tests")
    batches = [[make_experience(j) for j in range(i, i + 8)] for i in range(0, 80, 8)]
    ray.get([explorer.remote(storage, "explorer1", batches[:5]), explorer.remote(storage, "explorer2", batches[5:])])
    got = []
    with pytest.raises(EndOfBuffer):
        while True:
            batch = reader.read(16, timeout=10)
            got += batch
    assert sorted(rewards(got)) == list(range(80))
    kill_queue_actor(storage)


def test_namespaces_keep_queues_apart(ray_session, tmp_path):
    storage = buffer_config("memory", tmp_path)
    open_experience_writer(storage, namespace="ns_a").write([make_experience(1)])
    open_experience_writer(storage, namespace="ns_b").write([make_experience(2)])
    assert rewards(open_experience_reader(storage, namespace="ns_b").read(5, timeout=0.2)) == [2]
    assert rewards(open_experience_reader(storage, namespace="ns_a").read(5, timeout=0.2)) == [1]
    kill_queue_actor(storage, "ns_a")
    kill_queue_actor(storage, "ns_b")


def test_replay_in_the_queue_actor_reads_by_priority(ray_session, tmp_path):
    replay = {"enable": True, "priority_fn": "decay_limit_randomization", "priority_fn_args": {"use_count_limit": 1}}
    storage = buffer_config("memory", tmp_path, replay_buffer=replay)
    writer = open_experience_writer(storage, "explorer")
    writer.write([make_experience(i, model_version=v) for i, v in enumerate([1, 3, 2])])
    writer.finish()
    reader = open_experience_reader(storage)
    assert rewards(reader.read(3)) == [1, 2, 0]
    with pytest.raises(EndOfBuffer):
        reader.read(1)
    kill_queue_actor(storage)
