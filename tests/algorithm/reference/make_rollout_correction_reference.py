"""Record verl's rollout correction (``rollout_corr_helper`` and the bypass-mode policy loss) on
seeded random batches, for tests/algorithm/test_rollout_correction.py.

Run with the engines venv (verl 0.9.1; see make_verl_reference.py for making one):

    ~/.cache/trinity-engines-venv/bin/python tests/algorithm/reference/make_rollout_correction_reference.py [OUT.safetensors]

It imports only torch, safetensors and verl; ``build_cases`` is also run by the live test where verl imports.
Inputs are float64; the fixture is safetensors (``tensor_tree.py``), read without pickle.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import torch

FIXTURE = Path(__file__).with_name("rollout_correction_reference.safetensors")
B, R = 16, 32

IS_CASES = {  # name -> (rollout_is, rollout_is_threshold, rollout_is_batch_normalize)
    "token_tis": ("token", 2.0, False),
    "token_tis_norm": ("token", 1.5, True),
    "token_icepop": ("token", "0.5_5.0", False),
    "sequence_tis": ("sequence", 2.0, False),
    "sequence_tis_norm": ("sequence", "3.0", True),
    "sequence_icepop": ("sequence", "0.6_1.5", False),
}
RS_CASES = {  # name -> (rollout_rs, rollout_rs_threshold)
    "token_k1": ("token_k1", "0.6_1.8"),
    "token_k1_upper_only": ("token_k1", 1.8),
    "token_k2": ("token_k2", 0.08),
    "token_k3": ("token_k3", 0.08),
    "seq_sum_k1": ("seq_sum_k1", "0.5_2.0"),
    "seq_sum_k2": ("seq_sum_k2", 1.5),
    "seq_sum_k3": ("seq_sum_k3", 1.5),
    "seq_mean_k1": ("seq_mean_k1", "0.95_1.05"),
    "seq_mean_k2": ("seq_mean_k2", 0.05),
    "seq_mean_k3": ("seq_mean_k3", 0.05),
    "seq_max_k2": ("seq_max_k2", 0.5),
    "seq_max_k3": ("seq_max_k3", 0.2),
    "chained": ("token_k2,seq_mean_k1,token_k2", "0.3,0.9_1.1"),
}
FULL_CASES = {  # verl presets (decoupled: the trainer's batch correction), some with other thresholds
    "decoupled_token_is": {},
    "decoupled_seq_is": {},
    "decoupled_token_icepop": {},
    "decoupled_seq_is_rs": {},
    "decoupled_geo_rs": {"rs_threshold": "0.9_1.1"},
    "decoupled_geo_rs_token_tis": {"rs_threshold": "0.9_1.1"},
    "decoupled_k3_rs_seq_tis": {"rs_threshold": 0.05},
    "disabled": {},
}
BYPASS_CASES = {  # verl presets in bypass mode: the policy loss itself
    "bypass_ppo_clip": {},
    "bypass_ppo_clip_geo_rs": {"rs_threshold": "0.9_1.1"},
    "bypass_ppo_clip_k3_rs": {"rs_threshold": 0.05},
    "bypass_pg_is": {},
    "bypass_pg_token_icepop": {},
    "bypass_pg_geo_rs_token_tis": {"rs_threshold": "0.9_1.1"},
}
PPO_CLIP = {"clip_ratio_low": 0.2, "clip_ratio_high": 0.28, "clip_ratio_c": 3.0}
CORRECTION_KEYS = (
    "rollout_is",
    "rollout_is_threshold",
    "rollout_is_batch_normalize",
    "rollout_rs",
    "rollout_rs_threshold",
    "bypass_mode",
    "loss_type",
)


def make_inputs(seed: int = 0) -> dict[str, torch.Tensor]:
    """Trainer and rollout logprobs of a ragged batch (an empty row, holes) whose mismatch sends
    token ratios past 2 and below 0.5 and sequence ratios far out."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, R + 1, (B,), generator=gen)
    lengths[5] = 0
    lengths[2] = R
    lengths[9] = 1
    mask = (torch.arange(R)[None, :] < lengths[:, None]).double()
    mask[3, 4:9] = 0.0
    mask[7, 1:3] = 0.0
    rollout = -torch.rand(B, R, generator=gen, dtype=torch.float64) * 3
    scale = torch.full((B, 1), 0.05, dtype=torch.float64)
    scale[::3] = 0.4  # a third of the rows far off-policy
    old = rollout + torch.randn(B, R, generator=gen, dtype=torch.float64) * scale
    current = old + torch.randn(B, R, generator=gen, dtype=torch.float64) * 0.1
    return {
        "response_mask": mask,
        "old_logprobs": old,
        "rollout_logprobs": rollout,
        "logprobs": current,
        "advantages": torch.randn(B, R, generator=gen, dtype=torch.float64) * mask,
    }


def _floats(metrics: dict) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items()}


def presets() -> dict[str, dict]:
    """Every factory method of verl's ``RolloutCorrectionConfig`` with its defaults, as keys."""
    from verl.trainer.config.algorithm import RolloutCorrectionConfig

    names = [n for n, v in vars(RolloutCorrectionConfig).items() if isinstance(v, classmethod)]
    out = {}
    for name in names:
        config = dataclasses.asdict(getattr(RolloutCorrectionConfig, name)())
        out[name] = {k: config[k] for k in CORRECTION_KEYS}
    return out


def _preset(name: str, kwargs: dict):
    from verl.trainer.config.algorithm import RolloutCorrectionConfig

    return getattr(RolloutCorrectionConfig, name)(**kwargs)


def build_cases(x: dict[str, torch.Tensor]) -> dict[str, dict]:
    """verl's outputs on inputs ``x``: case name -> tensors and metrics."""
    import verl.trainer.ppo.core_algos as core
    from verl.trainer.ppo import rollout_corr_helper as helper
    from verl.workers.config import ActorConfig, PolicyLossConfig

    mask = x["response_mask"]
    log_ratio = x["old_logprobs"] - x["rollout_logprobs"]
    cases: dict[str, dict] = {}
    for name, (level, threshold, normalize) in IS_CASES.items():
        weights, metrics = helper.compute_rollout_correction_weights(log_ratio, mask, level, threshold, normalize)
        cases[f"is_{name}"] = {"weights": weights, "metrics": _floats(metrics)}
    for name, (options, threshold) in RS_CASES.items():
        kept, metrics = helper.compute_rollout_rejection_mask(log_ratio, mask, options, threshold)
        cases[f"rs_{name}"] = {"mask": kept, "metrics": _floats(metrics)}
    for name, kwargs in FULL_CASES.items():
        config = _preset(name, kwargs)
        proto, kept, metrics = helper.compute_rollout_correction_and_rejection_mask(
            x["old_logprobs"],
            x["rollout_logprobs"],
            mask,
            rollout_is=config.rollout_is,
            rollout_is_threshold=config.rollout_is_threshold,
            rollout_is_batch_normalize=config.rollout_is_batch_normalize,
            rollout_rs=config.rollout_rs,
            rollout_rs_threshold=config.rollout_rs_threshold,
        )
        case = {"settings": {k: getattr(config, k) for k in CORRECTION_KEYS}, "mask": kept, "metrics": metrics}
        weights = proto.batch["rollout_is_weights"] if proto is not None else None
        if weights is not None:
            case["weights"] = weights
        # the decoupled policy loss: PPO's with the weights, under the rejection mask
        logprobs = x["logprobs"].clone().requires_grad_(True)
        loss, pg_metrics = core.compute_policy_loss_vanilla(
            old_log_prob=x["old_logprobs"],
            log_prob=logprobs,
            advantages=x["advantages"],
            response_mask=kept,
            loss_agg_mode="token-mean",
            config=_actor(ActorConfig, PolicyLossConfig),
            rollout_is_weights=weights,
        )
        loss.backward()
        case.update(loss=loss.detach(), grad=logprobs.grad, pg_metrics=_floats(pg_metrics))
        cases[f"full_{name}"] = case
    for name, kwargs in BYPASS_CASES.items():
        config = _preset(name, kwargs)
        for mode in ("token-mean", "seq-mean-token-sum"):
            logprobs = x["logprobs"].clone().requires_grad_(True)
            loss, metrics = core.compute_policy_loss_bypass_mode(
                old_log_prob=x["rollout_logprobs"],
                log_prob=logprobs,
                advantages=x["advantages"],
                response_mask=mask,
                loss_agg_mode=mode,
                config=_actor(ActorConfig, PolicyLossConfig, rollout_correction=config),
            )
            loss.backward()
            cases[f"bypass_{name}_{mode}"] = {
                "settings": {k: getattr(config, k) for k in CORRECTION_KEYS},
                "loss_agg_mode": mode,
                "loss": loss.detach(),
                "grad": logprobs.grad,
                "metrics": _floats(metrics),
            }
    return cases


def _actor(actor_cls, policy_loss_cls, **policy_loss):
    return actor_cls(
        strategy="fsdp",
        rollout_n=1,
        ppo_micro_batch_size_per_gpu=1,
        clip_ratio=PPO_CLIP["clip_ratio_low"],
        policy_loss=policy_loss_cls(**policy_loss),
        **PPO_CLIP,
    )


def main() -> None:
    import verl
    from tensor_tree import save_tree  # beside this script

    out = Path(sys.argv[1]) if len(sys.argv) > 1 else FIXTURE
    x = make_inputs()
    payload = {"verl_version": verl.__version__, "inputs": x, "presets": presets(), "cases": build_cases(x)}
    save_tree(payload, out)
    print(f"wrote {out} ({out.stat().st_size} bytes, verl {verl.__version__}, {len(payload['cases'])} cases)")


if __name__ == "__main__":
    main()
