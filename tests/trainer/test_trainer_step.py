"""The trainer's step on the torch engine, in process: what it does with what sampling leaves."""

from __future__ import annotations

import math
from pathlib import Path

import torch

from helpers.engine_helpers import train_mode_trainer
from trinity.common.experience import EID, Experience


def stale_experiences(count: int) -> list[Experience]:
    return [
        Experience(
            tokens=torch.tensor([3, 5, 7, 9, 11]),
            prompt_length=2,
            logprobs=torch.full((3,), -1.0),
            reward=float(i % 2),
            eid=EID(batch="0", task=str(i // 2), run=i % 2),
            model_version=0,
        )
        for i in range(count)
    ]


def test_a_batch_that_staleness_control_drops_whole_trains_nothing(tmp_path: Path, tiny_model_dir: Path) -> None:
    staleness = ", sample_strategy: staleness_control, sample_strategy_args: {max_staleness: 1, stale_action: drop}"
    trainer = train_mode_trainer(tmp_path, tiny_model_dir, staleness)
    trainer.step = 3  # experiences of version 0 are 3 versions stale: all dropped
    before = {k: v.clone() for k, v in trainer.engine.actor.state_dict().items()}
    metrics = trainer.train_step(stale_experiences(4))
    assert metrics["experience_count"] == 0 and metrics["stale_fraction"] == 1.0
    assert all(math.isfinite(value) for value in metrics.values()), metrics  # no mean of nothing
    assert trainer.engine.global_step == 0  # no optimizer or learning-rate step
    after = trainer.engine.actor.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_enable_preview_logs_the_step_s_first_experiences_as_text(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Trinity-RFT's trainer.enable_preview: a rollout_preview table (here the console monitor's tables file)."""
    import json

    from transformers import AutoTokenizer

    trainer = train_mode_trainer(tmp_path, tiny_model_dir)
    trainer.train_step(stale_experiences(2))  # off by default: no table
    trainer.config.trainer.enable_preview = True
    trainer.train_step(stale_experiences(6))
    trainer.monitor.close()
    (line,) = [json.loads(line) for path in (tmp_path / "ckpt").rglob("*_tables.jsonl") for line in path.open()]
    decode = AutoTokenizer.from_pretrained(tiny_model_dir).decode
    assert line["table"] == "rollout_preview" and line["step"] == 1
    assert [(row["task"], row["run"], row["reward"]) for row in line["rows"]] == [
        ("0", 0, 0.0),
        ("0", 1, 1.0),
        ("1", 0, 0.0),
        ("1", 1, 1.0),
    ]
    assert line["rows"][0]["prompt"] == decode([3, 5]) and line["rows"][0]["response"] == decode([7, 9, 11])
