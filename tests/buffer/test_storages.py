"""Every experience storage through open_experience_writer/reader: order, partial batches,
timeouts, end of data, capacity and (durable ones) resume after a restart."""

from __future__ import annotations

import threading
import time

import pytest
from buffer_helpers import ALL_KINDS, DURABLE_KINDS, buffer_config, make_experience, rewards

from trinity.buffer import BufferTimeout, EndOfBuffer, open_experience_reader, open_experience_writer


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_fifo_partial_batch_and_end(kind, tmp_path):
    storage = buffer_config(kind, tmp_path)
    first, second = open_experience_writer(storage, "w1"), open_experience_writer(storage, "w2")
    reader = open_experience_reader(storage)
    first.write([make_experience(i) for i in range(5)])
    second.write([make_experience(i) for i in range(5, 8)])
    assert rewards(reader.read(4)) == [0, 1, 2, 3]
    started = time.monotonic()
    assert rewards(reader.read(10, timeout=0.3)) == [4, 5, 6, 7]  # partial batch after the timeout
    assert time.monotonic() - started >= 0.25
    with pytest.raises(BufferTimeout, match=rf"buffer '{storage.name}': no experience arrived within 0.2 s"):
        reader.read(2, timeout=0.2)
    first.finish()
    with pytest.raises(BufferTimeout):  # w2 is still writing
        reader.read(2, timeout=0.1)
    second.write([make_experience(8)])
    second.finish()
    assert rewards(reader.read(2)) == [8]
    with pytest.raises(EndOfBuffer, match=storage.name):
        reader.read(2)


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_reader_waits_for_a_full_batch(kind, tmp_path):
    storage = buffer_config(kind, tmp_path)
    writer, reader = open_experience_writer(storage), open_experience_reader(storage)

    def late_writes():
        for i in range(3):
            time.sleep(0.05)
            writer.write([make_experience(i)])

    thread = threading.Thread(target=late_writes)
    thread.start()
    assert rewards(reader.read(3, timeout=5)) == [0, 1, 2]
    thread.join()


@pytest.mark.parametrize("kind", ["memory", "sqlite", "jsonl", "postgres"])
def test_queue_capacity_holds_writers_back(kind, tmp_path):
    storage = buffer_config(kind, tmp_path, capacity=4)
    writer, reader = open_experience_writer(storage), open_experience_reader(storage)
    writer.write([make_experience(i) for i in range(4)])
    done = threading.Event()
    thread = threading.Thread(target=lambda: (writer.write([make_experience(4), make_experience(5)]), done.set()))
    thread.start()
    assert not done.wait(0.3)  # full: the writer waits
    assert rewards(reader.read(2)) == [0, 1]
    assert done.wait(5)
    thread.join()
    assert rewards(reader.read(4)) == [2, 3, 4, 5]


@pytest.mark.parametrize("kind", DURABLE_KINDS)
def test_restarted_reader_continues_after_what_it_read(kind, tmp_path):
    storage = buffer_config(kind, tmp_path)
    writer = open_experience_writer(storage, "explorer")
    writer.write([make_experience(i) for i in range(6)])
    assert rewards(open_experience_reader(storage).read(2)) == [0, 1]
    assert rewards(open_experience_reader(storage).read(2)) == [2, 3]  # auto-commit: a read consumes
    assert rewards(open_experience_reader(storage, reader_name="other").read(3)) == [0, 1, 2]  # own cursor


@pytest.mark.parametrize("kind", DURABLE_KINDS)
def test_uncommitted_reads_come_back(kind, tmp_path):
    storage = buffer_config(kind, tmp_path)
    open_experience_writer(storage).write([make_experience(i) for i in range(6)])
    reader = open_experience_reader(storage, auto_commit=False)
    assert rewards(reader.read(2)) == [0, 1]
    reader.commit()
    state = reader.state_dict()
    assert rewards(reader.read(2)) == [2, 3]  # read, never committed: a crash here...
    restarted = open_experience_reader(storage, auto_commit=False)
    assert rewards(restarted.read(2)) == [2, 3]  # ...gets them again
    restarted.load_state_dict(state)  # the trainer's checkpoint wins over the cursor
    assert rewards(restarted.read(4)) == [2, 3, 4, 5]


@pytest.mark.parametrize("kind", ["sqlite", "sql", "jsonl"])
def test_missing_parent_folders_are_created(kind, tmp_path):
    storage = buffer_config(kind, tmp_path / "job" / "buffer")
    open_experience_writer(storage).write([make_experience(0)])
    assert rewards(open_experience_reader(storage).read(1)) == [0]


def test_writer_restarted_under_its_name_reopens_the_buffer(tmp_path):
    storage = buffer_config("sqlite", tmp_path)
    writer = open_experience_writer(storage, "explorer")
    writer.write([make_experience(0)])
    writer.finish()
    reader = open_experience_reader(storage)
    assert rewards(reader.read(5)) == [0]
    with pytest.raises(EndOfBuffer):
        reader.read(1)
    open_experience_writer(storage, "explorer")  # a new stage of the same explorer
    with pytest.raises(BufferTimeout):
        reader.read(1, timeout=0.1)


def test_sql_storage_needs_a_path():
    from trinity.config.schema import StorageConfig

    with pytest.raises(ValueError, match="storage_type sql needs a path"):
        open_experience_writer(StorageConfig(name="x", storage_type="sql"))


def test_unknown_storage_type_names_the_choices(tmp_path):
    from trinity.plugins import UnknownPluginError

    with pytest.raises(UnknownPluginError, match="queue"):
        open_experience_writer(buffer_config("sqlite", tmp_path, storage_type="quue"))


def test_jsonl_lines_of_an_unfinished_append_are_never_read(tmp_path):
    """A writer killed half-way through its append leaves bytes the state does not count: no
    reader sees them, and the next append replaces them."""
    storage = buffer_config("jsonl", tmp_path)
    writer, reader = open_experience_writer(storage), open_experience_reader(storage)
    writer.write([make_experience(0)])
    path = tmp_path / "buffer.jsonl"
    line = path.read_bytes()
    with open(path, "ab") as f:  # a torn line, then a whole one the state never counted
        f.write(line[:-20] + b"\n" + line)
    assert rewards(reader.read(5, timeout=0.1)) == [0]
    with pytest.raises(BufferTimeout):
        reader.read(5, timeout=0.1)
    writer.write([make_experience(1)])
    assert rewards(reader.read(5, timeout=0.1)) == [1]
    assert path.read_bytes().count(b"\n") == 2


def test_postgres_stores_experiences_out_of_line_uncompressed(postgres_url, tmp_path):
    """STORAGE EXTERNAL: the server does not try to compress serialised tensors (1.5x the write rate)."""
    import sqlalchemy as sa

    from trinity.buffer.storage.sql import database_url

    storage = buffer_config("memory", tmp_path, path=postgres_url, replay_buffer={"enable": True})
    open_experience_writer(storage).write([make_experience(0)])
    assert rewards(open_experience_reader(storage).read(1)) == [0]
    query = "SELECT attstorage FROM pg_attribute WHERE attrelid = CAST(:table AS regclass) AND attname = 'data'"
    with sa.create_engine(database_url(postgres_url)).connect() as conn:
        for table in (f"{storage.name}_exp", f"{storage.name}_replay"):
            assert conn.execute(sa.text(query), {"table": table}).scalar() == "e", table
