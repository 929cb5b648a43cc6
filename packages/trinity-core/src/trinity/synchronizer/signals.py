"""The sync signals between explorers and the trainer, both directions in one channel:

- an explorer blocked on a version the trainer has not published says so (``waiting``); a
  trainer short of a batch trains on what it has (``awaited_version``), as no more rows can
  come before that version.
- the trainer says it finished (``finish``); an explorer waiting for a later version stops
  (``finished_before``) instead of waiting ``sync_timeout`` for nothing.
Both are files in the job folder's ``sync/``: every role of a job sees it, whatever the sync
method and buffer (placement refuses nodes that do not), so explorers that run apart, on other
nodes or join later get them too (docs/explorer.md, "Sync signals")."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from trinity.common.errors import PicklableError
from trinity.common.files import read_json, write_json
from trinity.config.schema import Config


class TrainerFinished(PicklableError):
    """The explorer asked for a version after the trainer's last: none will come (the trainer
    reached its ``total_steps`` or the end of a buffer before the explorer's tasks ended)."""

    def __init__(self, last_version: int, wanted: int):
        super().__init__(f"the trainer finished at version {last_version}: no version >= {wanted} will come")
        self.last_version = last_version


class SyncSignals:
    """The job's sync signals, as one role sees them from its start on."""

    def __init__(self, config: Config):
        self.root = Path(config.checkpoint_job_dir) / "sync"
        self._since = time.time()  # an earlier run's end marker (a resumed job) is older than this

    # -- explorer side --------------------------------------------------------------------------

    @contextmanager
    def waiting(self, explorer: str, version: int) -> Iterator[None]:
        """While the block runs, ``explorer`` waits for weights of ``version``."""
        write_json(self._wait_file(explorer), {"version": version})
        try:
            yield
        finally:
            self.forget_wait(explorer)

    def forget_wait(self, explorer: str) -> None:
        """``explorer`` waits for nothing (a restarted explorer: its crashed process may have)."""
        self._wait_file(explorer).unlink(missing_ok=True)

    def finished_before(self, version: int) -> int | None:
        """The trainer's last version when it finished, in this run, before ``version``; else None."""
        marker = read_json(self.root / "finished.json")
        if marker and marker["time"] >= self._since and marker["version"] < version:
            return marker["version"]
        return None

    # -- trainer side ---------------------------------------------------------------------------

    def awaited_version(self) -> int | None:
        """The lowest version an explorer waits for, or None."""
        waits = (read_json(path) for path in (self.root / "waiting").glob("*.json"))
        return min((wait["version"] for wait in waits if wait), default=None)

    def finish(self, version: int) -> None:
        """The trainer ends: ``version`` was its last."""
        write_json(self.root / "finished.json", {"version": version, "time": time.time()})

    def _wait_file(self, explorer: str) -> Path:
        return self.root / "waiting" / f"{explorer}.json"
