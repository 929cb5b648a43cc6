"""``cluster.single_process``: explorer and trainer as threads of ``trinity run``'s own process,
without Ray (the shipped quickstart's setting). The stop signals' case is in tests/chaos; the
refusal of an engine that needs Ray, in tests/e2e/test_vllm_run.py (vLLM installed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from e2e_helpers import write_experiment
from omegaconf import OmegaConf

from helpers.cli import TRINITY
from helpers.quickstart import QUICKSTART

JOB = ("ckpt", "quickstart", "arithmetic")
STEPS = 4
NO_CLUSTER = {"RAY_ADDRESS": "127.0.0.1:1"}
"""Where no Ray answers: a run that tried to join Ray would fail naming it."""

RUN_IN_THIS_PROCESS = """
import json, sys
from trinity.launcher import run
(summary,) = run(sys.argv[1], [])
print(json.dumps({"ray_imported": "ray" in sys.modules, "summary": summary}))
"""


def test_the_shipped_quickstart_runs_in_one_process_without_ray(tmp_path, tiny_model_dir, arithmetic_data):
    """Both roles run in the process that called ``run``, which never imports Ray; the trainer's
    weights reach the explorer in memory after every step (staleness 0), and each role's log
    and metrics are where a run on Ray leaves them."""
    assert OmegaConf.load(QUICKSTART / "quickstart.yaml").cluster.single_process  # what README's command 1 runs
    config = write_experiment(
        tmp_path, tiny_model_dir, arithmetic_data, "cluster.single_process=true", f"buffer.total_steps={STEPS}"
    )
    done = subprocess.run(
        [sys.executable, "-c", RUN_IN_THIS_PROCESS, str(config)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **NO_CLUSTER},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["ray_imported"] is False
    summary = report["summary"]
    assert summary["roles"]["explorer"]["steps"] == STEPS and summary["roles"]["trainer"]["steps"] == STEPS
    assert all(place["node"].endswith("(this process)") for place in summary["placement"].values())
    job = tmp_path.joinpath(*JOB)
    explored = [json.loads(line) for line in (job / "monitor" / "explorer.jsonl").read_text().splitlines()]
    trained = [json.loads(line) for line in (job / "monitor" / "trainer.jsonl").read_text().splitlines()]
    assert [record["step"] for record in explored] == list(range(1, STEPS + 1))
    assert [record["rollout/staleness/max"] for record in explored] == [
        0
    ] * STEPS  # each step on the last step's weights
    assert len(trained) == STEPS and all(record["staleness_max"] == 0 for record in trained)
    assert {path.name for path in (job / "log").glob("*.log")} == {"explorer.log", "trainer.log"}


def test_a_role_that_fails_ends_the_process_with_its_error(tmp_path, tiny_model_dir, arithmetic_data):
    """The explorer's constructor raises in its thread: ``trinity run`` names it and exits 1 at
    once; the trainer's thread, waiting for experiences, does not keep the process alive."""
    missing = tmp_path / "no_judge"
    config = write_experiment(
        tmp_path,
        tiny_model_dir,
        arithmetic_data,
        "cluster.single_process=true",
        f"explorer.auxiliary_models=[{{model_path: {missing}, engine_type: transformers}}]",
    )
    done = subprocess.run(
        [*TRINITY, "run", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, **NO_CLUSTER},
    )
    assert done.returncode == 1, done.stderr[-3000:]
    assert "error: explorer failed: EngineStartError: explorer.auxiliary_models[0]" in done.stderr, done.stderr[-3000:]
    assert str(missing) in done.stderr
