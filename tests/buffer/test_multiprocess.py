"""Several OS processes on one durable queue (a sqlite file, a PostgreSQL server): nothing lost,
nothing duplicated, even when the reader is killed (SIGKILL) mid-run and restarted."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from buffer_procs import storage

from trinity.buffer import open_experience_writer

HERE = Path(__file__).parent
PER_WRITER = 2500


def spawn(*args: object) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(HERE / "buffer_procs.py"), *map(str, args)], cwd=HERE)


@pytest.fixture(params=["sqlite", "postgres"])
def db(request, tmp_path) -> str:
    """Where the queue lives: a sqlite file or the session's PostgreSQL server."""
    if request.param == "postgres":
        return request.getfixturevalue("postgres_url")
    return str(tmp_path / "buffer.db")


@pytest.fixture
def name() -> str:
    """The buffer's name, unique: tests on the PostgreSQL server share its database."""
    return f"exp_{uuid.uuid4().hex[:8]}"


def writers(db: str, name: str) -> list[subprocess.Popen]:
    """Two writer processes, registered up front: a reader may otherwise end the buffer when the
    first has finished before the second has even started (the contract: readers end once every
    registered writer has finished)."""
    names = [f"explorer{w}" for w in range(2)]
    for writer_name in names:
        open_experience_writer(storage(db, name), writer_name).close()
    return [
        spawn("write", db, name, writer_name, w * PER_WRITER, PER_WRITER, 50) for w, writer_name in enumerate(names)
    ]


def wait_all(procs: list[subprocess.Popen], timeout: float = 90) -> None:
    for proc in procs:
        assert proc.wait(timeout) == 0


def result(out: Path) -> dict:
    return json.loads(out.read_text())


def assert_exactly_once(got: list[int], ordered: bool = True) -> None:
    duplicated = [value for value, n in Counter(got).items() if n > 1]
    assert not duplicated, f"read twice: {duplicated[:10]}"
    assert sorted(got) == list(range(2 * PER_WRITER)), f"lost: {sorted(set(range(2 * PER_WRITER)) - set(got))[:10]}"
    for w in range(2 if ordered else 0):  # one reader sees each writer's order
        mine = [g for g in got if w * PER_WRITER <= g < (w + 1) * PER_WRITER]
        assert mine == sorted(mine)


def test_two_writers_one_reader(tmp_path, db, name):
    out = tmp_path / "reader.json"
    procs = [*writers(db, name), spawn("read", db, name, out, 64, 0, 0)]
    wait_all(procs)
    assert result(out)["done"]
    assert_exactly_once(result(out)["got"])


def test_reader_killed_mid_run_resumes_without_loss(tmp_path, db, name):
    out = tmp_path / "reader.json"
    writing = writers(db, name)
    reader = spawn("read", db, name, out, 64, 0.01, 0)
    deadline = time.monotonic() + 60
    while not (out.exists() and len(result(out)["got"]) >= 1000):
        assert time.monotonic() < deadline and reader.poll() is None
        time.sleep(0.02)
    reader.kill()  # SIGKILL: no cleanup
    reader.wait()
    killed_at = len(result(out)["got"])
    assert killed_at < 2 * PER_WRITER
    wait_all([*writing, spawn("read", db, name, out, 64, 0, 0)])
    assert result(out)["done"]
    assert_exactly_once(result(out)["got"])


def test_competing_readers_sharing_a_name_split_the_data(tmp_path, db, name):
    outs = [tmp_path / f"reader{i}.json" for i in range(2)]
    wait_all([*writers(db, name), *(spawn("read", db, name, out, 32, 0, 1) for out in outs)])
    parts = [result(out)["got"] for out in outs]
    assert_exactly_once(parts[0] + parts[1], ordered=False)
    assert all(len(part) > 0 for part in parts)
