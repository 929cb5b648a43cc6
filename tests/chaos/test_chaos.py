"""Exactly-once under crashes: roles killed at every commit boundary, at random moments and
for good, orphans that keep running, then an audit of the buffer and the trainer's logs."""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from chaos_helpers import STEPS, Chain, audit, job_dir, meta_step, supervise, write_experiment
from chaos_roles import start_role

from helpers.role_processes import RUN_TAG, role_pids

EXPLORER_POINTS = ["explorer.after_append:2", "explorer.after_meta:2"]
TRAINER_POINTS = ["trainer.after_save", "trainer.after_rename", "trainer.after_meta", "trainer.after_commit"]


def test_async_roles_crashed_at_every_commit_boundary_killed_and_orphaned_lose_nothing(tmp_path, tiny_model_dir):
    """mode explore + mode train: each role dies at each crash point of its commit path, once
    at a random moment, and has an orphan that keeps running after its replacement started."""
    rng = random.Random(25)
    explore = write_experiment(tmp_path, tiny_model_dir, "explore")
    train = write_experiment(tmp_path, tiny_model_dir, "train")
    explorer = Chain(
        "explorer",
        explore,
        [
            *(("crash", p) for p in EXPLORER_POINTS),
            ("orphan", "explorer.after_meta"),
            ("kill", rng.uniform(0, 1)),
            ("run", 0),
        ],
        tmp_path,
    )
    trainer = Chain(
        "trainer",
        train,
        [
            *(("crash", p) for p in TRAINER_POINTS),
            ("orphan", "trainer.after_commit"),
            ("kill", rng.uniform(0, 1)),
            ("run", 0),
        ],
        tmp_path,
    )
    supervise(explorer, trainer, timeout=240)
    for chain, points, holds in ((explorer, EXPLORER_POINTS, "writer"), (trainer, TRAINER_POINTS, "reader")):
        assert chain.ended[: len(points) + 1] == [*(f"killed (crash {p})" for p in points), "orphaned"], chain.ended
        (orphan,) = chain.orphan_errors()
        assert re.match(rf"exit 1: Fenced: .*{holds} '{chain.role}' was opened again", orphan), orphan
    assert meta_step(tmp_path, "explorer") == meta_step(tmp_path, "trainer") == STEPS
    result = audit(tmp_path)
    assert result.clean(), result


JOINER_STEPS = 3


def test_a_second_explorer_joins_dies_and_leaves_while_the_trainer_trains_on_both_without_loss(
    tmp_path, tiny_model_dir
):
    """Elastic explorers: ``explorer_2`` (mode explore, another ``explorer.name``) joins once the
    first explorer committed two steps, dies between its buffer append and its position, then
    right after committing a step, comes back, finishes its steps and leaves; the trainer
    trains on both explorers' experiences, each once. (Crash points, not a kill at a random
    moment: the joiner's steps are short enough to end before one. The first explorer dies
    after its third step and comes back once the joiner committed one: had it finished before
    the joiner registered, the trainer would end at the end of its data, as it should.)"""
    total = STEPS + JOINER_STEPS
    explore = write_experiment(tmp_path, tiny_model_dir, "explore")
    joiner = write_experiment(tmp_path, tiny_model_dir, "explore", explorer="explorer_2", steps=JOINER_STEPS)
    train = write_experiment(tmp_path, tiny_model_dir, "train", steps=total)
    explorer = Chain(
        "explorer", explore, [("crash", "explorer.after_meta:3"), ("run", 0)], tmp_path, waits={1: ("explorer_2", 1)}
    )
    second = Chain(
        "explorer",
        joiner,
        [("crash", "explorer.after_append:2"), ("crash", "explorer.after_meta:1"), ("run", 0)],
        tmp_path,
        name="explorer_2",
        waits={0: ("explorer", 2)},
    )
    trainer = Chain("trainer", train, [("run", 0)], tmp_path)
    supervise(explorer, second, trainer, timeout=240)
    assert second.ended == [
        "killed (crash explorer.after_append:2)",
        "killed (crash explorer.after_meta:1)",
        "finished",
    ]
    assert meta_step(tmp_path, "explorer") == STEPS and meta_step(tmp_path, "explorer_2") == JOINER_STEPS
    assert meta_step(tmp_path, "trainer") == total
    result = audit(tmp_path, {"explorer": STEPS, "explorer_2": JOINER_STEPS})
    assert result.clean(), result


def test_mode_both_killed_as_a_whole_group_resumes_without_loss(tmp_path, tiny_model_dir):
    """``trinity run`` in mode both, its whole process group and actors SIGKILLed at a random
    moment after the first checkpoint, then run again to the end."""
    config = write_experiment(tmp_path, tiny_model_dir, "both")
    command = [sys.executable, "-m", "trinity.cli", "run", "--config", str(config)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", RUN_TAG: str(tmp_path)}
    first = subprocess.Popen(
        command, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 180
    while meta_step(tmp_path, "trainer") < 1:
        assert first.poll() is None and time.monotonic() < deadline, "the first run never saved a checkpoint"
        time.sleep(0.05)
    time.sleep(random.Random(8).uniform(0, 1.5))
    for pid in role_pids(str(tmp_path)):  # Ray's workers have process groups of their own
        os.kill(pid, signal.SIGKILL)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    assert meta_step(tmp_path, "trainer") < STEPS, "the run ended before the kill: nothing was tested"
    second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr[-4000:]
    result = audit(tmp_path)
    assert result.clean(), result


def _process_tree(root: int) -> list[int]:
    """``root`` and every process descending from it (a node's raylet, its workers and agents)."""
    children: dict[int, list[int]] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            parent = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
        except OSError:  # gone meanwhile
            continue
        children.setdefault(parent, []).append(int(pid))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo += children.get(pid, [])
    return tree


def test_a_node_lost_mid_run_ends_the_run_naming_it_and_a_rerun_loses_nothing(tmp_path, tiny_model_dir):
    """Two nodes with two logical GPUs each: the explorer's two engines take one, the trainer
    the other. After the first checkpoint, every process of the worker node is SIGKILLed (its
    machine gone). The run ends within Ray's health checks, naming the node and the role
    that ran there; the same command with a new node in its place resumes, and the audit
    finds nothing lost or duplicated."""
    from helpers.ray_cluster import ray_head, ray_worker

    config = write_experiment(tmp_path, tiny_model_dir, "both")
    across = ["cluster.node_num=2", "cluster.gpu_per_node=2", "explorer.rollout_model.engine_num=2"]
    with ray_head("--num-gpus=2", "--node-name=head") as address:
        command = [sys.executable, "-m", "trinity.cli", "run", "--config", str(config), *across]
        command.append(f"cluster.ray_address={address}")
        with ray_worker(address, "worker1", "--num-gpus=2") as node:
            run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            deadline = time.monotonic() + 180
            while meta_step(tmp_path, "trainer") < 1:
                assert run.poll() is None and time.monotonic() < deadline, run.stdout.read()[-3000:]
                time.sleep(0.05)
            lost_at = time.monotonic()
            for pid in _process_tree(node.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            out, _ = run.communicate(timeout=120)
            ended_after = time.monotonic() - lost_at
        assert run.returncode == 1, out[-3000:]
        assert re.search(r"error: (explorer|trainer) failed: node worker1 was lost, where it ran", out), out[-3000:]
        assert "continue_from_checkpoint: true" in out
        assert ended_after < 45, f"the run ended {ended_after:.0f} s after the node was lost"
        assert meta_step(tmp_path, "trainer") < STEPS, "the run ended before the loss: nothing was tested"
        with ray_worker(address, "worker2", "--num-gpus=2"):
            again = subprocess.run(command, capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, again.stderr[-4000:]
    result = audit(tmp_path)
    assert result.clean(), result


def test_an_explorer_joins_on_a_third_node_and_leaves_with_postgres_between_the_nodes(
    tmp_path, tiny_model_dir, postgres_url, monkeypatch
):
    """Three nodes with two logical GPUs each, as docs/multinode.md starts them. ``mode: explore``
    (two engines: a whole node) and ``mode: train`` (one GPU of another) run as separate jobs;
    once the explorer committed two steps, ``explorer_2`` (two engines) joins on the third node,
    explores its steps and leaves, while the first goes on. Experiences cross the nodes
    through PostgreSQL, weights through the shared job folder; the trainer trains on both
    explorers' experiences, each once. (The first explorer is paused, SIGSTOP, until the joiner
    committed a step: had it finished before the joiner registered, the trainer would end at
    the end of its data, as it should.)"""
    from helpers.ray_cluster import ray_head, ray_worker

    buffer = {"storage_type": "sql", "path": postgres_url, "name": "three_nodes"}
    explore = write_experiment(tmp_path, tiny_model_dir, "explore", **buffer)
    joiner = write_experiment(tmp_path, tiny_model_dir, "explore", explorer="explorer_2", steps=JOINER_STEPS, **buffer)
    train = write_experiment(tmp_path, tiny_model_dir, "train", steps=STEPS + JOINER_STEPS, **buffer)
    whole_node = "explorer.rollout_model.engine_num=2"
    monkeypatch.setenv(RUN_TAG, str(tmp_path))  # the nodes' processes, so their actors
    with (
        ray_head("--num-gpus=2", "--node-name=head") as address,
        ray_worker(address, "worker1", "--num-gpus=2"),
        ray_worker(address, "worker2", "--num-gpus=2"),
    ):

        def start(config: Path, *changes: str) -> subprocess.Popen:
            command = [sys.executable, "-m", "trinity.cli", "run", "--config", str(config), *changes]
            command += ["cluster.node_num=3", "cluster.gpu_per_node=2", f"cluster.ray_address={address}"]
            return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

        def wait_for(role: str, step: int) -> None:
            deadline = time.monotonic() + 180
            while meta_step(tmp_path, role) < step:
                assert all(run.poll() is None for run in runs.values()), f"a job ended before {role} step {step}"
                assert time.monotonic() < deadline, f"{role} never committed step {step}"
                time.sleep(0.05)

        runs = {"explorer": start(explore, whole_node), "trainer": start(train)}
        wait_for("explorer", 2)
        (first,) = role_pids(str(tmp_path), "ExplorerRole")
        os.kill(first, signal.SIGSTOP)
        try:
            runs["explorer_2"] = start(joiner, whole_node)
            wait_for("explorer_2", 1)
        finally:
            os.kill(first, signal.SIGCONT)
        outputs = {name: run.communicate(timeout=300)[0] for name, run in runs.items()}
    for name, run in runs.items():
        assert run.returncode == 0, f"{name}:\n{outputs[name][-3000:]}"
    nodes = {name: re.search(r"    on node (\S+),", out).group(1) for name, out in outputs.items()}
    assert sorted(nodes.values()) == ["head", "worker1", "worker2"], nodes
    assert meta_step(tmp_path, "explorer") == STEPS and meta_step(tmp_path, "explorer_2") == JOINER_STEPS
    assert meta_step(tmp_path, "trainer") == STEPS + JOINER_STEPS
    explorers = {"explorer": STEPS, "explorer_2": JOINER_STEPS}
    result = audit(tmp_path, explorers, database=postgres_url, buffer_name="three_nodes")
    assert result.clean(), result


@pytest.mark.parametrize(("writer_timeout", "max_read_timeout"), [(3, 600), (6, 1)])
def test_a_trainer_whose_explorer_died_for_good_exits_non_zero_naming_it(
    tmp_path, tiny_model_dir, writer_timeout, max_read_timeout
):
    """The explorer is SIGKILLed after its second step and never comes back: the trainer
    trains what there is, then stops within writer_timeout, not max_read_timeout; and when
    max_read_timeout is the shorter, not with exit 0 as if the data had ended."""
    timeouts = {"writer_timeout": writer_timeout, "max_read_timeout": max_read_timeout}
    explore = write_experiment(tmp_path, tiny_model_dir, "explore", **timeouts)
    train = write_experiment(tmp_path, tiny_model_dir, "train", **timeouts)
    explorer = start_role("explorer", explore, "explorer.after_meta:2", tmp_path / "explorer.json")
    explorer.join(120)
    assert explorer.exitcode == -signal.SIGKILL
    started = time.monotonic()
    trainer = subprocess.run(
        [sys.executable, "-m", "trinity.cli", "run", "--config", str(train)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    waited = time.monotonic() - started
    assert trainer.returncode == 1, trainer.stderr[-3000:]
    assert re.search(r"WritersGone: buffer 'experience_buffer': no writer is alive: 'explorer'", trainer.stderr)
    assert waited < 120, f"the trainer waited {waited:.0f} s"
    assert meta_step(tmp_path, "trainer") == 2  # both steps the explorer wrote, trained and saved
    assert (job_dir(tmp_path) / "global_step_2").is_dir()


LONG_RUN = 800


@pytest.mark.parametrize(("stop", "single_process"), [("SIGTERM", False), ("Ctrl-C", False), ("Ctrl-C", True)])
def test_a_stop_signal_saves_at_the_next_step_boundary_and_exits_0(tmp_path, tiny_model_dir, stop, single_process):
    """``trinity run`` in mode both with no checkpoint before the end: SIGTERM, or Ctrl-C (SIGINT
    to the whole foreground process group, as a terminal sends it), after the first step makes
    the trainer save the step it is in, and the run exits 0 soon after, leaving no role behind;
    on Ray, and with both roles in the driver's process (``cluster.single_process``)."""
    config = write_experiment(tmp_path, tiny_model_dir, "both")
    # 100 epochs: on an idle machine the 8 steps of one would end within the driver's 1-s wait
    long_run = ["trainer.save_interval=1000", "buffer.total_epochs=100", f"buffer.total_steps={LONG_RUN}"]
    long_run.append(f"cluster.single_process={single_process}")
    command = [sys.executable, "-m", "trinity.cli", "run", "--config", str(config), *long_run]
    env = {**os.environ, RUN_TAG: str(tmp_path)}
    run = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    trained = job_dir(tmp_path) / "monitor" / "trainer.jsonl"
    deadline = time.monotonic() + 180
    while not (trained.is_file() and trained.read_text().strip()):
        assert run.poll() is None and time.monotonic() < deadline, "the trainer never finished a step"
        time.sleep(0.05)
    if stop == "SIGTERM":
        run.send_signal(signal.SIGTERM)
    else:
        os.killpg(run.pid, signal.SIGINT)
    out, _ = run.communicate(timeout=90)
    assert run.returncode == 0, out[-3000:]
    name = "SIGTERM" if stop == "SIGTERM" else "SIGINT"
    assert f"stopped ({name})" in out, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    # what it did before the stop, as a finished run says it: the summary and the report
    assert re.search(rf"=== \S+ \(both\) stopped by {name} in \d+ s\n", out), out[-3000:]
    assert f"report: {job_dir(tmp_path) / 'report.html'}" in out, out[-3000:]
    saved = meta_step(tmp_path, "trainer")
    assert 1 <= saved < LONG_RUN
    assert (job_dir(tmp_path) / f"global_step_{saved}").is_dir()
    deadline = time.monotonic() + 10
    while role_pids(str(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not role_pids(str(tmp_path)), "a role outlived the run"
