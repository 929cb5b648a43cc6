"""Priority replay on every queue backend (memory, sqlite, jsonl, PostgreSQL): newest model
versions first, eviction, reuse after a cooldown, and (durable ones) state that survives a restart."""

from __future__ import annotations

import time

import pytest
from buffer_helpers import buffer_config, make_experience, rewards

from trinity.buffer import EndOfBuffer, open_experience_reader, open_experience_writer

QUEUES = ["memory", "sqlite", "jsonl", "postgres"]


def priority_buffer(kind, tmp_path, capacity=10000, **replay):
    storage = buffer_config(kind, tmp_path, capacity=capacity, replay_buffer={"enable": True, **replay})
    return storage, open_experience_writer(storage, "w"), open_experience_reader(storage)


@pytest.mark.parametrize("kind", QUEUES)
def test_newest_model_version_first_ties_oldest_first(kind, tmp_path):
    _, writer, reader = priority_buffer(kind, tmp_path)
    writer.write([make_experience(i, model_version=v) for i, v in enumerate([1, 3, 2, 3])])
    assert rewards(reader.read(4)) == [1, 3, 2, 0]


@pytest.mark.parametrize("kind", QUEUES)
def test_full_queue_drops_the_lowest_priority(kind, tmp_path):
    _, writer, reader = priority_buffer(kind, tmp_path, capacity=2)
    writer.write([make_experience(i, model_version=v) for i, v in enumerate([2, 0, 5])])
    assert rewards(reader.read(3, timeout=0.1)) == [2, 0]


@pytest.mark.parametrize("kind", QUEUES)
def test_without_cooldown_each_experience_is_read_once(kind, tmp_path):
    _, writer, reader = priority_buffer(kind, tmp_path)
    writer.write([make_experience(0)])
    writer.finish()
    assert rewards(reader.read(2)) == [0]
    with pytest.raises(EndOfBuffer):
        reader.read(1)


@pytest.mark.parametrize("kind", QUEUES)
def test_reuse_after_cooldown_with_decayed_priority(kind, tmp_path):
    _, writer, reader = priority_buffer(kind, tmp_path, reuse_cooldown_time=0.2, priority_fn_args={"decay": 2.0})
    writer.write([make_experience(0, model_version=4), make_experience(1, model_version=3)])
    assert rewards(reader.read(1)) == [0]  # priority 4 before 3
    time.sleep(0.3)
    assert rewards(reader.read(1)) == [1]  # 0 is back but decayed to 4 - 2 * 1 = 2 < 3
    assert rewards(reader.read(1)) == [0]
    started = time.monotonic()
    assert rewards(reader.read(1, timeout=2)) == [1]  # both cooling: waits; then 3 - 2 = 1 beats 4 - 4 = 0
    assert time.monotonic() - started >= 0.1


@pytest.mark.parametrize("kind", QUEUES)
def test_decay_limit_randomization_stops_after_use_count_limit(kind, tmp_path):
    args = {"use_count_limit": 2, "sigma": 0.0}
    _, writer, reader = priority_buffer(
        kind, tmp_path, reuse_cooldown_time=0.0, priority_fn="decay_limit_randomization", priority_fn_args=args
    )
    writer.write([make_experience(0)])
    writer.finish()
    assert rewards(reader.read(1)) == [0]
    assert rewards(reader.read(1)) == [0]
    with pytest.raises(EndOfBuffer):
        reader.read(1)


def test_unknown_priority_fn_is_named(tmp_path):
    from trinity.plugins import UnknownPluginError

    with pytest.raises(UnknownPluginError, match="priority function 'lifo'.*linear_decay"):
        priority_buffer("memory", tmp_path, priority_fn="lifo")


@pytest.mark.parametrize("kind", ["sqlite", "jsonl", "postgres"])
def test_priorities_and_use_counts_survive_a_restart(kind, tmp_path):
    args = {"decay": 2.0, "use_count_limit": 2}
    replay = {"reuse_cooldown_time": 0.0, "priority_fn": "decay_limit_randomization", "priority_fn_args": args}
    storage, writer, reader = priority_buffer(kind, tmp_path, **replay)
    writer.write([make_experience(i, model_version=v) for i, v in enumerate([1, 3, 2])])
    assert rewards(reader.read(1)) == [1]  # 3, back with 3 - 2 = 1
    reader.close()
    writer.close()

    writer, reader = open_experience_writer(storage, "w"), open_experience_reader(storage)
    assert rewards(reader.read(2)) == [2, 0]  # 2, then 1: 0 came in before 1 came back
    assert rewards(reader.read(1)) == [1]  # its second use: retired (use_count_limit 2)
    writer.finish()
    assert rewards(reader.read(5)) == [2, 0]  # 2 - 2 = 0, 1 - 2 = -1; both retired now
    with pytest.raises(EndOfBuffer):
        reader.read(1)


def test_wrong_priority_fn_args_are_named(tmp_path):
    with pytest.raises(ValueError, match=r"replay_buffer.priority_fn_args of 'linear_decay': sigma: Extra inputs"):
        priority_buffer("sqlite", tmp_path, priority_fn_args={"sigma": 1.0})
