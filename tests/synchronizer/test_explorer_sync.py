"""When the explorer takes new weights, per ``sync_style``, ``sync_interval`` and ``sync_offset``:
an explorer in process on the tiny model, the trainer's side played by ``CheckpointSync``."""

from __future__ import annotations

import textwrap
import threading
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from trinity.config import load_config
from trinity.explorer.explorer import Explorer
from trinity.synchronizer.methods import CheckpointSync, SyncTimeout
from trinity.synchronizer.signals import SyncSignals, TrainerFinished


def explorer(tmp_path: Path, model: Path, style: str, offset: int = 0, timeout: int = 1) -> Explorer:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"question": "1+1=", "answer": "2"}\n')
    path = tmp_path / f"{style}.yaml"
    path.write_text(
        textwrap.dedent(
            f"""
            mode: both
            name: {style}
            checkpoint_root_dir: {tmp_path / "ckpt"}
            model: {{model_path: {model}, max_prompt_tokens: 8, max_response_tokens: 4}}
            cluster: {{node_num: 1, gpu_per_node: 0}}
            explorer: {{rollout_model: {{engine_type: transformers}}}}
            trainer: {{trainer_type: torch}}
            synchronizer: {{sync_method: checkpoint, sync_style: {style}, sync_interval: 2,
                            sync_offset: {offset}, sync_timeout: {timeout}}}
            buffer:
              batch_size: 1
              explorer_input:
                taskset: {{name: t, storage_type: file, path: {tasks}, format: {{prompt_key: question}}}}
            """
        )
    )
    return Explorer(load_config(path))


def publish(explorer: Explorer, model: Path, version: int) -> None:
    """The trainer's side: weights of ``version`` (the tiny model's, every value + version)."""
    weights = load_file(str(model / "model.safetensors"))
    CheckpointSync(explorer.config).publish({k: v + version for k, v in weights.items()}, version)


def synced_at(explorer: Explorer, step: int) -> int:
    """The version the explorer holds when the batch after ``step`` batches goes in."""
    explorer.scheduler.submitted = step
    explorer.runner.loop.run_until_complete(explorer.scheduler.take_weights())
    return explorer.engines.version


def test_fixed_waits_at_each_interval_for_the_version_offset_steps_behind(tmp_path, tiny_model_dir) -> None:
    fixed = explorer(tmp_path, tiny_model_dir, "fixed", offset=1)
    publish(fixed, tiny_model_dir, 3)
    assert synced_at(fixed, 1) == 0  # not a multiple of sync_interval
    assert synced_at(fixed, 2) == 3  # wants version 1 (step 2 - offset 1): takes the newest, 3
    weights = dict(fixed.engines.clients[0].engine.model.named_parameters())
    name, loaded = next(iter(weights.items()))
    assert torch.allclose(loaded, load_file(str(tiny_model_dir / "model.safetensors"))[name] + 3)
    with pytest.raises(SyncTimeout):  # step 6 wants version 5: waits sync_timeout, then fails
        synced_at(fixed, 6)


def test_fixed_takes_newer_weights_when_the_trainer_ran_ahead(tmp_path, tiny_model_dir) -> None:
    """A trainer taking two steps per explorer step (step-wise workflows' experiences) publishes
    versions faster than steps pass. An explorer that kept what step - sync_offset asks for
    until its steps caught up fed the trainer ever staler experiences (12 versions behind by
    trainer step 27 of the step-wise learning cell)."""
    fixed = explorer(tmp_path, tiny_model_dir, "fixed")
    publish(fixed, tiny_model_dir, 2)
    assert synced_at(fixed, 2) == 2
    publish(fixed, tiny_model_dir, 4)
    started = time.monotonic()
    assert synced_at(fixed, 2) == 4  # holds what step 2 wants: takes the newer, without waiting
    assert time.monotonic() - started < 30


def test_dynamic_by_explorer_waits_at_each_interval_for_newer_weights(tmp_path, tiny_model_dir) -> None:
    """As Trinity-RFT's dynamic_by_explorer: at an interval's end the explorer asks for weights
    newer than its own and waits for them (an explorer that never waited ran ever further ahead
    of the trainer and did not learn: tests/learning/test_async_learning.py)."""
    dynamic = explorer(tmp_path, tiny_model_dir, "dynamic_by_explorer", offset=1, timeout=60)
    assert synced_at(dynamic, 1) == 0  # not a multiple of sync_interval
    signals = SyncSignals(dynamic.config)
    seen = []  # the explorer's wait as the trainer sees it, just before the trainer publishes

    def trainer() -> None:
        seen.append(signals.awaited_version())
        publish(dynamic, tiny_model_dir, 1)

    threading.Timer(0.5, trainer).start()
    assert synced_at(dynamic, 2) == 1  # one step ahead of version 0, more than offset 1: waits
    assert seen == [1] and signals.awaited_version() is None
    publish(dynamic, tiny_model_dir, 3)
    assert synced_at(dynamic, 3) == 1  # between intervals
    assert synced_at(dynamic, 4) == 3  # the newest
    started = time.monotonic()
    assert synced_at(dynamic, 4) == 3  # within sync_offset of step 4: nothing newer, no wait
    assert time.monotonic() - started < 30


def test_dynamic_by_explorer_goes_on_with_its_weights_after_sync_timeout(tmp_path, tiny_model_dir, caplog) -> None:
    dynamic = explorer(tmp_path, tiny_model_dir, "explorer_driven", timeout=1)
    assert synced_at(dynamic, 2) == 0  # waited 1 s for version 1, then went on
    assert "going on with weights of version 0" in caplog.text


def test_trainer_driven_looks_at_every_step(tmp_path, tiny_model_dir) -> None:
    driven = explorer(tmp_path, tiny_model_dir, "dynamic_by_trainer")  # Trinity-RFT's older name
    assert driven.config.synchronizer.sync_style == "trainer_driven"
    publish(driven, tiny_model_dir, 2)
    assert synced_at(driven, 1) == 2  # step 1 is not a multiple of sync_interval 2


def test_fully_async_takes_what_is_newer_before_every_batch(tmp_path, tiny_model_dir) -> None:
    fully = explorer(tmp_path, tiny_model_dir, "fully_async", offset=2, timeout=60)
    assert synced_at(fully, 1) == 0  # nothing published, within sync_offset: no wait
    publish(fully, tiny_model_dir, 1)
    assert synced_at(fully, 1) == 1  # between interval ends too


@pytest.mark.parametrize("style", ["fully_async", "trainer_driven"])
def test_an_async_explorer_more_than_sync_offset_ahead_waits_for_the_next_version(style, tmp_path, tiny_model_dir):
    """Staleness stays within sync_offset + 1: an explorer that never waited ran ever further
    ahead of a slower trainer (staleness 22 by step 40 of the quickstart) and did not learn."""
    ahead = explorer(tmp_path, tiny_model_dir, style, offset=1, timeout=60)
    assert synced_at(ahead, 1) == 0  # one step done, version 0: within sync_offset 1
    threading.Timer(0.5, publish, (ahead, tiny_model_dir, 1)).start()
    started = time.monotonic()
    assert synced_at(ahead, 3) == 1  # three done, version 0: waits for version 1
    assert time.monotonic() - started >= 0.4


def test_an_async_explorer_goes_on_with_its_weights_after_sync_timeout(tmp_path, tiny_model_dir, caplog) -> None:
    fully = explorer(tmp_path, tiny_model_dir, "fully_async", timeout=1)
    assert synced_at(fully, 1) == 0  # waited 1 s for version 1, then went on
    assert "going on with weights of version 0" in caplog.text


def test_an_explorer_waiting_for_weights_stops_when_the_trainer_finishes(tmp_path, tiny_model_dir) -> None:
    """The trainer's end (its data ran out) ends the explorer's wait at once, not after sync_timeout."""
    waiting = explorer(tmp_path, tiny_model_dir, "fixed", timeout=60)
    threading.Timer(0.5, SyncSignals(waiting.config).finish, (0,)).start()
    started = time.monotonic()
    with pytest.raises(TrainerFinished, match="the trainer finished at version 0: no version >= 2 will come"):
        synced_at(waiting, 2)
    assert time.monotonic() - started < 10


def test_an_earlier_runs_end_does_not_stop_a_resumed_explorer(tmp_path, tiny_model_dir) -> None:
    """The end marker of the job's previous run predates this explorer: it waits as usual."""
    earlier = SyncSignals(explorer(tmp_path, tiny_model_dir, "fixed").config)
    earlier.finish(0)
    time.sleep(0.05)
    resumed = explorer(tmp_path, tiny_model_dir, "fixed", timeout=1)
    assert resumed.engines.sync.signals.root == earlier.root  # the same job: its marker is there
    with pytest.raises(SyncTimeout):
        synced_at(resumed, 2)
