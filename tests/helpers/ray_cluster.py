"""Ray clusters as ``ray start`` makes them on machines: a head, and worker nodes that join it.
A run that joins one sees what a user's ``ray start --head`` cluster gives: workers that inherit
the environment of ``ray start``, not of ``trinity run``."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from helpers.ports import free_port


@contextmanager
def ray_head(*args: str, settle: float = 0.0) -> Iterator[str]:
    """A local Ray cluster as ``ray start --head`` makes one (plus ``args``: ``--num-gpus=2``,
    ``--node-name=head``); yields its address once its GCS listens (``ray.init`` then waits for
    its raylet), after ``settle`` more seconds.

    Its temp dir is private: ``ray start`` records its address there (``ray_current_cluster``),
    where a later ``ray.init()`` of this machine would otherwise try to join it once it is gone.
    """
    temp_dir = tempfile.mkdtemp(prefix="rayhead", dir="/tmp")  # short: Ray's socket paths live under it
    port = free_port()
    output = Path(temp_dir) / "ray_start.log"
    with output.open("w") as log:
        head = subprocess.Popen(
            [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block", f"--port={port}"]
            + [f"--temp-dir={temp_dir}", f"--num-cpus={os.cpu_count()}", "--include-dashboard=false"]
            + ["--disable-usage-stats", *args],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        while not _listening(port):
            if head.poll() is not None:
                raise RuntimeError(f"ray start --head exited with {head.returncode}:\n{output.read_text()[-2000:]}")
            time.sleep(0.2)
        time.sleep(settle)
        yield f"127.0.0.1:{port}"
    finally:
        head.terminate()  # ``ray start --block`` stops the head's processes on SIGTERM
        head.wait(timeout=60)
        shutil.rmtree(temp_dir, ignore_errors=True)


@contextmanager
def ray_worker(
    address: str, node_name: str, *args: str, local_dir: Path | None = None, timeout: float = 60
) -> Iterator[subprocess.Popen]:
    """A worker node of the cluster at ``address``, as ``ray start --address`` starts one on
    another machine: its own raylet here, named ``node_name``, with ``args`` (``--num-gpus=1``);
    entered once its raylet runs, as its ``ray start`` process (the node's processes descend from it). ``local_dir``: a folder this node alone sees, as a node's
    local disk (an empty tmpfs over it, in a mount namespace of the node's own: needs root)."""
    log = tempfile.NamedTemporaryFile(prefix="rayworker", suffix=".log", delete=False)  # noqa: SIM115
    private = ["unshare", "--mount", "sh", "-c", 'mount -t tmpfs none "$0" && exec "$@"', str(local_dir)]
    worker = subprocess.Popen(
        (private if local_dir else [])
        + [sys.executable, "-m", "ray.scripts.scripts", "start", f"--address={address}", "--block"]
        + [f"--node-name={node_name}", "--num-cpus=1", "--disable-usage-stats", *args],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + timeout
        while "Ray runtime started" not in Path(log.name).read_text():  # printed once its raylet registered
            if worker.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"ray start --address={address} did not join:\n{Path(log.name).read_text()[-2000:]}")
            time.sleep(0.2)
        yield worker
    finally:
        worker.terminate()  # ``ray start --block`` stops the node's processes on SIGTERM
        worker.wait(timeout=60)
        os.unlink(log.name)


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0
