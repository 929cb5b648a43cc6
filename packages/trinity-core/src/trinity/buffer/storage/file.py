"""Experiences as JSON lines, for debugging and for a queue's ``.jsonl`` mirror.

``<path>`` holds one experience per line (``experience_to_dict``, readable). A position
packs the lines read and their byte length: ``lines * 2**48 + offset``.
``<path>.state.json`` holds the writers (generation, heartbeat, state), the reader cursors
and the line count. Every change happens under an exclusive lock on ``<path>.lock``, so
several processes can append and read the same file; only complete lines are ever read,
and only the lines the state counts (an append that died before its state was saved leaves
lines no reader sees; the next append cuts them off).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from filelock import FileLock

from trinity.buffer.errors import Fenced
from trinity.buffer.serialization import experience_from_dict, experience_to_dict
from trinity.buffer.storage.base import Lease, Log, LogStorage, WriterStatus
from trinity.common.experience import Experience
from trinity.config.schema import StorageConfig

_LINE = 2**48
_SECTION = {"writer": "writers", "reader": "cursors"}


class JsonlLog(Log):
    def __init__(self, path: str, name: str):
        self.name, self.path = name, os.path.abspath(path)
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self.state_path = self.path + ".state.json"
        self._lock = FileLock(self.path + ".lock")  # per thread: a writer's heartbeat thread takes its turn
        with self._lock:
            open(self.path, "ab").close()

    def _state(self) -> dict[str, Any]:
        if not os.path.exists(self.state_path):
            return {"writers": {}, "cursors": {}, "lines": 0, "bytes": 0}
        with open(self.state_path) as f:
            return json.load(f)

    def _save(self, state: dict[str, Any]) -> None:
        tmp = f"{self.state_path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(state, f)
        os.replace(tmp, self.state_path)

    def _check(self, state: dict[str, Any], lease: Lease) -> dict[str, Any]:
        """The entry of ``lease``'s name; ``Fenced`` unless ``lease`` is its current generation."""
        entry = state[_SECTION[lease.kind]].get(lease.name, {})
        if entry.get("generation", 0) != lease.generation:
            raise Fenced(self.name, lease.kind, lease.name, lease.generation, entry.get("generation", 0))
        return entry

    def _bump(self, kind: str, name: str, **values: Any) -> Lease:
        with self._lock:
            state = self._state()
            entry = state[_SECTION[kind]].setdefault(name, {})
            entry.update(values, generation=entry.get("generation", 0) + 1)
            self._save(state)
        return Lease(kind, name, entry["generation"])

    @contextmanager
    def fence(self, lease: Lease) -> Iterator[None]:
        with self._lock:
            self._check(self._state(), lease)
            yield

    def open_writer(self, writer: str) -> Lease:
        return self._bump("writer", writer, finished=False, updated=time.time())

    def open_reader(self, reader: str) -> Lease:
        with self._lock:
            cursor = self._state()["cursors"].get(reader, {})
        return self._bump("reader", reader, position=cursor.get("position", 0), progress=cursor.get("progress", 0))

    def _mark_writer(self, lease: Lease, **values: Any) -> None:
        with self._lock:
            state = self._state()
            self._check(state, lease).update(values)
            self._save(state)

    def heartbeat(self, lease: Lease) -> None:
        self._mark_writer(lease, updated=time.time())

    def finish_writer(self, lease: Lease) -> None:
        self._mark_writer(lease, finished=True, updated=time.time())

    def writer_statuses(self) -> list[WriterStatus]:
        with self._lock:
            writers = self._state()["writers"]
        return [WriterStatus(name, w["finished"], w["updated"]) for name, w in writers.items()]

    def writer_state(self, writer: str) -> dict[str, Any] | None:
        with self._lock:
            return self._state()["writers"].get(writer, {}).get("state")

    def append(self, experiences: list[Experience], lease: Lease, state: dict[str, Any] | None) -> None:
        lines = "".join(json.dumps(experience_to_dict(e)) + "\n" for e in experiences).encode()
        with self._lock:
            saved = self._state()
            writer = self._check(saved, lease)
            with open(self.path, "r+b") as f:
                f.truncate(saved["bytes"])  # lines of an append that died before its state was saved
                f.seek(saved["bytes"])
                f.write(lines)
            saved["lines"] += len(experiences)
            saved["bytes"] += len(lines)
            writer["updated"] = time.time()
            if state is not None:
                writer["state"] = state
            self._save(saved)

    def fetch(self, after: int, n: int) -> tuple[list[Experience], int]:
        out: list[Experience] = []
        lines, offset = divmod(after, _LINE)
        committed = self._state()["lines"]  # replaced atomically: readable without the lock
        with open(self.path, "rb") as f:
            f.seek(offset)
            while len(out) < n and lines + len(out) < committed:
                line = f.readline()
                if not line.endswith(b"\n"):  # end of file, or a line still being written
                    break
                offset += len(line)
                out.append(experience_from_dict(json.loads(line)))
        return out, (lines + len(out)) * _LINE + offset

    def claim(self, reader: str, n: int) -> tuple[list[Experience], int]:
        with self._lock:
            state = self._state()
            experiences, position = self.fetch(state["cursors"].get(reader, {}).get("position", 0), n)
            if experiences:
                state["cursors"][reader] = {"position": position, "progress": position}
                self._save(state)
        return experiences, position

    def cursor(self, reader: str) -> int:
        with self._lock:
            return self._state()["cursors"].get(reader, {}).get("position", 0)

    def set_cursor(self, reader: str, position: int, lease: Lease | None = None) -> None:
        self._move(reader, lease, position=position, progress=position)

    def set_progress(self, reader: str, position: int, lease: Lease | None = None) -> None:
        self._move(reader, lease, progress=position)

    def _move(self, reader: str, lease: Lease | None, **values: int) -> None:
        with self._lock:
            state = self._state()
            if lease:
                self._check(state, lease)
            cursor = state["cursors"].setdefault(reader, {"position": 0, "progress": 0})
            cursor.update(values)
            self._save(state)

    def unread(self) -> int:
        with self._lock:
            state = self._state()
        return state["lines"] - min((c["progress"] // _LINE for c in state["cursors"].values()), default=0)


def jsonl_path(storage: StorageConfig) -> str:
    """``path`` itself when it names a .jsonl/.json file, else ``<path>/<name>.jsonl``."""
    if storage.jsonl_file:
        return storage.path
    return os.path.join(storage.path or "", f"{storage.name or 'experiences'}.jsonl")


class FileStorage(LogStorage):
    """``storage_type: file``: experiences as readable JSON lines (debugging, explore mode)."""

    def __init__(self, storage: StorageConfig, namespace: str | None = None):
        super().__init__(storage)
        if not storage.path:
            raise ValueError(f"buffer {storage.name!r}: storage_type file needs a path")
        self.path = jsonl_path(storage)

    def open_log(self) -> JsonlLog:
        return JsonlLog(self.path, self.storage.name)
