"""Helpers of the end-to-end tests: an experiment config from the quickstart, the CLI in a subprocess."""

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

from omegaconf import OmegaConf

from helpers.cli import TRINITY
from helpers.ports import free_port

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "examples" / "quickstart"
EXPLORE_ONLY = ("mode=explore", "synchronizer.sync_method=checkpoint")
"""Overrides for a run of the explorer alone (no trainer, so no weights to sync)."""


def write_experiment(tmp_path: Path, model: Path, data: Path, *changes: str, stages: bool = False) -> Path:
    """The quickstart config pointed at ``model``/``data`` under ``tmp_path``, plus dotlist changes."""
    config = OmegaConf.load(QUICKSTART / "quickstart.yaml")
    if not stages:
        del config["stages"]
    config.merge_with_dotlist(
        [
            f"checkpoint_root_dir={tmp_path / 'ckpt'}",
            f"model.model_path={model}",
            f"buffer.explorer_input.taskset.path={data / 'tasks.jsonl'}",
            *changes,
        ]
    )
    if stages:
        config.stages[0].buffer.trainer_input.experience_buffer.path = str(data / "sft.jsonl")
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "experiment.yaml"
    OmegaConf.save(config, path)
    return path


def written_experiences(tmp_path: Path, count: int, **read) -> list:
    """``count`` experiences of the sql experience buffer a ``write_experiment`` run wrote, read
    back by a reader of its own (``read`` goes to ``read``: a ``timeout``)."""
    from trinity.buffer import open_experience_reader
    from trinity.config.schema import ExperienceBufferConfig

    job = tmp_path / "ckpt" / "quickstart" / "arithmetic"
    buffer = ExperienceBufferConfig(name="experience_buffer", path=str(job / "buffer" / "experience_buffer.db"))
    reader = open_experience_reader(buffer, "audit")
    try:
        return reader.read(count, **read)
    finally:
        reader.close()


def _trinity(config: Path, overrides: tuple[str, ...]) -> dict:
    """What both ways of running ``trinity run`` on ``config`` share: command, env, cwd."""
    return {
        "args": [*TRINITY, "run", "--config", str(config), *overrides],
        "env": {**os.environ, "PYTHONUNBUFFERED": "1"},
        "cwd": config.parent,
    }


def trinity_run(config: Path, *overrides: str, timeout: float = 600, **popen) -> subprocess.CompletedProcess:
    return subprocess.run(**_trinity(config, overrides), capture_output=True, text=True, timeout=timeout, **popen)


def trinity_start(config: Path, *overrides: str, **popen) -> subprocess.Popen:
    """``trinity run`` in the background, in a session of its own (a test may kill its processes)."""
    return subprocess.Popen(**_trinity(config, overrides), start_new_session=True, **popen)


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
