"""Rows an older trinity stored with a pickled header: refused unrun, read when the owner says the
store is trusted, and rewritten without pickle by ``trinity buffer migrate``."""

from __future__ import annotations

import json
import pickle
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa
from buffer_helpers import buffer_config, make_experience, rewards

from trinity.buffer import SerializationError, open_experience_reader, open_experience_writer
from trinity.buffer.serialization import FORMAT_VERSION, MAGIC, is_pickled, serialize_experience

HEAD = struct.Struct("<3sBBI")  # magic, version, header codec, header length


class _Payload:
    """What a hostile row holds: unpickling it creates ``marker``."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


class GoneClass:
    """An object of a class the migrating process cannot import (this test module)."""


def _as_old_trinity_wrote(blob: bytes, info: dict) -> bytes:
    """``blob`` with its JSON header pickled (codec 1) and ``info`` in it, as before 2026-11-27."""
    _, _, _, meta_len = HEAD.unpack_from(blob)
    header = json.loads(blob[HEAD.size : HEAD.size + meta_len])
    header["i"] = info
    meta = pickle.dumps(header)
    meta += b" " * (-(HEAD.size + len(meta)) % 8)  # tensors stay 8-byte aligned, as the writer kept them
    return HEAD.pack(MAGIC, FORMAT_VERSION, 1, len(meta)) + meta + blob[HEAD.size + meta_len :]


def _experience_table(engine: sa.Engine) -> sa.Table:
    meta = sa.MetaData()
    meta.reflect(engine)
    (table,) = [t for t in meta.sorted_tables if t.name.endswith("_exp")]
    return table


def _buffer_with_old_rows(tmp_path: Path, infos: dict[int, dict], **overrides):
    """A sql buffer of four experiences, those of ``infos`` rewritten as an old trinity pickled them."""
    storage = buffer_config("sql", tmp_path, **overrides)
    writer = open_experience_writer(storage, "explorer")
    writer.write([make_experience(i) for i in range(4)])
    writer.finish()
    engine = sa.create_engine(storage.path)
    table = _experience_table(engine)
    with engine.begin() as conn:
        for (row_id,) in conn.execute(sa.select(table.c.id)).all():
            if row_id - 1 in infos:
                old = _as_old_trinity_wrote(serialize_experience(make_experience(row_id - 1)), infos[row_id - 1])
                conn.execute(table.update().where(table.c.id == row_id).values(data=old))
    engine.dispose()
    return storage


def _migrate(path: str, *flags: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "trinity.cli", "buffer", "migrate", path, *flags]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def test_a_pickled_row_is_refused_unrun_and_the_error_says_what_to_do(tmp_path):
    marker = tmp_path / "ran"
    storage = _buffer_with_old_rows(tmp_path, {2: {"payload": _Payload(marker)}})
    reader = open_experience_reader(storage)
    with pytest.raises(SerializationError, match="trinity buffer migrate.*trust_pickled_rows: true"):
        reader.read(4, timeout=5)
    assert not marker.exists()


def test_a_trusted_store_is_read_as_the_old_trinity_wrote_it(tmp_path):
    storage = _buffer_with_old_rows(tmp_path, {1: {"ids": {3, 1}, "score": np.float32(0.5)}}, trust_pickled_rows=True)
    read = open_experience_reader(storage).read(4, timeout=5)
    assert rewards(read) == [0, 1, 2, 3] and read[1].info == {"ids": {1, 3}, "score": np.float32(0.5)}


def test_migrate_counts_without_reading_then_rewrites_with_the_owners_word(tmp_path):
    marker = tmp_path / "ran"
    infos = {
        0: {"ids": {2, 1}, "path": Path("/data/x")},
        1: {"payload": _Payload(marker)},
        2: {"n": np.int64(7)},
        3: {"object": GoneClass()},
    }
    storage = _buffer_with_old_rows(tmp_path, infos)
    counted = _migrate(storage.path)
    assert counted.returncode == 1 and "4 pickled rows left as they are" in counted.stdout, counted.stdout
    assert not marker.exists()  # counting reads only the codec byte

    # with the owner's word, rows are read (the payload runs, as the owner accepted); the object of
    # a class that is gone cannot be read, so its row stays as it was and is named
    migrated = _migrate(storage.path, "--trust-pickled-rows")
    assert migrated.returncode == 1, migrated.stderr
    assert "rewritten without pickle: 3 of 4" in migrated.stdout and marker.exists()
    assert "kept as it was: " in migrated.stderr and "row 4" in migrated.stderr
    engine = sa.create_engine(storage.path)
    table = _experience_table(engine)
    with engine.connect() as conn:
        pickled = [row_id for row_id, data in conn.execute(sa.select(table.c.id, table.c.data)) if is_pickled(data)]
    assert pickled == [4]
    with engine.begin() as conn:  # the owner drops the row that cannot be kept; the rest reads untrusted
        conn.execute(table.delete().where(table.c.id == 4))
    engine.dispose()
    read = open_experience_reader(storage).read(3, timeout=5)
    assert [e.info for e in read] == [{"ids": [1, 2], "path": "/data/x"}, {"payload": None}, {"n": 7}]
    assert _migrate(storage.path).stdout.strip().endswith("no pickled rows: nothing to migrate")
