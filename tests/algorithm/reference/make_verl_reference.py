"""Record verl's outputs on seeded random batches, for tests/algorithm/test_verl_reference.py.

verl's pins fight the main environment's, so this runs in its own venv:

    python3 -m venv /tmp/verl-venv
    /tmp/verl-venv/bin/pip install torch==2.13.0 && /tmp/verl-venv/bin/pip install verl==0.9.1
    /tmp/verl-venv/bin/python tests/algorithm/reference/make_verl_reference.py [OUT.safetensors]

It imports only torch, safetensors and verl; ``build_cases`` is also run by the live test where verl imports.
Inputs are float64 so that the recorded outputs are exact to rounding.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

FIXTURE = Path(__file__).with_name("verl_reference.safetensors")
B, R = 16, 32
GROUP = 4


def make_inputs(seed: int = 0) -> dict[str, torch.Tensor]:
    """A batch with ragged lengths, one empty response and multi-turn holes in the mask."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, R + 1, (B,), generator=gen)
    lengths[5] = 0
    lengths[2] = R
    mask = (torch.arange(R)[None, :] < lengths[:, None]).double()
    mask[3, 4:9] = 0.0  # tool output inside a response
    mask[7, 1:3] = 0.0
    rewards = torch.randint(0, 3, (B,), generator=gen).double()
    rewards[8:12] = 1.0  # an all-equal group
    last = (mask * torch.arange(1, R + 1)).argmax(-1)
    token_level_rewards = torch.zeros(B, R, dtype=torch.float64)
    token_level_rewards[torch.arange(B), last] = rewards * (lengths > 0)
    dense_rewards = torch.randn(B, R, generator=gen, dtype=torch.float64) * mask
    old = -torch.rand(B, R, generator=gen, dtype=torch.float64) * 3
    return {
        "response_mask": mask,
        "rewards": rewards,
        "group_ids": torch.arange(B) // GROUP,
        "token_level_rewards": token_level_rewards,
        "dense_rewards": dense_rewards,
        "values": torch.randn(B, R, generator=gen, dtype=torch.float64),
        "reward_baselines": torch.rand(B, generator=gen, dtype=torch.float64),
        "old_logprobs": old,
        "logprobs": old + torch.randn(B, R, generator=gen, dtype=torch.float64) * 0.3,
        "ref_logprobs": old + torch.randn(B, R, generator=gen, dtype=torch.float64) * 0.5,
        "advantages": torch.randn(B, R, generator=gen, dtype=torch.float64) * mask,
        "logits": torch.randn(B, R, 11, generator=gen, dtype=torch.float64),
    }


def make_edge_inputs() -> dict[str, torch.Tensor]:
    """Groups of one and of two, equal rewards, and log-ratios far out (|d| up to 40)."""
    gen = torch.Generator().manual_seed(7)
    b, r = 6, 5
    mask = torch.ones(b, r, dtype=torch.float64)
    mask[1, 3:] = 0.0
    mask[4, 1:] = 0.0
    rewards = torch.tensor([1.0, 0.0, 3.0, 2.0, 2.0, -1.0], dtype=torch.float64)
    last = (mask * torch.arange(1, r + 1)).argmax(-1)
    token_level_rewards = torch.zeros(b, r, dtype=torch.float64)
    token_level_rewards[torch.arange(b), last] = rewards
    logprobs = -torch.rand(b, r, generator=gen, dtype=torch.float64) * 2
    ref = logprobs + torch.tensor([-40.0, -25.0, -3.0, 0.0, 3.0, 25.0], dtype=torch.float64)[:, None]
    return {
        "response_mask": mask,
        "rewards": rewards,
        "group_ids": torch.tensor([0, 0, 1, 2, 2, 3]),  # groups of 2, 1, 2 (equal rewards), 1
        "token_level_rewards": token_level_rewards,
        "logprobs": logprobs,
        "ref_logprobs": ref,
    }


AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
PPO_ARGS = {"clip_range": 0.2, "clip_range_low": 0.2, "clip_range_high": 0.28, "clip_ratio_c": 3.0}
CISPO_ARGS = {"clip_range_low": 0.5, "clip_range_high": 0.28}
GSPO_ARGS = {"clip_range_low": 3e-3, "clip_range_high": 4e-3}
GAE_ARGS = {"gamma": 0.99, "lam": 0.95}
RPP_ARGS = {"gamma": 0.97}
GEO_MEAN_ARGS = {"clip_range_low": 0.4, "clip_range_high": 0.3}
SAPO_ARGS = {"tau_pos": 1.0, "tau_neg": 1.05}
CLIP_COV_ARGS = {"clip_range": 0.2, "clip_cov_ratio": 1.0, "clip_cov_lb": 0.05, "clip_cov_ub": 1.0}
"""``clip_cov_ratio`` 1: every candidate token is detached, so verl's random pick is the whole set."""
KL_COV_ARGS = {"kl_cov_ratio": 0.05, "ppo_kl_coef": 0.1}
GPG_ARGS = {"f_norm": 2.0}
KL_NAMES = ("k1", "kl", "k2", "mse", "k3", "low_var_kl", "abs", "k1+", "k3+", "low_var_kl+", "abs+")
ADAPTIVE_KL = {"kl_coef": 0.05, "target_kl": 0.1, "horizon": 100, "kls": (0.3, 0.12, 0.0, 0.1), "n_steps": 16}


def _actor_config(clip_low: float, clip_high: float, clip_ratio_c: float = 3.0, **extra):
    from verl.workers.config import ActorConfig, PolicyLossConfig

    policy_loss = {k: extra.pop(k) for k in list(extra) if k in PolicyLossConfig.__dataclass_fields__}
    return ActorConfig(
        strategy="fsdp",
        rollout_n=GROUP,
        ppo_micro_batch_size_per_gpu=1,
        clip_ratio=clip_low,
        clip_ratio_low=clip_low,
        clip_ratio_high=clip_high,
        clip_ratio_c=clip_ratio_c,
        policy_loss=PolicyLossConfig(**policy_loss),
        **extra,
    )


def _loss_with_grad(fn, x: dict[str, torch.Tensor], **kwargs) -> dict[str, torch.Tensor]:
    logprobs = x["logprobs"].clone().requires_grad_(True)
    loss, metrics = fn(old_log_prob=x["old_logprobs"], log_prob=logprobs, advantages=x["advantages"], **kwargs)
    loss.backward()
    return {
        "loss": loss.detach(),
        "grad": logprobs.grad,
        **{k.removeprefix("actor/"): torch.tensor(v) for k, v in metrics.items()},
    }


def _kl_with_grad(core, x: dict[str, torch.Tensor], name: str) -> dict[str, torch.Tensor]:
    logprobs = x["logprobs"].clone().requires_grad_(True)
    kl = core.kl_penalty(logprobs, x["ref_logprobs"], name)
    kl.sum().backward()
    return {"kl": kl.detach(), "grad": logprobs.grad}


def build_edge_cases(x: dict[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
    """verl's outputs on ``make_edge_inputs``: GRPO's groups of one, KL at extreme log-ratios."""
    import verl.trainer.ppo.core_algos as core

    cases = {}
    for norm in (True, False):
        adv, _ = core.compute_grpo_outcome_advantage(
            x["token_level_rewards"], x["response_mask"], x["group_ids"].numpy(), norm_adv_by_std_in_grpo=norm
        )
        cases[f"grpo_norm{norm}"] = {"advantages": adv}
    for name in KL_NAMES:
        cases[f"kl_{name}"] = _kl_with_grad(core, x, name)
    return cases


def build_cases(x: dict[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
    """verl's outputs on inputs ``x``: case name -> tensors."""
    import verl.trainer.ppo.core_algos as core
    import verl.utils.torch_functional as verl_F

    mask, index = x["response_mask"], x["group_ids"].numpy()
    dense = x["dense_rewards"]
    cases: dict[str, dict[str, torch.Tensor]] = {}
    adv, ret = core.compute_gae_advantage_return(dense, x["values"], mask, **GAE_ARGS)
    cases["gae"] = {"advantages": adv, "returns": ret}
    for norm in (True, False):
        adv, _ = core.compute_grpo_outcome_advantage(
            x["token_level_rewards"], mask, index, epsilon=1e-6, norm_adv_by_std_in_grpo=norm
        )
        cases[f"grpo_norm{norm}"] = {"advantages": adv}
    adv, _ = core.compute_rloo_outcome_advantage(x["token_level_rewards"], mask, index)
    cases["rloo"] = {"advantages": adv}
    adv, ret = core.compute_reinforce_plus_plus_outcome_advantage(dense, mask, config=SimpleNamespace(**RPP_ARGS))
    cases["reinforceplusplus"] = {"advantages": adv, "returns": ret}
    adv, ret = core.compute_remax_outcome_advantage(dense, x["reward_baselines"], mask)
    cases["remax"] = {"advantages": adv, "returns": ret}
    adv, _ = core.compute_reinforce_plus_plus_baseline_outcome_advantage(x["token_level_rewards"], mask, index)
    cases["reinforce_plus_plus_baseline"] = {"advantages": adv}
    adv, _ = core.compute_opo_outcome_advantage(x["token_level_rewards"], mask, index)
    cases["opo"] = {"advantages": adv}
    adv, _ = core.compute_gpg_outcome_advantage(x["token_level_rewards"], mask, index, **GPG_ARGS)
    cases["gpg"] = {"advantages": adv}
    for norm in (True, False):
        adv, _ = core.compute_grpo_passk_outcome_advantage(
            x["token_level_rewards"], mask, index, config={"norm_adv_by_std_in_grpo": norm}
        )
        cases[f"grpo_passk_norm{norm}"] = {"advantages": adv}
    for mode in AGG_MODES:
        cases[f"agg_{mode}"] = {"loss": core.agg_loss(x["advantages"], mask, mode)}
        cases[f"ppo_{mode}"] = _loss_with_grad(
            core.compute_policy_loss_vanilla,
            x,
            response_mask=mask,
            loss_agg_mode=mode,
            config=_actor_config(PPO_ARGS["clip_range_low"], PPO_ARGS["clip_range_high"], PPO_ARGS["clip_ratio_c"]),
        )
    cases["gspo"] = _loss_with_grad(
        core.compute_policy_loss_gspo,
        x,
        response_mask=mask,
        loss_agg_mode="seq-mean-token-mean",
        config=_actor_config(GSPO_ARGS["clip_range_low"], GSPO_ARGS["clip_range_high"]),
    )
    cases["cispo"] = _loss_with_grad(
        core.compute_policy_loss_cispo,
        x,
        response_mask=mask,
        loss_agg_mode="token-mean",
        config=_actor_config(CISPO_ARGS["clip_range_low"], CISPO_ARGS["clip_range_high"]),
    )
    cases["gpg_loss"] = _loss_with_grad(
        core.compute_policy_loss_gpg, x, response_mask=mask, loss_agg_mode="token-mean", config=_actor_config(0.2, 0.2)
    )
    low, high = GEO_MEAN_ARGS["clip_range_low"], GEO_MEAN_ARGS["clip_range_high"]
    cases["geo_mean"] = _loss_with_grad(
        core.compute_policy_loss_geo_mean, x, response_mask=mask, config=_actor_config(low, high)
    )
    cases["sapo"] = _loss_with_grad(
        core.compute_policy_loss_sapo, x, response_mask=mask, config=_actor_config(0.2, 0.2, **SAPO_ARGS)
    )
    clip_cov = {k: v for k, v in CLIP_COV_ARGS.items() if k != "clip_range"}
    cases["clip_cov"] = _loss_with_grad(
        core.compute_policy_loss_clip_cov, x, response_mask=mask, loss_agg_mode="token-mean",
        config=_actor_config(CLIP_COV_ARGS["clip_range"], CLIP_COV_ARGS["clip_range"], **clip_cov),
    )  # fmt: skip
    cases["kl_cov"] = _loss_with_grad(
        core.compute_policy_loss_kl_cov, x, response_mask=mask, loss_agg_mode="token-mean",
        config=_actor_config(0.2, 0.2, **KL_COV_ARGS),
    )  # fmt: skip
    for name in KL_NAMES:
        cases[f"kl_{name}"] = _kl_with_grad(core, x, name)
    controller = core.AdaptiveKLController(ADAPTIVE_KL["kl_coef"], ADAPTIVE_KL["target_kl"], ADAPTIVE_KL["horizon"])
    values = []
    for kl in ADAPTIVE_KL["kls"]:
        values.append(controller.value)
        controller.update(kl, ADAPTIVE_KL["n_steps"])
    cases["adaptive_kl"] = {"values": torch.tensor(values, dtype=torch.float64)}
    entropy = verl_F.entropy_from_logits(x["logits"])
    cases["entropy"] = {
        "entropy": entropy,
        "loss": core.compute_entropy_loss(x["logits"], mask, loss_agg_mode="token-mean"),
    }
    return cases


def main() -> None:
    import verl
    from tensor_tree import save_tree  # beside this script

    out = Path(sys.argv[1]) if len(sys.argv) > 1 else FIXTURE
    x, edge = make_inputs(), make_edge_inputs()
    payload = {
        "verl_version": verl.__version__,
        "numpy": np.__version__,
        "inputs": x,
        "cases": build_cases(x),
        "edge_inputs": edge,
        "edge_cases": build_edge_cases(edge),
    }
    save_tree(payload, out)
    count = len(payload["cases"]) + len(payload["edge_cases"])
    print(f"wrote {out} ({out.stat().st_size} bytes, verl {verl.__version__}, {count} cases)")


if __name__ == "__main__":
    main()
