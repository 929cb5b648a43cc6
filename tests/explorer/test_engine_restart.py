"""A rollout engine whose process dies mid-batch is restarted, given the newest weights, and the
batch runs again whole: the step's experiences are complete and come from the restarted engine's
weights. Where it cannot be (an engine that cannot restart, restarts used up) the crash ends the
step, naming why. (vLLM with its actor killed: tests/vllm_engine/test_vllm_engine.py, tests/e2e/test_vllm_run.py.)"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch
from crashing_engine import CrashingEngine
from safetensors.torch import load_file

from trinity.config import load_config
from trinity.explorer.engines import MAX_ENGINE_RESTARTS
from trinity.explorer.explorer import Explorer
from trinity.model.engines import EngineCrashed
from trinity.synchronizer.methods import CheckpointSync, WeightUpdate


def explorer(tmp_path: Path, model: Path, engine: str = "CrashingEngine") -> Explorer:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(f'{{"question": "{i}+1=", "answer": "{i + 1}"}}\n' for i in range(4)))
    path = tmp_path / "run.yaml"
    path.write_text(
        textwrap.dedent(
            f"""
            mode: both
            checkpoint_root_dir: {tmp_path / "ckpt"}
            model: {{model_path: {model}, max_prompt_tokens: 8, max_response_tokens: 4}}
            algorithm: {{repeat_times: 2}}
            explorer: {{rollout_model: {{engine_type: crashing_engine.{engine}}}}}
            trainer: {{trainer_type: torch}}
            synchronizer: {{sync_method: checkpoint}}
            buffer:
              batch_size: 4
              explorer_input:
                taskset: {{name: t, storage_type: file, path: {tasks}, format: {{prompt_key: question, response_key: answer}},
                           default_workflow_type: math_workflow, default_reward_fn_type: math_reward}}
            """
        )
    )
    return Explorer(load_config(path))


def at_version(explorer: Explorer, model: Path, version: int) -> None:
    """The trainer publishes ``version`` (every weight + version) and the explorer loads it."""
    weights = load_file(str(model / "model.safetensors"))
    CheckpointSync(explorer.config).publish({k: v + version for k, v in weights.items()}, version)
    explorer.engines.load(WeightUpdate(version, path=str(explorer.engines.sync.method.root / f"version_{version}")))


def explore_step(explorer: Explorer):
    tasks = explorer.tasksets.next_batch(0)
    return explorer.runner.loop.run_until_complete(explorer.scheduler.collect_step(1, tasks, {}))


@pytest.fixture(autouse=True)
def no_crashes_left():
    yield
    CrashingEngine.crashes = CrashingEngine.restarts = 0


def test_a_crashed_engine_is_restarted_with_the_newest_weights_and_the_batch_runs_again(tmp_path, tiny_model_dir):
    runs = explorer(tmp_path, tiny_model_dir)
    at_version(runs, tiny_model_dir, 2)
    CrashingEngine.crashes = 1
    outcome = explore_step(runs)
    assert CrashingEngine.restarts == 1
    assert len(outcome.experiences) == 8  # 4 tasks x 2 runs, none lost, none twice
    assert sorted((e.eid.task, e.eid.run) for e in outcome.experiences) == sorted(
        {(e.eid.task, e.eid.run) for e in outcome.experiences}
    )
    assert {e.model_version for e in outcome.experiences} == {2}
    engine = runs.engines.clients[0].engine
    name, loaded = next(iter(engine.model.named_parameters()))
    assert torch.allclose(loaded, load_file(str(tiny_model_dir / "model.safetensors"))[name] + 2)


def test_the_crash_ends_the_step_when_the_restarts_are_used_up(tmp_path, tiny_model_dir):
    runs = explorer(tmp_path, tiny_model_dir)
    CrashingEngine.crashes = MAX_ENGINE_RESTARTS + 1
    with pytest.raises(EngineCrashed, match=f"not restarted: all {MAX_ENGINE_RESTARTS} engine restarts"):
        explore_step(runs)
    assert CrashingEngine.restarts == MAX_ENGINE_RESTARTS


def test_an_engine_that_cannot_restart_ends_the_step(tmp_path, tiny_model_dir):
    runs = explorer(tmp_path, tiny_model_dir, "UnrestartableEngine")
    CrashingEngine.crashes = 1
    with pytest.raises(EngineCrashed, match=r"not restarted: engine_type 'crashing_engine.UnrestartableEngine' cannot"):
        explore_step(runs)
    assert CrashingEngine.restarts == 0
