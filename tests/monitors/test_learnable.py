"""Counting what a step could learn from, and saying when it could learn nothing
(``trinity.monitor.learnable``; the runs that show it end to end: tests/e2e/test_nothing_learnable.py)."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from trinity.common.batch import Batch
from trinity.common.experience import EID, TRUNCATED_FROM, Experience
from trinity.explorer.rollout_metrics import rollout_metrics
from trinity.explorer.runner import BatchOutcome
from trinity.monitor.learnable import CauseWarnings, Streak, describe_trend, nothing_learnable, reward_trend, step_cause
from trinity.progress import RoleProgress
from trinity.trainer.step_metrics import learning_signal


def experience(response: list[int], task: str = "0", run: int = 0, advantage: float = 0.0, **fields) -> Experience:
    tokens = torch.tensor([1, 2, 3, *response])
    return Experience(
        tokens=tokens,
        prompt_length=3,
        reward=0.0,
        advantages=torch.full((len(response),), advantage),
        eid=EID(batch="1", task=task, run=run),
        **fields,
    )


def test_the_explorer_counts_truncated_prompts_their_longest_length_and_empty_responses():
    truncated = [
        experience([], truncate_status="prompt_truncated", info={TRUNCATED_FROM: length}) for length in (34, 40)
    ]
    multi_turn = experience([7, 8], truncate_status="prompt_truncated")  # a later turn's prompt: no length known
    stopped = experience([])  # nothing generated, though the prompt fit
    answered = experience([5, 6, 7], truncate_status="response_truncated")
    metrics = rollout_metrics(BatchOutcome([*truncated, multi_turn, stopped, answered], 0, 0), 0)
    assert metrics["rollout/truncated_prompts"] == 3
    assert metrics["rollout/truncated_prompt_length/max"] == 40
    assert metrics["rollout/truncated_prompt_length/mean"] == 37
    assert metrics["rollout/empty_responses"] == 3
    fitting = rollout_metrics(BatchOutcome([answered], 0, 0), 0)
    assert fitting["rollout/truncated_prompts"] == 0 and fitting["rollout/empty_responses"] == 0
    assert "rollout/truncated_prompt_length/max" not in fitting


def test_the_trainer_counts_learnable_tokens_and_zero_advantage_groups():
    rows = [
        experience([5, 6], task="equal", run=0),  # a group whose advantages are all 0
        experience([5], task="equal", run=1),
        experience([5, 6, 7], task="mixed", run=0, advantage=0.5),
        experience([5], task="mixed", run=1),
        experience([], task="truncated", run=0),  # no response token: not a zero-advantage group
        experience([], task="truncated", run=1),
    ]
    signal = learning_signal(Batch.from_experiences(rows))
    assert signal == {
        "actor/learnable_tokens": 3.0,
        "critic/zero_advantage_groups": 1,
        "critic/zero_advantage_group_fraction": pytest.approx(1 / 3),
    }
    expert = Batch.from_experiences(rows[:2]).with_fields(is_expert=torch.tensor([True, False]))
    assert learning_signal(expert)["actor/learnable_tokens"] == 2.0  # an SFT row trains without advantage
    assert learning_signal(expert)["critic/zero_advantage_group_fraction"] == 1.0
    no_advantages = Batch.from_experiences(rows[:3]).with_fields(advantages=None)  # SFT, DPO: the loss mask only
    assert learning_signal(no_advantages) == {"actor/learnable_tokens": 6.0}


def records(*causes: str | None) -> list[dict]:
    """One explorer step's metrics per entry: eight prompts, all truncated, all empty or neither."""
    out = []
    for step, cause in enumerate(causes, start=1):
        truncated = 8 if cause == "truncated" else 0
        empty = 8 if cause in ("truncated", "empty") else 0
        record = {
            "rollout/experience_count": 8,
            "rollout/truncated_prompts": truncated,
            "rollout/empty_responses": empty,
        }
        out.append({"step": step, **record})
    return out


def test_a_step_is_unlearnable_when_its_prompts_responses_groups_or_gradient_leave_nothing():
    truncated, empty, fine = records("truncated", "empty", None)
    assert step_cause(truncated) == "all prompts truncated"
    assert step_cause(empty) == "all responses empty"
    assert step_cause(fine) is None
    scores = {"critic/score/min": 0.0, "critic/score/max": 1.0}
    assert step_cause({"critic/zero_advantage_group_fraction": 1.0, "actor/no_gradient": 1.0, **scores}) == (
        "all groups had equal rewards"
    )
    solved = {"critic/zero_advantage_group_fraction": 1.0, "critic/score/min": 1.0, "critic/score/max": 1.0}
    assert step_cause(solved) == "every sample scored 1"
    assert step_cause({"critic/zero_advantage_group_fraction": 0.5, "actor/no_gradient": 1.0}) == "no gradient"
    assert step_cause({"critic/zero_advantage_group_fraction": 0.5, "actor/no_gradient": 0.0}) is None


def test_the_summary_line_needs_five_steps_in_a_row_or_the_whole_of_a_shorter_run():
    assert nothing_learnable(records("truncated", "truncated", "truncated")) == (
        "nothing learnable: 3 of 3 steps (all prompts truncated)"
    )
    assert nothing_learnable(records("truncated", "truncated", None)) is None
    assert nothing_learnable(records(*["empty"] * 4, None, *["empty"] * 4, None)) is None  # never five in a row
    mixed = records(None, "truncated", *["empty"] * 5, None)
    mixed.append({"step": 8, "eval/arithmetic/accuracy/mean@1": 0.0})  # an evaluation is no step
    mixed.append({**mixed[0], "step": 2})  # step 2 logged again by a resumed run: its last record counts
    assert nothing_learnable(mixed) == "nothing learnable: 5 of 8 steps (all responses empty)"
    assert nothing_learnable([]) is None


def test_the_progress_line_says_so_once_the_streak_is_long_enough(tmp_path):
    path = tmp_path / "explorer.jsonl"
    progress = RoleProgress("explorer", path, total=40)
    path.write_text("".join(json.dumps(r) + "\n" for r in records(*["truncated"] * 4)))
    progress.poll()
    assert "nothing learnable" not in progress.line()
    with path.open("a") as file:
        file.write(json.dumps({**records("truncated")[0], "step": 5}) + "\n")
    progress.poll()
    assert progress.line().endswith("nothing learnable for 5 steps (all prompts truncated)")
    with path.open("a") as file:
        file.write(json.dumps({**records(None)[0], "step": 6}) + "\n")
    progress.poll()
    assert "nothing learnable" not in progress.line()
    short = Streak()
    for record in records("empty", "empty"):
        short.add(record)
    assert short.note(total=2) == "nothing learnable for 2 steps (all responses empty)"
    assert short.note(total=None) == ""


def test_a_cause_is_warned_at_its_first_step_when_it_spreads_and_every_hundred_steps(caplog):
    warnings = CauseWarnings("explorer")
    with caplog.at_level(logging.WARNING, logger="trinity.monitor.learnable"):
        for step, whole in [(1, False), (2, False), (3, True), (4, True), (50, False), (103, True)]:
            warnings.warn("truncated prompts", step, whole, f"prompts cut at step {step}")
        warnings.warn("empty responses", 4, True, "all empty")
    said = [record.getMessage() for record in caplog.records]
    assert said == [
        "explorer: step 1: prompts cut at step 1",
        "explorer: step 3: prompts cut at step 3",
        "explorer: step 103: prompts cut at step 103",
        "explorer: step 4: all empty",
    ]


def test_the_reward_trend_starts_before_any_update_and_ends_with_the_last_tenth():
    """The start is the first step's reward alone (the weights the role started with), not a
    window that already holds updated steps: a first update that drops the reward shows."""
    rewards = [0.7, 0.2, 0.3, *[0.5] * 14, 0.9, 0.95, 1.0]
    records = [{"step": i, "rollout/reward/mean": r} for i, r in enumerate(rewards, 1)]
    records.insert(1, {"step": 1, "actor/pg_loss": 0.1})  # a record without a reward is no step of it
    records.append({"step": 21, "rollout/reward/mean": float("nan")})  # nor one whose reward is not finite
    assert reward_trend(records) == pytest.approx((0.7, 0.975))
    assert describe_trend((0.7, 0.975)) == "0.700 before any update -> 0.975 at end (+0.275)"
    assert reward_trend([{"step": 1, "actor/pg_loss": 0.1}]) is None
