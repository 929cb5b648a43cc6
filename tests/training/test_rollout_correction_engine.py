"""``algorithm.bypass_old_logprobs`` and ``algorithm.rollout_correction`` through the trainer's step on
the torch engine (the tiny model): which old logprobs the loss sees, and what the correction does to
the loss when the rollout's logprobs and the trainer's differ, and that it does nothing when they agree."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from helpers.engine_helpers import train_mode_trainer
from trinity.common.batch import Batch
from trinity.common.experience import EID, Experience
from trinity.trainer.trainer import Trainer

PROMPT, RESPONSE = 4, 6
SHIFT = torch.tensor([0.0, 0.3, -0.5, 1.5, -1.2, 0.05]) * torch.tensor([1.0, 0.5, -1.0, 0.2])[:, None]
"""Trainer minus rollout logprobs per token: IS weights from 1 to 2 (e^1.5 truncated), k3 above 0.3 for 3 tokens."""


def make_trainer(tmp_path: Path, model_dir: Path, algorithm: str = "") -> Trainer:
    return train_mode_trainer(tmp_path, model_dir, ", kl_loss_fn: none, entropy_loss_fn: none" + algorithm)


def experiences(logprobs: torch.Tensor | None = None) -> list[Experience]:
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(3, 60, (4, PROMPT + RESPONSE), generator=gen)
    lp = logprobs if logprobs is not None else torch.full((4, RESPONSE), -2.0)
    return [
        Experience(
            tokens=tokens[i],
            prompt_length=PROMPT,
            logprobs=lp[i].clone(),
            reward=float(i % 2),
            eid=EID(batch="0", task=str(i // 2), run=i % 2),
        )
        for i in range(4)
    ]


def actor_logprobs(trainer: Trainer) -> torch.Tensor:
    return trainer.engine.compute_logprobs(Batch.from_experiences(experiences()))


def run_step(trainer: Trainer, exps: list[Experience], monkeypatch) -> tuple[dict, Batch, list[int]]:
    """The step's metrics, the batch the engine trained on, and how often the actor's logprobs
    were computed outside the update."""
    seen: list[Batch] = []
    recomputed: list[int] = []
    train_step, compute = trainer.engine.train_step, trainer.engine.compute_logprobs

    def spy_train(batch: Batch):
        seen.append(batch)
        return train_step(batch)

    def spy_compute(batch: Batch):
        recomputed.append(batch.batch_size)
        return compute(batch)

    monkeypatch.setattr(trainer.engine, "train_step", spy_train)
    monkeypatch.setattr(trainer.engine, "compute_logprobs", spy_compute)
    metrics = trainer.train_step(exps)
    return metrics, seen[0], recomputed


def test_bypass_old_logprobs_uses_the_rollout_logprobs_without_recomputing(tmp_path, tiny_model_dir, monkeypatch):
    trainer = make_trainer(tmp_path, tiny_model_dir)  # bypass_old_logprobs: true, Trinity-RFT's default
    assert trainer.config.algorithm.bypass_old_logprobs
    rollout = torch.full((4, RESPONSE), -2.0)
    _, batch, recomputed = run_step(trainer, experiences(rollout), monkeypatch)
    assert recomputed == []  # the actor never ran outside the update
    torch.testing.assert_close(batch.old_logprobs, rollout)
    assert batch.rollout_logprobs is None


def test_recompute_when_bypass_old_logprobs_is_false(tmp_path, tiny_model_dir, monkeypatch):
    trainer = make_trainer(tmp_path, tiny_model_dir, ", bypass_old_logprobs: false")
    expected = actor_logprobs(trainer)
    rollout = torch.full((4, RESPONSE), -2.0)
    _, batch, recomputed = run_step(trainer, experiences(rollout), monkeypatch)
    assert recomputed == [4]
    torch.testing.assert_close(batch.old_logprobs, expected)  # the actor's, not the rollout's
    torch.testing.assert_close(batch.rollout_logprobs, rollout)
    assert batch.rollout_is_weights is None  # no rollout_correction: recomputing only


DECOUPLED = ", rollout_correction: {preset: decoupled_token_is, rollout_rs: token_k3, rollout_rs_threshold: 0.3}"


def test_decoupled_correction_weights_and_masks_the_loss(tmp_path, tiny_model_dir, monkeypatch):
    plain = make_trainer(tmp_path / "plain", tiny_model_dir, ", bypass_old_logprobs: false")
    old = actor_logprobs(plain)
    shift = SHIFT
    rollout = old - shift  # log r = old - rollout = shift
    base, _, _ = run_step(plain, experiences(rollout), monkeypatch)

    corrected = make_trainer(tmp_path / "corrected", tiny_model_dir, DECOUPLED)
    assert not corrected.config.algorithm.bypass_old_logprobs  # the decoupled preset recomputes
    metrics, batch, recomputed = run_step(corrected, experiences(rollout), monkeypatch)
    assert recomputed == [4]
    k3 = shift.exp() - 1 - shift
    kept = (k3 <= 0.3).float()
    assert 0 < kept.sum() < kept.numel()
    torch.testing.assert_close(batch.response_mask, kept)
    torch.testing.assert_close(batch.rollout_is_weights, shift.exp().clamp(max=2.0), atol=1e-5, rtol=0)
    assert metrics["rollout_corr/rollout_rs_masked_fraction"] == pytest.approx(1 - kept.mean().item())
    assert metrics["rollout_corr/rollout_is_ratio_fraction_high"] == pytest.approx((shift.exp() > 2).float().mean())
    assert metrics["rollout_corr/rollout_is_ratio_fraction_low"] == pytest.approx((shift.exp() < 0.5).float().mean())
    assert metrics["rollout_corr/kl"] == pytest.approx(-shift.mean().item(), abs=1e-5)
    # what the loss is: GRPO's on the kept tokens, each weighted (the ratio to the old policy is 1 here)
    adv = batch.advantages
    weights = batch.rollout_is_weights * batch.response_mask
    expected = (-(adv * weights)).sum() / batch.response_mask.sum()
    assert metrics["actor/pg_loss"] == pytest.approx(expected.item(), abs=1e-5)
    assert metrics["actor/pg_loss"] != pytest.approx(base["actor/pg_loss"], abs=1e-4)


def test_decoupled_correction_does_nothing_when_the_logprobs_agree(tmp_path, tiny_model_dir, monkeypatch):
    plain = make_trainer(tmp_path / "plain", tiny_model_dir, ", bypass_old_logprobs: false")
    old = actor_logprobs(plain)
    base, base_batch, _ = run_step(plain, experiences(old), monkeypatch)
    corrected = make_trainer(tmp_path / "corrected", tiny_model_dir, DECOUPLED)
    metrics, batch, _ = run_step(corrected, experiences(old), monkeypatch)
    torch.testing.assert_close(batch.response_mask, base_batch.response_mask)
    torch.testing.assert_close(batch.rollout_is_weights, torch.ones(4, RESPONSE))
    assert metrics["rollout_corr/rollout_rs_masked_fraction"] == 0.0
    for key in ("actor/pg_loss", "actor/grad_norm"):
        assert metrics[key] == pytest.approx(base[key], abs=1e-6)


BYPASS_RS = ", rollout_correction: {preset: bypass_ppo_clip_k3_rs, rollout_rs: token_k3, rollout_rs_threshold: 0.3}"


def test_bypass_correction_rejects_in_the_loss(tmp_path, tiny_model_dir, monkeypatch):
    plain = make_trainer(tmp_path / "plain", tiny_model_dir)
    old = actor_logprobs(plain)
    shift = SHIFT
    base, _, _ = run_step(plain, experiences(old - shift), monkeypatch)
    corrected = make_trainer(tmp_path / "corrected", tiny_model_dir, BYPASS_RS)
    metrics, batch, recomputed = run_step(corrected, experiences(old - shift), monkeypatch)
    assert recomputed == [] and batch.rollout_is_weights is None  # bypass: nothing before the loss
    assert metrics["rollout_corr/rollout_rs_masked_fraction"] > 0
    assert "actor/rollout_corr/kl" not in metrics and "rollout_corr/kl" in metrics  # verl's names
    assert metrics["actor/pg_loss"] != pytest.approx(base["actor/pg_loss"], abs=1e-4)
    # agreeing logprobs: nothing rejected, the same loss as without the correction
    plain = make_trainer(tmp_path / "plain2", tiny_model_dir)
    base, _, _ = run_step(plain, experiences(old), monkeypatch)
    corrected = make_trainer(tmp_path / "corrected2", tiny_model_dir, BYPASS_RS)
    metrics, _, _ = run_step(corrected, experiences(old), monkeypatch)
    assert metrics["rollout_corr/rollout_rs_masked_fraction"] == 0.0
    assert metrics["actor/pg_loss"] == pytest.approx(base["actor/pg_loss"], abs=1e-6)
