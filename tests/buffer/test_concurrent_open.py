"""Many processes creating the same fresh sqlite buffer at the same instant all succeed."""

from __future__ import annotations

import multiprocessing

import pytest

from trinity.buffer.storage.sql import SqlLog, database_url

PROCESSES = 8
ROUNDS = 6


def _open_and_write(url: str, start: multiprocessing.synchronize.Barrier, index: int, errors) -> None:
    try:
        start.wait()
        log = SqlLog(url, "exp")
        log.open_writer(f"writer{index}")
    except Exception as exc:  # reported to the parent, which fails the test naming it
        errors.put(f"process {index}: {type(exc).__name__}: {exc}")


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_eight_processes_open_a_fresh_sqlite_buffer_at_once(tmp_path, round_):
    context = multiprocessing.get_context("fork")  # forked after the imports: the opens start together
    start, errors = context.Barrier(PROCESSES), context.Queue()
    url = database_url(str(tmp_path / "buffer.db"))
    procs = [context.Process(target=_open_and_write, args=(url, start, i, errors)) for i in range(PROCESSES)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
    failures = [errors.get() for _ in range(errors.qsize())]
    assert not failures, failures
    assert [proc.exitcode for proc in procs] == [0] * PROCESSES
    log = SqlLog(url, "exp")
    assert not log.writers_done()
