"""A PostgreSQL server stopped (as a crash would: ``pg_ctl -m immediate``) and started again
under a running writer and reader: heartbeats and operations ride out the outage as
``max_retry_times`` / ``max_retry_interval`` say, and nothing written is lost."""

from __future__ import annotations

import threading
import time

import pytest
import sqlalchemy as sa
from buffer_helpers import buffer_config, make_experience, rewards

from pg_cluster import missing_reason, throwaway_postgres
from trinity.buffer import open_experience_reader, open_experience_writer

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
    assert "writer 'explorer' could not send its heartbeat (OperationalError: " in outage[0]
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
    with pytest.raises(sa.exc.OperationalError, match=f"port {cluster.port} failed: Connection refused"):
        writer.write([make_experience(0)], state={"step": 1})
    assert time.monotonic() - started < 1
    assert messages(caplog, "out of reach") == []
    cluster.start()
    assert writer.state() is None  # nothing was half-written
