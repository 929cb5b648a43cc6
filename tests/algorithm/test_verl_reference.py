"""Our functions against verl's ``core_algos`` on a seeded random batch (16 x 32) and an edge batch.

The recorded fixture comes from ``reference/make_verl_reference.py`` (verl 0.9.1, its own venv,
float64). Our functions compute in float32, hence the tolerance. Compared under the response
mask only: off the mask we return 0 where verl leaves intermediate values. The random batch has
no group of one (there we intentionally differ, see ``trinity.algorithm.advantage``); the edge
batch has two, compared with ``grpo_verl`` (verl's handling) and with ``grpo`` (0 there), and
log-ratios up to 40 for the KL estimators' clamps.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from reference.tensor_tree import load_tree

from trinity.algorithm.advantage import (
    GAEAdvantage,
    GPGAdvantage,
    GRPOAdvantage,
    GRPOPassKAdvantage,
    GRPOVerlAdvantage,
    OPOAdvantage,
    REINFORCEPlusPlusAdvantage,
    REINFORCEPlusPlusBaselineAdvantage,
    ReMaxAdvantage,
    RLOOAdvantage,
)
from trinity.algorithm.entropy import DefaultEntropyLoss
from trinity.algorithm.kl import AdaptiveKLController
from trinity.algorithm.policy_loss import (
    CISPOPolicyLoss,
    ClipCovPolicyLoss,
    GeoMeanPolicyLoss,
    GPGPolicyLoss,
    GSPOPolicyLoss,
    KLCovPolicyLoss,
    PPOPolicyLoss,
    SAPOPolicyLoss,
)
from trinity.algorithm.utils import agg_loss
from trinity.plugins import Kind, resolve

REFERENCE_DIR = Path(__file__).with_name("reference")
TOL = {"rtol": 1e-5, "atol": 1e-5}
_spec = importlib.util.spec_from_file_location("make_verl_reference", REFERENCE_DIR / "make_verl_reference.py")
ref = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ref)


def close(ours: torch.Tensor, theirs: torch.Tensor, mask: torch.Tensor | None = None) -> None:
    theirs = theirs.to(torch.float64)
    ours = ours.detach().to(torch.float64)
    if mask is not None:
        ours, theirs = ours * mask, theirs * mask
    torch.testing.assert_close(ours, theirs, **TOL)


def compare(x: dict[str, torch.Tensor], cases: dict[str, dict[str, torch.Tensor]], make_batch) -> list[str]:
    """Assert every case; returns the names compared."""
    mask = x["response_mask"]
    common = {"old_logprobs": x["old_logprobs"], "ref_logprobs": x["ref_logprobs"], "advantages": x["advantages"]}
    sparse = make_batch(mask, x["rewards"], x["group_ids"], token_level_rewards=x["token_level_rewards"], **common)
    dense = make_batch(
        mask, x["rewards"], x["group_ids"], token_level_rewards=x["dense_rewards"], values=x["values"],
        reward_baselines=x["reward_baselines"], **common,
    )  # fmt: skip
    done = []

    def check_adv(name, fn, batch, returns=False):
        out, _ = fn(batch)
        close(out.advantages, cases[name]["advantages"], mask)
        if returns:
            close(out.returns, cases[name]["returns"], mask)
        done.append(name)

    check_adv("gae", GAEAdvantage(**ref.GAE_ARGS), dense, returns=True)
    check_adv("grpo_normTrue", GRPOAdvantage(), sparse)
    check_adv("grpo_normFalse", GRPOAdvantage(norm_adv_by_std=False), sparse)
    check_adv("rloo", RLOOAdvantage(), sparse)
    check_adv("reinforceplusplus", REINFORCEPlusPlusAdvantage(**ref.RPP_ARGS), dense, returns=True)
    check_adv("remax", ReMaxAdvantage(), dense, returns=True)
    check_adv("reinforce_plus_plus_baseline", REINFORCEPlusPlusBaselineAdvantage(), sparse)
    check_adv("opo", OPOAdvantage(), sparse)
    check_adv("gpg", GPGAdvantage(**ref.GPG_ARGS), sparse)
    check_adv("grpo_passk_normTrue", GRPOPassKAdvantage(), sparse)
    check_adv("grpo_passk_normFalse", GRPOPassKAdvantage(norm_adv_by_std=False), sparse)

    def check_loss(name, fn, scale=1.0):
        logprobs = x["logprobs"].float().requires_grad_(True)
        loss, metrics = fn(logprobs, sparse)
        loss.backward()
        close(loss, cases[name]["loss"] * scale)
        close(logprobs.grad, cases[name]["grad"] * scale)
        for key in ("ppo_kl", "pg_clipfrac", "pg_clipfrac_lower"):
            if key in metrics:
                close(torch.tensor(metrics[key]), cases[name][key])
        done.append(name)

    for mode in ref.AGG_MODES:
        close(agg_loss(x["advantages"].float(), mask.float(), mode), cases[f"agg_{mode}"]["loss"])
        done.append(f"agg_{mode}")
        check_loss(f"ppo_{mode}", PPOPolicyLoss(loss_agg_mode=mode, **ref.PPO_ARGS))
    check_loss("gspo", GSPOPolicyLoss(**ref.GSPO_ARGS))
    check_loss("cispo", CISPOPolicyLoss(**ref.CISPO_ARGS))
    check_loss("gpg_loss", GPGPolicyLoss())
    rows = (mask.sum(-1) > 0).sum()  # verl's geo_mean averages over every row, we over the non-empty ones
    check_loss("geo_mean", GeoMeanPolicyLoss(**ref.GEO_MEAN_ARGS), scale=len(mask) / rows)
    check_loss("sapo", SAPOPolicyLoss(**ref.SAPO_ARGS))
    check_loss("clip_cov", ClipCovPolicyLoss(**ref.CLIP_COV_ARGS))
    check_loss("kl_cov", KLCovPolicyLoss(**ref.KL_COV_ARGS))
    done += check_kl(x, cases)
    loss, metrics = DefaultEntropyLoss(entropy_coef=1.0)(cases["entropy"]["entropy"], sparse)
    close(-loss, cases["entropy"]["loss"])
    done.append("entropy")
    controller = AdaptiveKLController(
        ref.ADAPTIVE_KL["kl_coef"], ref.ADAPTIVE_KL["target_kl"], ref.ADAPTIVE_KL["horizon"]
    )
    values = []
    for kl in ref.ADAPTIVE_KL["kls"]:
        values.append(controller.value)
        controller.update(kl, ref.ADAPTIVE_KL["n_steps"])
    close(torch.tensor(values), cases["adaptive_kl"]["values"])
    done.append("adaptive_kl")
    return done


def check_kl(x: dict[str, torch.Tensor], cases: dict[str, dict[str, torch.Tensor]]) -> list[str]:
    """Every KL name of verl, resolved through the registry: value and gradient per token."""
    for name in ref.KL_NAMES:
        logprobs = x["logprobs"].float().requires_grad_(True)
        kl = resolve(Kind.KL_FN, name)().kl(logprobs, x["ref_logprobs"].float())
        kl.sum().backward()
        close(kl, cases[f"kl_{name}"]["kl"])
        close(logprobs.grad, cases[f"kl_{name}"]["grad"])
    return [f"kl_{name}" for name in ref.KL_NAMES]


def compare_edge(x: dict[str, torch.Tensor], cases: dict[str, dict[str, torch.Tensor]], make_batch) -> list[str]:
    """GRPO on groups of one (``grpo_verl`` as verl, ``grpo`` 0 there) and the KL clamps."""
    mask = x["response_mask"]
    batch = make_batch(mask, x["rewards"], x["group_ids"], token_level_rewards=x["token_level_rewards"])
    lone = torch.tensor([False, False, True, False, False, True])
    for norm in (True, False):
        theirs = cases[f"grpo_norm{norm}"]["advantages"]
        close(GRPOVerlAdvantage(norm_adv_by_std=norm)(batch)[0].advantages, theirs, mask)
        close(GRPOAdvantage(norm_adv_by_std=norm)(batch)[0].advantages, theirs * ~lone[:, None], mask)
    return ["grpo_normTrue", "grpo_normFalse", *check_kl(x, cases)]


def test_against_recorded_verl_outputs(make_batch):
    payload = load_tree(REFERENCE_DIR / "verl_reference.safetensors")
    assert payload["verl_version"] == "0.9.1"
    # the recorded inputs are the ones the script builds today
    for key, value in ref.make_inputs().items():
        assert torch.equal(payload["inputs"][key], value), key
    assert sorted(compare(payload["inputs"], payload["cases"], make_batch)) == sorted(payload["cases"])
    for key, value in ref.make_edge_inputs().items():
        assert torch.equal(payload["edge_inputs"][key], value), key
    edge = compare_edge(payload["edge_inputs"], payload["edge_cases"], make_batch)
    assert sorted(edge) == sorted(payload["edge_cases"])


def test_against_live_verl(make_batch):
    pytest.importorskip("verl.trainer.ppo.core_algos", reason="verl is not installed here (see make_verl_reference.py)")
    x = ref.make_inputs(seed=1)
    cases = ref.build_cases(x)
    assert sorted(compare(x, cases, make_batch)) == sorted(cases)
    edge = ref.make_edge_inputs()
    assert sorted(compare_edge(edge, ref.build_edge_cases(edge), make_batch)) == sorted(ref.build_edge_cases(edge))
