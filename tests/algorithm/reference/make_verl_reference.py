"""Record verl's outputs on seeded random batches, for tests/algorithm/test_verl_reference.py.

verl's pins fight the main environment's, so this runs in its own venv:

    python3 -m venv /tmp/verl-venv
    /tmp/verl-venv/bin/pip install torch==2.13.0 && /tmp/verl-venv/bin/pip install verl==0.9.1
    /tmp/verl-venv/bin/python tests/algorithm/reference/make_verl_reference.py [OUT.pt]

It imports only torch and verl; ``build_cases`` is also run by the live test where verl imports.
Inputs are float64 so that the recorded outputs are exact to rounding.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

FIXTURE = Path(__file__).with_name("verl_reference.pt")
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


AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
PPO_ARGS = {"clip_range": 0.2, "clip_range_low": 0.2, "clip_range_high": 0.28, "clip_ratio_c": 3.0}
CISPO_ARGS = {"clip_range_low": 0.5, "clip_range_high": 0.28}
GSPO_ARGS = {"clip_range_low": 3e-3, "clip_range_high": 4e-3}
GAE_ARGS = {"gamma": 0.99, "lam": 0.95}
RPP_ARGS = {"gamma": 0.97}


def _actor_config(clip_low: float, clip_high: float, clip_ratio_c: float = 3.0):
    from verl.workers.config import ActorConfig

    return ActorConfig(
        strategy="fsdp",
        rollout_n=GROUP,
        ppo_micro_batch_size_per_gpu=1,
        clip_ratio=clip_low,
        clip_ratio_low=clip_low,
        clip_ratio_high=clip_high,
        clip_ratio_c=clip_ratio_c,
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
    for name in ("k1", "k2", "low_var_kl", "abs"):
        cases[f"kl_{name}"] = {"kl": core.kl_penalty(x["logprobs"], x["ref_logprobs"], name)}
    entropy = verl_F.entropy_from_logits(x["logits"])
    cases["entropy"] = {
        "entropy": entropy,
        "loss": core.compute_entropy_loss(x["logits"], mask, loss_agg_mode="token-mean"),
    }
    return cases


def main() -> None:
    import verl

    out = Path(sys.argv[1]) if len(sys.argv) > 1 else FIXTURE
    x = make_inputs()
    payload = {"verl_version": verl.__version__, "numpy": np.__version__, "inputs": x, "cases": build_cases(x)}
    torch.save(payload, out)
    print(f"wrote {out} ({out.stat().st_size} bytes, verl {verl.__version__}, {len(payload['cases'])} cases)")


if __name__ == "__main__":
    main()
