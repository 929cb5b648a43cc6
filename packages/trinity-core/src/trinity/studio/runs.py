"""Runs started from the studio: ``trinity run --config FILE`` of a saved config, as a child process.

Each run has a folder ``<root>/.trinity-studio/runs/<id>/`` with ``run.json`` (config, pid, exit
status) and ``run.log`` (its output). The page reads the rest from the job folders the run names in
its log (``job folder:`` lines): the metrics, planned steps and summary ``trinity run`` writes for
``trinity log`` and ``trinity view``. A run goes on when the studio stops (its own session), and a
studio started again lists it. Stop is Ctrl-C: SIGINT to the run's process group, as a terminal
sends it (the trainer saves at its step's end, the summary is written, exit 0; again: at once).
"""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil
from fastapi import HTTPException

from trinity.common.errors import first_line
from trinity.common.files import read_json, write_json
from trinity.progress import PLANNED_STEPS_FILE, RoleProgress
from trinity.report import JOB_FOLDER_LINE, PANELS, SUMMARY_FILE, Job, panel_series

logger = logging.getLogger(__name__)

RUNS_DIR = Path(".trinity-studio") / "runs"
RECORD = "run.json"
LOG = "run.log"
LOG_TAIL_BYTES = 16_384
"""The end of the log the page shows (about 150 lines)."""
TOKEN_ENV = "TRINITY_STUDIO_TOKEN"
LIVE_PANELS = ("reward", "loss", "kl")
"""The report's plots the page draws as the run goes."""


@dataclass
class RunRecord:
    """``run.json``: what the studio knows of a run it started."""

    id: str
    config: str
    pid: int
    started: float
    process_started: float
    """The child's start time (psutil's): a later process given the same pid is not the run."""
    returncode: int | None = None
    ended: float | None = None
    stop_requested: bool = False


class StudioRuns:
    """The runs of one studio root: start, list, read and stop them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.folder = root / RUNS_DIR
        self.children: dict[str, subprocess.Popen] = {}
        self.progress: dict[Path, RoleProgress] = {}  # by metrics file: each poll reads only what was added
        self.lock = threading.Lock()

    def start(self, config: Path) -> dict[str, Any]:
        """Start ``trinity run --config CONFIG`` (a checked file inside the root) in the root;
        409 while a run of the same file is running."""
        with self.lock:
            for record in self.records():
                if record.config == str(config) and self.alive(record):
                    raise HTTPException(409, f"{config} is running already (run {record.id}): stop it first")
            run_id = self.new_id(config)
            folder = self.folder / run_id
            folder.mkdir(parents=True)
            with open(folder / LOG, "wb") as log:
                child = subprocess.Popen(
                    [sys.executable, "-m", "trinity.cli", "run", "--config", str(config)],
                    cwd=self.root,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=run_environment(),
                    start_new_session=True,  # its own process group: Ctrl-C of the studio leaves it running
                )
            record = RunRecord(run_id, str(config), child.pid, time.time(), psutil.Process(child.pid).create_time())
            self.save(record)
            self.children[run_id] = child
        threading.Thread(target=self.wait, args=(record,), daemon=True, name=f"studio-run-{run_id}").start()
        return self.listing(record)

    def new_id(self, config: Path) -> str:
        """``20261203-063512-quickstart``: when and what, unique in the folder."""
        base = f"{time.strftime('%Y%m%d-%H%M%S')}-{re.sub(r'[^A-Za-z0-9_-]', '_', config.stem)[:40]}"
        run_id, n = base, 1
        while (self.folder / run_id).exists():
            n += 1
            run_id = f"{base}-{n}"
        return run_id

    def wait(self, record: RunRecord) -> None:
        """Record the child's exit status when it ends (a studio started again reads it)."""
        returncode = self.children[record.id].wait()
        with self.lock:
            record = self.record(record.id)
            record.returncode, record.ended = returncode, time.time()
            self.save(record)

    def save(self, record: RunRecord) -> None:
        write_json(self.folder / record.id / RECORD, asdict(record))

    def records(self) -> list[RunRecord]:
        """Every run started from this root, newest first (a record that is not one is skipped, with a warning)."""
        found = sorted(self.folder.glob(f"*/{RECORD}"), reverse=True) if self.folder.is_dir() else []
        records = []
        for path in found:
            try:
                records.append(RunRecord(**read_json(path)))
            except (OSError, ValueError, TypeError) as exc:
                logger.warning("studio: %s is not a run record, skipped: %s", path, first_line(exc))
        return records

    def record(self, run_id: str) -> RunRecord:
        """The run ``run_id``, looked up among the runs listed (no path is built from the request); else 404."""
        for record in self.records():
            if record.id == run_id:
                return record
        raise HTTPException(404, f"no run {run_id!r} in {self.folder}")

    def alive(self, record: RunRecord) -> bool:
        child = self.children.get(record.id)
        if child is not None:
            return child.poll() is None
        try:  # a run started before this studio: its pid, if the process there is still the run
            process = psutil.Process(record.pid)
            return process.create_time() == record.process_started and process.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    def job_folders(self, record: RunRecord) -> list[Path]:
        """The job folders the run named in its log, one per stage begun."""
        log = self.folder / record.id / LOG
        if not log.is_file():
            return []
        with open(log, encoding="utf-8", errors="replace") as file:
            return [Path(line[len(JOB_FOLDER_LINE) :].strip()) for line in file if line.startswith(JOB_FOLDER_LINE)]

    def status(self, record: RunRecord, jobs: list[Path]) -> str:
        """running, stopped (from the studio, or by a signal), finished (exit 0; where no studio saw
        it end: every stage begun wrote its summary), or failed."""
        if self.alive(record):
            return "running"
        summaries = [read_json(job / SUMMARY_FILE) for job in jobs]
        if record.stop_requested or any(s and "stopped" in s for s in summaries):
            return "stopped"
        if record.returncode is not None:  # its exit status, where the studio saw it end
            return "finished" if record.returncode == 0 else "failed"
        return "finished" if jobs and all(summaries) else "failed"

    def listing(self, record: RunRecord) -> dict[str, Any]:
        jobs = self.job_folders(record)
        return {
            "id": record.id,
            "config": record.config,
            "started": record.started,
            "ended": record.ended,
            "status": self.status(record, jobs),
            "returncode": record.returncode,
            "stop_requested": record.stop_requested,
            "jobs": [str(job) for job in jobs],
        }

    def detail(self, run_id: str) -> dict[str, Any]:
        """The listing, each role's progress, the live plots, each stage's summary and the log's end."""
        record = self.record(run_id)
        shown = self.listing(record)
        jobs = [Job.read(folder, folder.name) for folder in map(Path, shown["jobs"]) if (folder / "monitor").is_dir()]
        shown["progress"] = [self.role_progress(job.folder, role) for job in jobs for role in job.metrics]
        shown["plots"] = plots(jobs)
        shown["summaries"] = [{"stage": job.name, "rows": job.summary()} for job in jobs]
        shown["log"] = log_tail(self.folder / record.id / LOG)
        return shown

    def role_progress(self, job: Path, role: str) -> dict[str, Any]:
        """``{role, step, total, line}``: the role's step of its planned steps (``trinity run``'s line)."""
        metrics = job / "monitor" / f"{role}.jsonl"
        planned = job / PLANNED_STEPS_FILE
        with self.lock:
            progress = self.progress.setdefault(metrics, RoleProgress(f"{job.name}/{role}", metrics))
            progress.poll()
            progress.total = (read_json(planned) or {}).get(role)
            return {"role": progress.role, "step": progress.step, "total": progress.total, "line": progress.line()}

    def stop(self, run_id: str) -> dict[str, Any]:
        """Ctrl-C to the run's process group; 409 when it is not running."""
        with self.lock:
            record = self.record(run_id)
            if not self.alive(record):
                raise HTTPException(409, f"run {run_id} is not running: {self.listing(record)['status']}")
            os.killpg(record.pid, signal.SIGINT)  # its own session: the group is the run's alone
            record.stop_requested = True
            self.save(record)
        return self.listing(record)


def run_environment() -> dict[str, str]:
    """The studio's environment, less its token (the run needs it not), with unbuffered output."""
    env = {key: value for key, value in os.environ.items() if key != TOKEN_ENV}
    return {**env, "PYTHONUNBUFFERED": "1"}


def plots(jobs: list[Job]) -> dict[str, dict[str, Any]]:
    """The report's reward, loss and KL panels as series of points (a stage's name leads its
    series' labels when the run has stages)."""
    shown = {}
    for stem, title, ylabel, pattern in PANELS:
        if stem not in LIVE_PANELS:
            continue
        series = [
            {
                "label": f"{job.name}/{line.label}" if len(jobs) > 1 else line.label,
                "steps": line.steps,
                "values": line.values,
            }
            for job in jobs
            for role, records in job.metrics.items()
            for line in panel_series(pattern, role, records)
        ]
        shown[stem] = {"title": title, "ylabel": ylabel, "series": series}
    return shown


TERMINAL_CODES = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
"""Terminal colour codes, as Ray puts around its roles' names in the driver's output."""


def log_tail(path: Path) -> str:
    """The last ``LOG_TAIL_BYTES`` of the log, from a line's start, without terminal codes."""
    if not path.is_file():
        return ""
    with open(path, "rb") as file:
        size = file.seek(0, os.SEEK_END)
        file.seek(max(0, size - LOG_TAIL_BYTES))
        text = file.read().decode("utf-8", errors="replace")
    text = text.split("\n", 1)[1] if size > LOG_TAIL_BYTES and "\n" in text else text
    return TERMINAL_CODES.sub("", text)
