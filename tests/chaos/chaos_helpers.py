"""The chaos tests' experiment, the supervisor that kills and restarts roles, and the audit.

A *life* of a role is one process: ``("crash", "<point>[:n]")`` dies at a crash point
(``trinity.testing.crash_points``), ``("kill", seconds)`` is SIGKILLed that long after it made
progress, ``("orphan", "<point>[:n]")`` freezes (SIGSTOP) at that crash point while its
replacement starts, and goes on once the replacement made progress (or after
``ORPHAN_PAUSE`` s, should it have frozen inside a transaction the replacement waits for):
it must then fail with ``Fenced``. ``("run", 0)`` runs to the end.
"""

from __future__ import annotations

import json
import os
import signal
import textwrap
import time
from collections import Counter
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from pathlib import Path

from chaos_roles import start_role

from trinity.buffer.storage.sql import SqlLog, database_url
from trinity.common.files import read_json
from trinity.monitor.console import read_jsonl

STEPS, TASKS, REPEATS = 8, 4, 4
"""Steps of each role, tasks per explorer step, runs per task: 16 experiences a step."""
ROWS = STEPS * TASKS  # one epoch of the taskset: every task once
ORPHAN_PAUSE = 10.0


def write_experiment(
    tmp_path: Path, model: Path, mode: str, explorer: str = "explorer", steps: int = STEPS, **buffer: object
) -> Path:
    """An arithmetic GRPO experiment on the tiny model (short prompts: it generates, the trainer
    trains on its answers): sqlite buffer, checkpoint sync, a checkpoint every step; ``steps`` steps of the role(s), the explorer named ``explorer``.
    ``buffer`` sets keys of the experience buffer."""
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        "".join(json.dumps({"q": f"{i % 5}+{i // 5}=", "a": str(i % 5 + i // 5)}) + "\n" for i in range(ROWS))
    )
    experience = {"path": str(tmp_path / "buffer.db"), "max_read_timeout": 120, "writer_timeout": 30, **buffer}
    path = tmp_path / f"{mode}{'' if explorer == 'explorer' else '_' + explorer}.yaml"
    path.write_text(
        textwrap.dedent(
            f"""
            mode: {mode}
            project: chaos
            name: run
            checkpoint_root_dir: {tmp_path / "ckpt"}
            model: {{model_path: {model}, max_prompt_tokens: 32, max_response_tokens: 4}}
            cluster: {{node_num: 1, gpu_per_node: 0}}
            algorithm: {{algorithm_type: grpo, repeat_times: {REPEATS}}}
            explorer: {{name: {explorer}, runner_per_model: 4, rollout_model: {{engine_type: transformers}}}}
            trainer: {{trainer_type: torch, save_interval: 1, save_hf_checkpoint: never}}
            synchronizer: {{sync_method: checkpoint, sync_interval: 1}}
            monitor: {{monitor_type: console}}
            buffer:
              batch_size: {TASKS}
              train_batch_size: {TASKS * REPEATS}
              total_steps: {steps}
              explorer_input:
                taskset: {{name: sums, storage_type: file, path: {tasks},
                           format: {{prompt_type: plaintext, prompt_key: q, response_key: a,
                                     system_prompt: Answer with the sum.}}}}
                default_workflow_type: math_workflow
                default_reward_fn_type: math_reward
              trainer_input:
                experience_buffer: {json.dumps(experience)}
            """
        )
    )
    return path


def job_dir(tmp_path: Path) -> Path:
    return tmp_path / "ckpt" / "chaos" / "run"


def meta_step(tmp_path: Path, role: str) -> int:
    return (read_json(job_dir(tmp_path) / "meta" / f"{role}.json") or {}).get("step", 0)


@dataclass
class Chain:
    """The lives of one role, one after the other (an orphan overlaps its replacement).
    ``name`` is the role's own (its meta file and log; the role by default); ``waits`` holds,
    by life index, a name and a step: that life starts once that role has committed that step."""

    role: str
    config: Path
    lives: list[tuple[str, float | str]]
    tmp_path: Path
    name: str = ""
    waits: dict[int, tuple[str, int]] = field(default_factory=dict)
    index: int = 0
    process: BaseProcess | None = None
    started_at_step: int = 0
    progressed: float | None = None
    orphans: list[tuple[BaseProcess, Path]] = field(default_factory=list)
    paused: tuple[BaseProcess, float] | None = None
    ended: list[str] = field(default_factory=list)
    done: bool = False

    def __post_init__(self) -> None:
        self.name = self.name or self.role

    @property
    def result(self) -> Path:
        return self.tmp_path / f"{self.name}{self.index}.json"

    def start_when_due(self) -> None:
        """Start the current life unless it waits for another role's step not yet committed."""
        wait = self.waits.get(self.index)
        if wait is None or meta_step(self.tmp_path, wait[0]) >= wait[1]:
            self.start()

    def start(self) -> None:
        kind, arg = self.lives[self.index]
        crash_at = arg if kind in ("crash", "orphan") else None
        self.process = start_role(self.role, self.config, crash_at, self.result, _SIGNALS.get(kind, "SIGKILL"))
        self.started_at_step, self.progressed = meta_step(self.tmp_path, self.name), None

    def poll(self) -> None:
        """Start a life when due; kill, orphan or restart as the current life says; raise on an
        unexpected ending."""
        if self.done:
            return
        if self.process is None:
            self.start_when_due()
            return
        kind, arg = self.lives[self.index]
        if self.progressed is None and meta_step(self.tmp_path, self.name) > self.started_at_step:
            self.progressed = time.monotonic()
        if self.paused and (self.progressed is not None or time.monotonic() > self.paused[1]):
            os.kill(self.paused[0].pid, signal.SIGCONT)  # the orphan goes on next to its replacement
            self.paused = None
        alive = self.process.is_alive()
        if alive and self.progressed is not None and kind == "kill" and time.monotonic() - self.progressed >= arg:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.join()
        elif alive and kind == "orphan" and _stopped(self.process.pid):
            self.orphans.append((self.process, self.result))
            self.paused = (self.process, time.monotonic() + ORPHAN_PAUSE)
            self.ended.append("orphaned")
            self.index += 1
            self.start()
            return
        if self.process.is_alive():
            return
        self.process.join()
        code = self.process.exitcode
        if code == 0:
            self.ended.append("finished")
            self.done = True
            return
        if code != -signal.SIGKILL:
            raise AssertionError(f"{self.role} life {self.index} {kind} exited {code}: {self._error(self.result)}")
        self.ended.append(f"killed ({kind} {arg})")
        self.index += 1
        self.process = None
        self.start_when_due()

    def orphan_errors(self) -> list[str]:
        errors = []
        for process, result in self.orphans:
            process.join(60)
            errors.append(f"exit {process.exitcode}: {self._error(result)}")
        return errors

    @staticmethod
    def _error(result: Path) -> str:
        return (json.loads(result.read_text()).get("error") or "") if result.exists() else "(no result)"


_SIGNALS = {"orphan": "SIGSTOP"}


def _stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped (state T in /proc)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
    except OSError:
        return False


def supervise(*chains: Chain, timeout: float) -> None:
    for chain in chains:
        chain.start_when_due()
    deadline = time.monotonic() + timeout
    try:
        while not all(chain.done for chain in chains):
            assert time.monotonic() < deadline, f"not done in {timeout} s: {[(c.name, c.ended) for c in chains]}"
            for chain in chains:
                chain.poll()
            time.sleep(0.05)
    finally:
        for chain in chains:
            for process in [chain.process, *(p for p, _ in chain.orphans)]:
                if process is not None and process.is_alive():
                    process.kill()  # SIGKILL ends a stopped process too


@dataclass
class Audit:
    lost: int
    duplicated: int
    unread: int
    read_twice: int
    untrained_steps: list[int]
    unlogged_explorer_steps: list[str]

    def clean(self) -> bool:
        return not (
            self.lost
            or self.duplicated
            or self.unread
            or self.read_twice
            or self.untrained_steps
            or self.unlogged_explorer_steps
        )


def audit(
    tmp_path: Path,
    explorers: dict[str, int] | None = None,
    trainer: str = "trainer",
    database: str | None = None,
    buffer_name: str = "experience_buffer",
) -> Audit:
    """Count from the buffer (the sqlite file of :func:`write_experiment`, or ``buffer_name``'s
    tables in ``database``) and the trainer's metadata and metrics log, for ``explorers`` (name:
    steps it ran, each reading the taskset from its start; the one explorer's ``STEPS`` by default):

    - lost: experiences a complete run must have written (every task of each explorer's
      steps, every run) that the buffer lacks;
    - duplicated: experiences (by id) the buffer holds more than once;
    - unread: rows after the trainer's committed position;
    - read_twice: rows the trainer's position says it consumed beyond one pass (position
      below steps x batch: a batch read again), or skipped (above it);
    - untrained_steps: steps without a metrics line in the trainer's log;
    - unlogged_explorer_steps: committed steps without a metrics line in an explorer's log, or with several.
    """
    explorers = explorers or {"explorer": STEPS}
    log = SqlLog(database_url(database or str(tmp_path / "buffer.db")), buffer_name)
    rows, last = log.fetch(0, 10**6)
    uids = Counter(exp.eid.uid for exp in rows)
    duplicated = sum(n - 1 for n in uids.values() if n > 1)
    present = {(exp.eid.explorer, exp.eid.batch, exp.eid.task.split(":")[-1], exp.eid.run) for exp in rows}
    lost, unlogged = 0, []
    for explorer, steps in explorers.items():
        tasks_by_step: dict[str, set[str]] = {}
        for name, step, task, _ in present:
            if name == explorer:
                tasks_by_step.setdefault(step, set()).add(task)
        expected = {
            (explorer, str(step), task, run)
            for step in range(1, steps + 1)
            for task in tasks_by_step.get(str(step), set())
            for run in range(REPEATS)
        }
        covered = {int(t) for tasks in tasks_by_step.values() for t in tasks}
        lost += len(expected - present) + len(set(range(steps * TASKS)) - covered) * REPEATS
        explored = Counter(record["step"] for record in read_jsonl(job_dir(tmp_path) / "monitor" / f"{explorer}.jsonl"))
        unlogged += [f"{explorer}:{step}" for step in range(1, steps + 1) if explored[step] != 1]
    meta = read_json(job_dir(tmp_path) / "meta" / f"{trainer}.json")
    position, steps = meta["reader"]["position"], meta["step"]
    consumed = steps * TASKS * REPEATS
    logged = {record["step"] for record in read_jsonl(job_dir(tmp_path) / "monitor" / f"{trainer}.jsonl")}
    trained = sum(explorers.values())
    return Audit(
        lost=lost,
        duplicated=duplicated,
        unread=last - position,
        read_twice=abs(consumed - position),
        untrained_steps=[step for step in range(1, trained + 1) if step not in logged or step > steps],
        unlogged_explorer_steps=unlogged,
    )
