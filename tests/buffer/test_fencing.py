"""Durable buffers: a writer's state commits with its rows, a reopened name fences off the
older handle, and a reader tells a dead writer from a slow one by its heartbeat."""

from __future__ import annotations

import time

import pytest
from buffer_helpers import buffer_config, make_experience, rewards

from trinity.buffer import Fenced, open_experience_reader, open_experience_writer

KINDS = ["sqlite", "jsonl"]


@pytest.mark.parametrize("kind", KINDS)
def test_the_writer_state_commits_with_its_rows_and_survives_a_restart(kind, tmp_path):
    storage = buffer_config(kind, tmp_path)
    writer = open_experience_writer(storage, "explorer")
    assert writer.state() is None
    writer.write([make_experience(0), make_experience(1)], state={"step": 1})
    writer.write([make_experience(2)], state={"step": 2})
    restarted = open_experience_writer(storage, "explorer")
    assert restarted.state() == {"step": 2}
    assert open_experience_writer(storage, "other").state() is None
    assert rewards(open_experience_reader(storage).read(3)) == [0, 1, 2]


@pytest.mark.parametrize("kind", KINDS)
def test_a_reopened_writer_name_fences_off_the_older_process(kind, tmp_path):
    storage = buffer_config(kind, tmp_path)
    orphan = open_experience_writer(storage, "explorer")
    orphan.write([make_experience(0)], state={"step": 1})
    replacement = open_experience_writer(storage, "explorer")
    with pytest.raises(Fenced, match=r"writer 'explorer' was opened again by another process \(generation 2; "):
        orphan.write([make_experience(1)], state={"step": 2})
    with pytest.raises(Fenced), orphan.fenced():
        pytest.fail("a stale writer's fenced block ran")
    with pytest.raises(Fenced):
        orphan.finish()
    replacement.write([make_experience(2)], state={"step": 2})
    with replacement.fenced():
        pass
    replacement.finish()
    assert replacement.state() == {"step": 2}
    assert rewards(open_experience_reader(storage).read(5)) == [0, 2]


@pytest.mark.parametrize("kind", KINDS)
def test_a_reopened_exclusive_reader_fences_off_the_older_process(kind, tmp_path):
    storage = buffer_config(kind, tmp_path)
    open_experience_writer(storage).write([make_experience(i) for i in range(4)])
    orphan = open_experience_reader(storage, auto_commit=False)
    assert rewards(orphan.read(2)) == [0, 1]
    replacement = open_experience_reader(storage, auto_commit=False)
    with pytest.raises(Fenced, match="reader 'trainer'"):
        orphan.commit()
    with pytest.raises(Fenced), orphan.fenced():
        pytest.fail("a stale reader's fenced block ran")
    assert rewards(replacement.read(4)) == [0, 1, 2, 3]
    replacement.commit()


@pytest.mark.parametrize("kind", KINDS)
def test_a_writer_without_heartbeat_is_dead_after_writer_timeout(kind, tmp_path):
    storage = buffer_config(kind, tmp_path, writer_timeout=0.4)
    alive = open_experience_writer(storage, "alive")
    reader = open_experience_reader(storage, auto_commit=False)
    since = time.time()
    time.sleep(0.8)
    assert reader.dead_writers(since) == {} and reader.silent_writers() == []  # its heartbeat runs
    alive.close()  # the heartbeat stops, as when the process dies
    time.sleep(0.25)  # two beats (0.1 s each) missed: silent, not yet dead
    assert reader.dead_writers(time.time()) == {}  # counted from when the reader began to wait
    assert reader.silent_writers() == ["alive"]
    time.sleep(0.6)
    dead = reader.dead_writers(since)
    assert list(dead) == ["alive"] and dead["alive"] >= 0.4
    open_experience_writer(storage, "alive").finish()
    assert reader.dead_writers(since) == {}  # finished writers are not waited for


@pytest.mark.parametrize("kind", KINDS)
def test_a_writer_dropped_without_close_stops_its_heartbeat(kind, tmp_path):
    storage = buffer_config(kind, tmp_path, writer_timeout=0.4)
    reader = open_experience_reader(storage, auto_commit=False)
    since = time.time()
    open_experience_writer(storage, "dropped")  # no reference kept
    time.sleep(0.8)
    assert list(reader.dead_writers(since)) == ["dropped"]


@pytest.mark.parametrize(("durability", "synchronous"), [("fast", 1), ("safe", 2)])
def test_durability_sets_how_sqlite_syncs_its_commits(tmp_path, durability, synchronous):
    """``buffer.durability`` reaches the experience buffer; safe: sqlite synchronous=FULL (2)."""
    from trinity.buffer.storage.sql import SQLStorage
    from trinity.config import load_config

    config = tmp_path / "experiment.yaml"
    config.write_text(
        f"mode: explore\ncheckpoint_root_dir: {tmp_path}\n"
        f"model: {{model_path: {tmp_path}, max_prompt_tokens: 8, max_response_tokens: 4}}\n"
        f"buffer: {{durability: {durability}, trainer_input: {{experience_buffer: {{storage_type: sql, "
        f"path: {tmp_path / 'buffer.db'}}}}}, explorer_input: {{taskset: {{path: {tmp_path / 't.jsonl'}}}}}}}\n"
    )
    storage = load_config(config).buffer.trainer_input.experience_buffer
    assert storage.durability == durability
    log = SQLStorage(storage).open_log()
    with log.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == synchronous


def test_a_stale_trainer_cannot_publish_checkpoint_weights_over_its_replacement(tmp_path):
    """Checkpoint sync's files outlive the run: the version becomes visible inside the reader's
    fence, so an orphan trainer fails instead of pointing the explorers at its weights."""
    import torch

    from trinity.config.schema import Config
    from trinity.synchronizer.methods import CheckpointSync

    storage = buffer_config("sqlite", tmp_path)
    config = Config.model_validate({"checkpoint_job_dir": str(tmp_path / "job")})  # not derived here: say where
    sync = CheckpointSync(config)
    orphan = open_experience_reader(storage, auto_commit=False)
    sync.publish({"w": torch.zeros(2)}, 1, fence=orphan.fenced)
    replacement = open_experience_reader(storage, auto_commit=False)
    with pytest.raises(Fenced, match="reader 'trainer'"):
        sync.publish({"w": torch.ones(2)}, 2, fence=orphan.fenced)
    assert sync.fetch(0, timeout=0).version == 1
    sync.publish({"w": torch.ones(2)}, 2, fence=replacement.fenced)
    assert sync.fetch(0, timeout=0).version == 2


def test_a_buffer_an_older_trinity_wrote_gets_the_new_columns_and_keeps_its_rows(tmp_path, caplog):
    """Before fencing, the writers and cursors tables had no generation (nor a writer state, nor
    an append count): opening such a file adds the columns (generation 0, no state, no appends)
    instead of failing on them."""
    import sqlite3

    from trinity.buffer.storage.sql import table_prefix

    storage = buffer_config("sqlite", tmp_path)
    writer = open_experience_writer(storage, "explorer")
    writer.write([make_experience(0), make_experience(1)])
    writer.close()
    prefix = table_prefix(storage.name)
    with sqlite3.connect(storage.path) as old:  # as the older release left it
        dropped = (("writers", "state"), ("writers", "generation"), ("writers", "appends"), ("cursors", "generation"))
        for table, column in dropped:
            old.execute(f'ALTER TABLE "{prefix}_{table}" DROP COLUMN {column}')
    from trinity.buffer.storage import sql

    sql._ENGINES.clear()  # a new process: nothing cached about the file
    with caplog.at_level("WARNING"):
        restarted = open_experience_writer(storage, "explorer")
    assert any("added column generation" in r.message for r in caplog.records)
    assert any("added column appends" in r.message for r in caplog.records)
    assert restarted.state() is None
    restarted.write([make_experience(2)], state={"step": 1})
    restarted.finish()
    assert rewards(open_experience_reader(storage).read(3)) == [0, 1, 2]
