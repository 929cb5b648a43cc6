"""A throwaway PostgreSQL cluster (Debian's ``postgresql`` package) for the SQL buffer tests and
the buffer benchmark: ``initdb`` into a temporary folder, ``pg_ctl start`` on a free local port,
removed again at the end.

PostgreSQL refuses to run as root (CI runs as root): there the server runs as ``nobody``
through ``runuser``, in a folder of its own under /tmp (pytest's temporary folders are closed
to other users).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from helpers.ports import free_port

SERVER_USER = "nobody"


def postgres_bin() -> str | None:
    """The folder of the newest installed ``initdb``/``pg_ctl``, or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
    return os.path.dirname(found[-1]) if found else None


def missing_reason() -> str | None:
    """Why no cluster can start here (None: one can)."""
    if postgres_bin() is None:
        return "PostgreSQL server binaries not found (apt-get install postgresql; see tests/apt-packages.txt)"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "the psycopg driver is not installed (pip install 'trinity-core[postgres]')"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root without runuser: PostgreSQL refuses to run as root"
    return None


def _as_server_user(*command: str) -> list[str]:
    return ["runuser", "-u", SERVER_USER, "--", *command] if os.geteuid() == 0 else list(command)


class PostgresCluster:
    """One initialised cluster in ``folder``: ``start()`` / ``stop()`` it (a test restarts it to
    see clients ride out an outage); ``url`` is its SQLAlchemy URL (database ``postgres``, user
    ``postgres``, no password)."""

    def __init__(self, folder: str, settings: dict[str, str]):
        self.folder, self.bin_dir, self.port = folder, postgres_bin(), free_port()
        self.data, self.log = os.path.join(folder, "data"), os.path.join(folder, "server.log")
        self.options = " ".join(
            f"-c {key}={value}" for key, value in {"listen_addresses": "127.0.0.1", **settings}.items()
        )
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self.running = False
        self._pg("initdb", "-D", self.data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")

    def start(self) -> None:
        server = f"-p {self.port} -k {self.folder} {self.options}"
        self._pg("pg_ctl", "-D", self.data, "-l", self.log, "-w", "-o", server, "start")
        self.running = True

    def stop(self) -> None:
        """Stop at once (``immediate``: as a crash or a kill would); a stopped cluster stays so."""
        if self.running:
            self._pg("pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop")
            self.running = False

    def _pg(self, program: str, *args: str) -> None:
        done = subprocess.run(
            _as_server_user(f"{self.bin_dir}/{program}", *args), capture_output=True, text=True, cwd=self.folder
        )
        if done.returncode != 0:
            server_log = open(self.log).read()[-2000:] if os.path.exists(self.log) else ""
            raise RuntimeError(f"{program} {' '.join(args)} failed: {done.stderr or done.stdout}{server_log}")


@contextmanager
def throwaway_postgres(**settings: str) -> Iterator[PostgresCluster]:
    """A running cluster, stopped and removed at the end.

    ``settings`` are server settings (``fsync="off"``...); defaults are PostgreSQL's.
    """
    reason = missing_reason()
    if reason:
        raise RuntimeError(reason)
    folder = tempfile.mkdtemp(prefix="trinity-pg-", dir="/tmp")
    if os.geteuid() == 0:
        shutil.chown(folder, SERVER_USER)
    try:
        cluster = PostgresCluster(folder, settings)
        cluster.start()
        try:
            yield cluster
        finally:
            cluster.stop()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
