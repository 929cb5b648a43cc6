"""Sample strategies on real Experience objects."""

from __future__ import annotations

import pytest
import torch

from trinity.algorithm.sample_strategy import DefaultSampleStrategy, MixSampleStrategy, StalenessControlSampleStrategy
from trinity.common.experience import EID, Experience


def experience(version: int, task: str = "t", run: int = 0, expert: bool = False) -> Experience:
    return Experience(
        tokens=torch.tensor([1, 2, 3, 4]),
        prompt_length=2,
        logprobs=torch.tensor([-0.5, -0.25]),
        reward=1.0,
        eid=EID(batch="0", task=task, run=run),
        model_version=version,
        info={"is_expert": True} if expert else {},
    )


VERSIONS = [5, 4, 3, 1]  # staleness at version 5: 0, 1, 2, 4


def test_default_keeps_everything():
    batch, metrics = DefaultSampleStrategy().sample([experience(v) for v in VERSIONS], step=1, current_version=5)
    assert batch.batch_size == 4 and batch.sample_weights is None
    assert metrics["staleness_mean"] == pytest.approx(7 / 4) and metrics["staleness_max"] == 4.0


def test_staleness_drop():
    fn = StalenessControlSampleStrategy(max_staleness=1)
    batch, metrics = fn.sample([experience(v) for v in VERSIONS], step=1, current_version=5)
    assert batch.model_versions.tolist() == [5, 4]
    assert metrics["stale_fraction"] == 0.5 and metrics["experience_count"] == 2.0
    batch, metrics = fn.sample([experience(0)], step=1, current_version=5)
    assert batch.batch_size == 0 and metrics["experience_count"] == 0.0


def test_staleness_downweight():
    # excess staleness (0, 0, 1, 3) with decay 0.5: weights (1, 1, 0.5, 0.125)
    fn = StalenessControlSampleStrategy(max_staleness=1, stale_action="downweight", decay=0.5)
    batch, _ = fn.sample([experience(v) for v in VERSIONS], step=1, current_version=5)
    torch.testing.assert_close(batch.sample_weights, torch.tensor([1.0, 1.0, 0.5, 0.125]))
    with pytest.raises(ValueError, match="stale_action"):
        StalenessControlSampleStrategy(stale_action="ignore").sample([experience(0)], 1, 0)


def test_mix_marks_expert_rows():
    fn = MixSampleStrategy(expert_data_ratio=0.25)
    assert fn.expert_reads(8) == ("sft_dataset", 2)
    assert DefaultSampleStrategy().expert_reads(8) is None
    exps = [experience(3, run=i) for i in range(3)] + [experience(0, task="sft", expert=True)]
    batch, metrics = fn.sample(exps, step=1, current_version=3)
    assert batch.is_expert.tolist() == [False, False, False, True]
    assert metrics["expert_fraction"] == 0.25 and metrics["staleness_max"] == 0.0  # expert rows excluded
    assert batch.run_ids.tolist() == [0, 1, 2, 3] and batch.group_ids.tolist() == [0, 0, 0, 1]


def test_batch_carries_run_step_ids_and_reward_baselines():
    exps = [
        Experience(tokens=torch.tensor([1, 2, 3]), prompt_length=1, reward=1.0, eid=EID(task="a", run=0, step=s),
                   info={"reward_baseline": 0.5})
        for s in (0, 1)
    ] + [Experience(tokens=torch.tensor([1, 2]), prompt_length=1, reward=0.0, eid=EID(task="a", run=1),
                    info={"reward_baseline": 0.25})]  # fmt: skip
    batch = DefaultSampleStrategy().sample(exps, step=0, current_version=0)[0]
    assert batch.run_ids.tolist() == [0, 0, 1] and batch.step_ids.tolist() == [0, 1, 0]
    assert batch.group_ids.tolist() == [0, 0, 0] and batch.reward_baselines.tolist() == [0.5, 0.5, 0.25]
    exps[2].info.clear()  # one row without a baseline: none at all
    assert DefaultSampleStrategy().sample(exps, step=0, current_version=0)[0].reward_baselines is None


def test_partial_rollout_token_versions_reach_the_batch_and_the_staleness_metrics():
    """A response a sync interrupted (tokens of versions 3 and 4) is stale by its first token and,
    per token, by each one's weights; a row without marks counts its own version for every token."""
    split = experience(3)
    split.tokens = torch.tensor([1, 2, 3, 4, 5, 6])
    split.logprobs = torch.tensor([-0.5] * 4)
    split.info = {"token_versions": [3, 3, 4, 4]}
    batch, metrics = DefaultSampleStrategy().sample([split, experience(5)], step=1, current_version=5)
    assert batch.token_versions.tolist() == [[3, 3, 4, 4], [5, 5, 5, 5]]
    assert metrics["staleness_mean"] == 1.0 and metrics["staleness_max"] == 2.0
    # response tokens: 2, 2, 1, 1 and 0, 0 (the second row's padding is off the mask)
    assert metrics["staleness_token_mean"] == pytest.approx(1.0) and metrics["staleness_token_max"] == 2.0
    assert metrics["partial_rollout_fraction"] == 0.5
    _, plain = DefaultSampleStrategy().sample([experience(5)], step=1, current_version=5)
    assert "staleness_token_mean" not in plain and "partial_rollout_fraction" not in plain
