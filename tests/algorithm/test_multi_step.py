"""GiGPO and step-wise GRPO on multi-step runs, by hand (Trinity-RFT's recorded outputs on a
larger case are in test_trinity_rft_reference.py)."""

from __future__ import annotations

import pytest
import torch

from trinity.algorithm.multi_step import GiGPOAdvantage, StepWiseGRPOAdvantage
from trinity.common.batch import Batch
from trinity.common.experience import EID, Experience

NAN = float("nan")


def gigpo_batch(make_batch) -> Batch:
    """Task 0: run A (steps 0, 1; step rewards 0, 1; states s0, s1) and run B (step rewards 0, 0;
    states s0, s2). Task 1: run C (steps 0, 1, no step rewards: final reward 2 on both) and run D
    (one step, reward 0); no states. Task 2: one run (reward 3). Rows are shuffled."""
    rows = [  # (task, run, step, reward, step_reward, state)
        (0, 0, 1, 1.0, 1.0, 1), (0, 1, 0, 0.0, 0.0, 0), (0, 0, 0, 1.0, 0.0, 0), (0, 1, 1, 0.0, 0.0, 2),
        (1, 2, 0, 2.0, NAN, -1), (1, 2, 1, 2.0, NAN, -1), (1, 3, 0, 0.0, NAN, -1), (2, 4, 0, 3.0, NAN, -1),
    ]  # fmt: skip
    task, run, step, reward, step_reward, state = zip(*rows, strict=True)
    return make_batch(
        [[1, 1]] * len(rows), reward, task, run_ids=run, step_ids=step, step_rewards=step_reward, state_ids=state
    )


def test_gigpo_by_hand(make_batch):
    # gamma 0.5: A's returns R_0 = 0 + 0.5 * 1 = 0.5, R_1 = 1; B's 0, 0. Episode returns A 1, B 0:
    # A_E = +-0.5 (fnorm none: / (1 + eps)). Anchor s0 holds A_0 (0.5) and B_0 (0): A_S = +-0.25;
    # s1, s2 alone: 0. Task 1: C's return 2 (last step only), D's 0: A_E = +-1. Task 2 alone: 0.
    out, metrics = GiGPOAdvantage(omega=2.0, gamma=0.5)(gigpo_batch(make_batch))
    expected = torch.tensor([0.5, -1.0, 1.0, -0.5, 1.0, 1.0, -1.0, 0.0])
    torch.testing.assert_close(out.advantages[:, 0], expected, atol=1e-5, rtol=0)
    assert metrics["anchor_groups"] == 3 and metrics["anchor_group_hit_ratio"] == pytest.approx(1 / 3)
    # fnorm std: A_E = +-0.5 / std(1, 0) = +-0.707107; A_S = +-0.25 / std(0.5, 0) = +-0.707107
    out, _ = GiGPOAdvantage(fnorm="std", gamma=0.5, omega=1.0)(gigpo_batch(make_batch))
    a = 0.5 / 0.5**0.5
    torch.testing.assert_close(out.advantages[:4, 0], torch.tensor([a, -2 * a, 2 * a, -a]), atol=1e-5, rtol=0)


def test_gigpo_without_states_is_episode_level_grpo(make_batch):
    batch = gigpo_batch(make_batch).with_fields(state_ids=None, step_rewards=None)
    out, _ = GiGPOAdvantage(fnorm="std")(batch)
    # every run rewarded on its last step only: A 1, B 0 / C 2, D 0 -> +-1/std(1, 0) and +-2/std(2, 0)
    a = 0.5 / 0.5**0.5
    torch.testing.assert_close(out.advantages[:, 0], torch.tensor([a, -a, a, -a, a, a, -a, 0.0]), atol=1e-5, rtol=0)


def test_batch_reads_step_rewards_and_states_from_info():
    experiences = [
        Experience(tokens=torch.arange(3), prompt_length=1, reward=1.0, eid=EID(task="t", run=run, step=step),
                   info=info)
        for run, step, info in [(0, 0, {"env_state_hash": "abc", "step_reward": 0.5}), (0, 1, {}),
                                (1, 0, {"env_state_hash": "abc"}), (1, 1, {"env_state_hash": ("x", 1)})]
    ]  # fmt: skip
    batch = Batch.from_experiences(experiences)
    assert batch.state_ids.tolist() == [0, -1, 0, 1]
    assert batch.step_rewards[0].item() == 0.5 and batch.step_rewards[1:].isnan().all()
    assert batch.run_ids.tolist() == [0, 0, 1, 1] and batch.step_ids.tolist() == [0, 1, 0, 1]
    plain = Batch.from_experiences(experiences[1:2])
    assert plain.state_ids is None and plain.step_rewards is None


def test_step_wise_grpo_threshold_and_batch_std(make_batch):
    # task 0: runs scored 1, 0 (last steps); task 1: runs scored 2, 2 (std 0); task 2: one run
    batch = make_batch(
        [[1]] * 6, [5.0, 1.0, 0.0, 2.0, 2.0, 7.0], [0, 0, 0, 1, 1, 2], run_ids=[0, 0, 1, 2, 3, 4],
        step_ids=[0, 1, 0, 0, 0, 0],
    )  # fmt: skip
    out, metrics = StepWiseGRPOAdvantage(std_threshold=0.0)(batch)
    assert out.run_ids.tolist() == [0, 0, 1] and metrics["filtered_count"] == 3
    a = 0.5 / 0.5**0.5
    torch.testing.assert_close(out.advantages[:, 0], torch.tensor([a, a, -a]), atol=1e-5, rtol=0)
    out, _ = StepWiseGRPOAdvantage(std_cal_level="batch")(batch)
    std = torch.tensor([1.0, 0.0, 2.0, 2.0, 7.0]).std()  # every run's last-step score
    torch.testing.assert_close(out.advantages[:3, 0], torch.tensor([0.5, 0.5, -0.5]) / (std + 1e-6))
