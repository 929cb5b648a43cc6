"""Rollout correction against verl 0.9.1's ``rollout_corr_helper`` and bypass-mode loss, to 1e-5.

The fixture comes from ``reference/make_rollout_correction_reference.py`` (the engines venv's verl,
float64 inputs): importance weights (token/sequence, TIS, IcePop, batch-normalised), every
rejection criterion and a chained one, verl's decoupled presets through the whole correction and
PPO's weighted loss, its bypass presets through the policy loss (ppo_clip and reinforce), and the
preset table. Every metric verl reports is compared, by name.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from reference.tensor_tree import load_tree

from trinity.algorithm.policy_loss import PPOPolicyLoss
from trinity.algorithm.rollout_correction import RolloutCorrector, correct, is_weights, rejection_mask
from trinity.config.schema import ROLLOUT_CORRECTION_PRESETS, RolloutCorrectionConfig

REFERENCE_DIR = Path(__file__).with_name("reference")
TOL = {"rtol": 1e-5, "atol": 1e-5}
_spec = importlib.util.spec_from_file_location(
    "make_rollout_correction_reference", REFERENCE_DIR / "make_rollout_correction_reference.py"
)
ref = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ref)
PPO_ARGS = {
    "clip_range_low": ref.PPO_CLIP["clip_ratio_low"],
    "clip_range_high": ref.PPO_CLIP["clip_ratio_high"],
    "clip_ratio_c": ref.PPO_CLIP["clip_ratio_c"],
}


def close(ours, theirs) -> None:
    torch.testing.assert_close(torch.as_tensor(ours, dtype=torch.float64), torch.as_tensor(theirs).double(), **TOL)


def same_metrics(ours: dict[str, float], theirs: dict[str, float], name: str) -> None:
    assert sorted(ours) == sorted(theirs), name
    for key, value in theirs.items():
        close(ours[key], value)


def compare(x: dict[str, torch.Tensor], cases: dict[str, dict], make_batch) -> list[str]:
    """Assert every case; returns the names compared."""
    mask = x["response_mask"]
    log_ratio = x["old_logprobs"] - x["rollout_logprobs"]
    done = []
    for name, (level, threshold, normalize) in ref.IS_CASES.items():
        weights, metrics = is_weights(log_ratio, mask, level, threshold, normalize)
        close(weights, cases[f"is_{name}"]["weights"])
        same_metrics(metrics, cases[f"is_{name}"]["metrics"], name)
        done.append(f"is_{name}")
    for name, (options, threshold) in ref.RS_CASES.items():
        kept, metrics = rejection_mask(log_ratio, mask, options, threshold)
        assert torch.equal(kept, cases[f"rs_{name}"]["mask"]), name
        same_metrics(metrics, cases[f"rs_{name}"]["metrics"], name)
        done.append(f"rs_{name}")
    for name in ref.FULL_CASES:
        case = cases[f"full_{name}"]
        settings = RolloutCorrectionConfig(**case["settings"])
        weights, kept, metrics = correct(x["old_logprobs"], x["rollout_logprobs"], mask, settings)
        assert (weights is None) == ("weights" not in case), name
        if weights is not None:
            close(weights, case["weights"])
        assert torch.equal(kept, case["mask"]), name
        same_metrics(metrics, case["metrics"], name)
        batch = make_batch(kept, old_logprobs=x["old_logprobs"], advantages=x["advantages"], rollout_is_weights=weights)
        logprobs = x["logprobs"].float().requires_grad_(True)
        loss, pg_metrics = PPOPolicyLoss(**PPO_ARGS)(logprobs, batch)
        loss.backward()
        close(loss.detach(), case["loss"])
        close(logprobs.grad, case["grad"])
        for key in ("pg_clipfrac", "ppo_kl", "pg_clipfrac_lower"):
            close(pg_metrics[key], case["pg_metrics"][f"actor/{key}"])
        done.append(f"full_{name}")
    for name in ref.BYPASS_CASES:
        for mode in ("token-mean", "seq-mean-token-sum"):
            case = cases[f"bypass_{name}_{mode}"]
            corrector = RolloutCorrector(RolloutCorrectionConfig(**case["settings"]), bypass=True)
            batch = make_batch(mask, old_logprobs=x["rollout_logprobs"], advantages=x["advantages"])
            logprobs = x["logprobs"].float().requires_grad_(True)
            loss, metrics = corrector.bypass_loss(PPOPolicyLoss(loss_agg_mode=mode, **PPO_ARGS), logprobs, batch)
            loss.backward()
            close(loss.detach(), case["loss"])
            close(logprobs.grad, case["grad"])
            theirs = {k.removeprefix("actor/"): v for k, v in case["metrics"].items()}
            same_metrics({k: v for k, v in metrics.items() if k in theirs}, theirs, name)
            done.append(f"bypass_{name}_{mode}")
    return done


def test_against_recorded_verl_outputs(make_batch):
    payload = load_tree(REFERENCE_DIR / "rollout_correction_reference.safetensors")
    assert payload["verl_version"] == "0.9.1"
    for key, value in ref.make_inputs().items():  # the recorded inputs are the ones the script builds today
        assert torch.equal(payload["inputs"][key], value), key
    done = compare(payload["inputs"], payload["cases"], lambda mask, **f: make_batch(mask, dtype=torch.float64, **f))
    assert sorted(done) == sorted(payload["cases"])


def test_presets_expand_as_verls():
    payload = load_tree(REFERENCE_DIR / "rollout_correction_reference.safetensors")
    assert ROLLOUT_CORRECTION_PRESETS == payload["presets"]
    for name, values in payload["presets"].items():
        expanded = RolloutCorrectionConfig(preset=name).model_dump(exclude={"preset"})
        assert expanded == values, name
    # keys set next to a preset win over it
    mixed = RolloutCorrectionConfig(preset="bypass_pg_is", rollout_is="token", rollout_is_threshold="0.5_3")
    assert (mixed.rollout_is, mixed.rollout_is_threshold, mixed.loss_type) == ("token", "0.5_3", "reinforce")


def test_bypass_loss_is_the_policy_loss_when_rollout_and_trainer_agree(make_batch):
    """No mismatch: every weight 1, nothing rejected, the loss and gradient are the policy loss's."""
    x = ref.make_inputs()
    batch = make_batch(x["response_mask"], old_logprobs=x["old_logprobs"], advantages=x["advantages"])
    for preset in ("bypass_ppo_clip_k3_rs", "bypass_pg_geo_rs_token_tis"):
        corrector = RolloutCorrector(RolloutCorrectionConfig(preset=preset), bypass=True)
        logprobs = x["old_logprobs"].float().requires_grad_(True)
        loss, metrics = corrector.bypass_loss(PPOPolicyLoss(), logprobs, batch)
        loss.backward()
        plain = x["old_logprobs"].float().requires_grad_(True)
        expected = PPOPolicyLoss()(plain, batch)[0] if preset.startswith("bypass_ppo") else None
        if expected is None:  # reinforce: -A log p, token-mean
            mask = x["response_mask"]
            expected = (-(x["advantages"] * plain) * mask).sum() / mask.sum()
        expected.backward()
        close(loss.detach(), expected.detach())
        close(logprobs.grad, plain.grad)
        assert metrics["rollout_corr/rollout_rs_masked_fraction"] == 0.0
        assert abs(metrics["rollout_corr/kl"]) < 1e-6


def test_against_live_verl(make_batch):
    pytest.importorskip("verl.trainer.ppo.rollout_corr_helper", reason="verl is not installed here (see the script)")
    x = ref.make_inputs(seed=1)
    cases = ref.build_cases(x)
    done = compare(x, cases, lambda mask, **f: make_batch(mask, dtype=torch.float64, **f))
    assert sorted(done) == sorted(cases)


def test_partial_rollout_tokens_are_reported_by_their_own_staleness():
    """Tokens sampled by older weights (partial rollout) are counted, and their log-ratio reported,
    apart from the fresh ones; without token versions no such metric appears."""
    from trinity.algorithm.rollout_correction import token_staleness_metrics
    from trinity.common.batch import Batch
    from trinity.common.experience import Experience

    rows = [
        Experience(
            tokens=torch.tensor([1, 2, 3, 4, 5]),
            prompt_length=1,
            model_version=1,
            info={"token_versions": [1, 1, 2, 2]},
        ),
        Experience(tokens=torch.tensor([1, 2, 3]), prompt_length=1, model_version=2),
    ]
    batch = Batch.from_experiences(rows).with_fields(global_steps=torch.tensor([3, 3]))  # trainer at version 2
    log_ratio = torch.tensor([[0.4, -0.4, 0.1, 0.1], [0.1, -0.1, 9.0, 9.0]])  # padding's values never count
    metrics = token_staleness_metrics(log_ratio, batch.response_mask, batch)
    assert metrics["rollout_corr/token_fraction/staleness_1"] == pytest.approx(2 / 6)
    assert metrics["rollout_corr/abs_log_ratio/staleness_1"] == pytest.approx(0.4)
    assert metrics["rollout_corr/token_fraction/staleness_0"] == pytest.approx(4 / 6)
    assert metrics["rollout_corr/abs_log_ratio/staleness_0"] == pytest.approx(0.1)
    assert token_staleness_metrics(log_ratio, batch.response_mask, batch.with_fields(token_versions=None)) == {}
