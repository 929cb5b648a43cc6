"""A PostgreSQL server stopped (as a crash would: ``pg_ctl -m immediate``) and started again
under a running writer and reader: heartbeats and operations ride out the outage as
``max_retry_times`` / ``max_retry_interval`` say, and nothing written is lost."""

from __future__ import annotations

import threading
import time

import pytest
import sqlalchemy as sa
from buffer_helpers import buffer_config, make_experience, rewards

from helpers.pg_cluster import missing_reason, throwaway_postgres
from helpers.pg_cut import CommitCutter
from trinity.buffer import open_experience_reader, open_experience_writer
from trinity.buffer.errors import BufferUnavailable

pytestmark = pytest.mark.skipif(bool(missing_reason()), reason=missing_reason() or "")


@pytest.fixture
def cluster():
    """A server of the test's own: stopping the session's would break the other tests."""
    with throwaway_postgres(fsync="off") as cluster:
        yield cluster


def on_server(cluster, tmp_path, **settings):
    return buffer_config("sqlite", tmp_path, path=cluster.url, **settings)


def messages(caplog, part: str) -> list[str]:
    return [record.getMessage() for record in caplog.records if part in record.getMessage()]


def test_a_writer_heartbeat_rides_out_a_database_restart(cluster, tmp_path, caplog):
    """The heartbeat logs the outage once, goes on after it, and readers do not take the live
    writer for dead."""
    storage = on_server(cluster, tmp_path, writer_timeout=0.8, max_retry_times=1)
    writer = open_experience_writer(storage, "explorer")
    reader = open_experience_reader(storage, auto_commit=False)
    cluster.stop()
    time.sleep(0.8)  # four heartbeats fail
    cluster.start()
    back = time.time()
    time.sleep(1.2)  # longer than writer_timeout
    assert reader.dead_writers(back) == {}
    writer.write([make_experience(0)], state={"step": 1})
    assert rewards(reader.read(1)) == [0]
    writer.finish()
    outage = messages(caplog, "heartbeat")
    assert len(outage) == 2, outage
    assert "writer 'explorer' could not send its heartbeat (BufferUnavailable: " in outage[0]
    assert f"database postgresql+psycopg://postgres@127.0.0.1:{cluster.port}/postgres out of reach" in outage[0]
    assert "retrying every 0.2 s" in outage[0]
    assert outage[1].endswith("writer 'explorer' sends its heartbeat again")


def test_a_write_waits_for_a_restarting_server_within_max_retry_times(cluster, tmp_path, caplog):
    storage = on_server(cluster, tmp_path, max_retry_times=10, max_retry_interval=1)
    writer = open_experience_writer(storage, "explorer")
    reader = open_experience_reader(storage, auto_commit=False)
    writer.write([make_experience(0)], state={"step": 1})
    cluster.stop()
    restart = threading.Timer(1.5, cluster.start)
    restart.start()
    writer.write([make_experience(1)], state={"step": 2})  # waits for the server
    restart.join()
    assert writer.state() == {"step": 2}
    assert rewards(reader.read(2)) == [0, 1]
    waits = messages(caplog, "out of reach")
    assert 1 <= len(waits) < 9, waits
    assert "attempt 2 of 10 in 1 s (max_retry_times, max_retry_interval)" in waits[0]
    assert "Connection refused" in waits[0]
    assert "postgres@127.0.0.1" in waits[0]


def test_with_one_attempt_an_operation_fails_at_once_naming_the_server(cluster, tmp_path, caplog):
    storage = on_server(cluster, tmp_path, max_retry_times=0)  # Trinity-RFT's counting: 0 is one attempt
    writer = open_experience_writer(storage, "explorer")
    cluster.stop()
    started = time.monotonic()
    with pytest.raises(BufferUnavailable, match=f"port {cluster.port} failed: Connection refused") as raised:
        writer.write([make_experience(0)], state={"step": 1})
    assert time.monotonic() - started < 1
    assert f"buffer '{storage.name}': database " in str(raised.value) and "(1 attempt: max_retry_times" in str(
        raised.value
    )
    assert messages(caplog, "out of reach") == []
    cluster.start()
    assert writer.state() is None  # nothing was half-written


@pytest.mark.parametrize("how", ["lost", "landed"])
def test_an_append_whose_commit_was_cut_is_stored_exactly_once(cluster, tmp_path, caplog, how):
    """The connection drops at the COMMIT of an append: before the server had it (``lost``: the
    append is written again once connected) or after it committed (``landed``: it is not). The
    writer goes on; a reader gets every experience once, in order."""
    with CommitCutter(cluster.port) as cutter:
        storage = buffer_config("sqlite", tmp_path, path=cutter.url, max_retry_times=3)
        writer = open_experience_writer(storage, "explorer")
        reader = open_experience_reader(storage, auto_commit=False)
        writer.write([make_experience(0)], state={"step": 1})
        cutter.cut_next(how)
        writer.write([make_experience(1), make_experience(2)], state={"step": 2})
        assert cutter.cuts == [how]
        writer.write([make_experience(3)], state={"step": 3})
        assert writer.state() == {"step": 3}
        assert rewards(reader.read(10)) == [0, 1, 2, 3]
        writer.finish()
    (told,) = messages(caplog, "lost its connection")
    landed = "it had landed" if how == "landed" else "it had not landed: written again"
    assert f"buffer '{storage.name}': writer 'explorer' lost its connection" in told and landed in told, told


def test_an_append_cut_at_its_commit_with_no_server_after_says_its_outcome_is_unknown(cluster, tmp_path):
    """No connection comes back within ``max_retry_times`` after the cut: the append fails with
    ``BufferUnavailable`` naming the buffer and the doubt; the writer's state tells afterwards."""
    with CommitCutter(cluster.port) as cutter:
        storage = buffer_config("sqlite", tmp_path, path=cutter.url, max_retry_times=2)
        writer = open_experience_writer(storage, "explorer")
        writer.write([make_experience(0)], state={"step": 1})
        cutter.cut_next("landed", and_go_down=True)
        with pytest.raises(BufferUnavailable, match="may have landed") as raised:
            writer.write([make_experience(1)], state={"step": 2})
        assert raised.value.lost and f"buffer '{storage.name}': database " in str(raised.value)
        assert "(2 attempts, 1 s apart: max_retry_times, max_retry_interval)" in str(raised.value)
        cutter.come_back()
        assert writer.state() == {"step": 2}  # it had landed
        assert rewards(open_experience_reader(storage).read(10)) == [0, 1]


def test_a_buffer_without_append_counts_gets_them_and_stores_a_cut_append_once(cluster, tmp_path, caplog):
    """A buffer an older trinity wrote on the server (no ``appends`` column) gets the column
    (0 appends) and the cut append is stored once."""
    from trinity.buffer.storage import sql

    with CommitCutter(cluster.port) as cutter:
        storage = buffer_config("sqlite", tmp_path, path=cutter.url, max_retry_times=3)
        writer = open_experience_writer(storage, "explorer")
        writer.write([make_experience(0)], state={"step": 1})
        writer.close()
        engine = sa.create_engine(sql.database_url(cluster.url))
        with engine.begin() as conn:
            conn.exec_driver_sql(f'ALTER TABLE "{sql.table_prefix(storage.name)}_writers" DROP COLUMN appends')
        engine.dispose()
        sql._ENGINES.clear()  # a new process: nothing cached about the database
        writer = open_experience_writer(storage, "explorer")
        assert any("added column appends" in message for message in messages(caplog, "added column"))
        cutter.cut_next("landed")
        writer.write([make_experience(1)], state={"step": 2})
        assert cutter.cuts == ["landed"]
        assert rewards(open_experience_reader(storage).read(10)) == [0, 1]
