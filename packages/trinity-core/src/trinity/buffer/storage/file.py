"""Experiences as JSON lines, for debugging and for a queue's ``.jsonl`` mirror.

``<path>`` holds one experience per line (``experience_to_dict``, readable). A position
packs the lines read and their byte length: ``lines * 2**48 + offset``.
``<path>.state.json`` holds the writers, the reader cursors and the line count. Every
change happens under an exclusive ``flock`` on ``<path>.lock``, so several processes
can append and read the same file; only complete lines are ever read.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from trinity.buffer.serialization import experience_from_dict, experience_to_dict
from trinity.buffer.storage.base import Log, LogStorage
from trinity.common.experience import Experience
from trinity.config.schema import StorageConfig

_LINE = 2**48


class JsonlLog(Log):
    def __init__(self, path: str, name: str):
        self.name, self.path = name, os.path.abspath(path)
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self.state_path = self.path + ".state.json"
        with self._locked():
            open(self.path, "ab").close()

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with open(self.path + ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _state(self) -> dict[str, Any]:
        if not os.path.exists(self.state_path):
            return {"writers": {}, "cursors": {}, "lines": 0}
        with open(self.state_path) as f:
            return json.load(f)

    def _save(self, state: dict[str, Any]) -> None:
        tmp = f"{self.state_path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(state, f)
        os.replace(tmp, self.state_path)

    def _update(self, section: str, key: str, value: Any) -> None:
        with self._locked():
            state = self._state()
            state[section][key] = value
            self._save(state)

    def open_writer(self, writer: str) -> None:
        self._update("writers", writer, False)

    def finish_writer(self, writer: str) -> None:
        self._update("writers", writer, True)

    def writers_done(self) -> bool:
        with self._locked():
            writers = self._state()["writers"]
        return bool(writers) and all(writers.values())

    def append(self, experiences: list[Experience]) -> None:
        lines = "".join(json.dumps(experience_to_dict(e)) + "\n" for e in experiences).encode()
        with self._locked():
            with open(self.path, "ab") as f:
                f.write(lines)
            state = self._state()
            state["lines"] += len(experiences)
            self._save(state)

    def fetch(self, after: int, n: int) -> tuple[list[Experience], int]:
        out: list[Experience] = []
        lines, offset = divmod(after, _LINE)
        with open(self.path, "rb") as f:
            f.seek(offset)
            while len(out) < n:
                line = f.readline()
                if not line.endswith(b"\n"):  # end of file, or a line still being written
                    break
                offset += len(line)
                out.append(experience_from_dict(json.loads(line)))
        return out, (lines + len(out)) * _LINE + offset

    def claim(self, reader: str, n: int) -> tuple[list[Experience], int]:
        with self._locked():
            state = self._state()
            experiences, position = self.fetch(state["cursors"].get(reader, {}).get("position", 0), n)
            if experiences:
                state["cursors"][reader] = {"position": position, "progress": position}
                self._save(state)
        return experiences, position

    def cursor(self, reader: str) -> int:
        with self._locked():
            return self._state()["cursors"].get(reader, {}).get("position", 0)

    def set_cursor(self, reader: str, position: int) -> None:
        self._update("cursors", reader, {"position": position, "progress": position})

    def set_progress(self, reader: str, position: int) -> None:
        with self._locked():
            state = self._state()
            state["cursors"][reader] = {
                "position": state["cursors"].get(reader, {}).get("position", 0),
                "progress": position,
            }
            self._save(state)

    def unread(self) -> int:
        with self._locked():
            state = self._state()
        return state["lines"] - min((c["progress"] // _LINE for c in state["cursors"].values()), default=0)


def jsonl_path(storage: StorageConfig) -> str:
    """``path`` itself when it names a .jsonl/.json file, else ``<path>/<name>.jsonl``."""
    path = storage.path or ""
    if path.endswith((".jsonl", ".json")):
        return path
    return os.path.join(path, f"{storage.name or 'experiences'}.jsonl")


class FileStorage(LogStorage):
    """``storage_type: file``: experiences as readable JSON lines (debugging, explore mode)."""

    def __init__(self, storage: StorageConfig, namespace: str | None = None):
        super().__init__(storage)
        if not storage.path:
            raise ValueError(f"buffer {storage.name!r}: storage_type file needs a path")
        self.path = jsonl_path(storage)

    def open_log(self) -> JsonlLog:
        return JsonlLog(self.path, self.storage.name)
