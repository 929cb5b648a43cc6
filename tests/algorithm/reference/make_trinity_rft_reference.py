"""Record Trinity-RFT 0.6.0's outputs for the functions verl lacks, for test_trinity_rft_reference.py.

Trinity-RFT's package is also named ``trinity``, so it is never installed beside ours: this
runs in verl's venv (see make_verl_reference.py) with the released source on the path:

    pip download --no-deps trinity-rft==0.6.0 && unzip trinity_rft-0.6.0-py3-none-any.whl -d /tmp/trinity-rft
    PYTHONPATH=/tmp/trinity-rft /tmp/verl-venv/bin/python tests/algorithm/reference/make_trinity_rft_reference.py

The inputs are make_verl_reference's seeded batch (float64) and a multi-step batch built here.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch

FIXTURE = Path(__file__).with_name("trinity_rft_reference.safetensors")
_spec = importlib.util.spec_from_file_location(
    "make_verl_reference", Path(__file__).with_name("make_verl_reference.py")
)
verl_ref = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(verl_ref)

LOSSES = {
    "rec_none": ("rec", {}),
    "rec_one_side_is": ("rec", {"clip_mode": "one-side", "weight": "importance_sampling"}),
    "rec_two_side_k2": ("rec", {"clip_mode": "two-side", "regularizer": "k2", "regularizer_coef": 0.1}),
    "rec_ring_advantage": ("rec", {"clip_mode": "ring", "weight": "advantage", "temp": 2.0,
                                   "epsilon_low_prime": 0.3, "epsilon_high_prime": 0.2}),
    "rec_gspo_one_side": ("rec", {"clip_mode": "gspo-one-side", "weight": "gspo_importance_sampling",
                                  "epsilon_low": 0.05, "epsilon_high": 0.05}),
    "rec_forward_kl": ("rec", {"regularizer": "forward-kl", "regularizer_coef": 0.05}),
    "sppo": ("sppo", {"epsilon": 0.3}),
    "sft_is": ("sft_is", {}),
    "sft_phi": ("sft_phi", {"cutoff_prob": 0.3}),
    "importance_sampling": ("importance_sampling", {}),
    "topr": ("topr", {"advantage_threshold": 0.0}),
    "cispo_mask_clip": ("cispo", {"clip_range_low": 0.2, "clip_range_high": 0.28, "enable_mask_clip": True,
                                  "mask_clip_range_low": 0.2, "mask_clip_range_high": 0.1}),
    "ppo_sequence_masking": ("ppo", {"clip_range": 0.2, "enable_sequence_masking": True,
                                     "delta_sequence_masking": 0.01}),
    "ppo_fallback": ("ppo", {"clip_range": 0.2, "fallback_to_policy_gradient": True}),
    "opmd_loss": ("opmd", {"tau": 3.0}),
    "gspo_clip_range": ("gspo", {"clip_range": 0.05}),
}  # fmt: skip
"""case -> (Trinity-RFT policy_loss_fn name, its args); every other arg at its default."""
SEQUENCE_MEAN = ("rec_gspo_one_side", "gspo_clip_range")
"""Cases aggregated by seq-mean-token-mean: Trinity-RFT's mean includes empty rows, ours not."""

ADVANTAGES = {
    "grpo_batch_std": ("grpo", {"std_cal_level": "batch"}),
    "grpo_std_threshold": ("grpo", {"std_threshold": 0.0}),
    "opmd_mean": ("opmd", {}),
    "opmd_logavgexp": ("opmd", {"opmd_baseline": "logavgexp", "tau": 0.5}),
    "asymre": ("asymre", {"baseline_shift": -0.2}),
    "rec": ("rec", {}),
    "rec_std": ("rec", {"std_normalize": True}),
}
"""case -> (Trinity-RFT advantage_fn name, its args) on the seeded batch (groups of 4)."""

MULTI_STEP = {
    "step_wise_grpo": ("step_wise_grpo", {}),
    "step_wise_grpo_batch": ("step_wise_grpo", {"std_cal_level": "batch", "enable_step_norm": True}),
    "step_wise_grpo_threshold": ("step_wise_grpo", {"std_threshold": 0.0}),
    "gigpo": ("gigpo", {"omega": 0.5, "gamma": 0.9}),
    "gigpo_std": ("gigpo", {"fnorm": "std", "gamma": 1.0}),
}
"""case -> (Trinity-RFT advantage_fn name, its args) on ``make_multi_step``."""

ENTROPY_CLIP = {
    "clipb": ("clipb", {"mu": 1.0}),
    "clipv": ("clipv", {"mu": 1.0, "max_frac": 1.0}),
    "clipv_capped": ("clipv", {"mu": 0.5, "max_frac": 0.02}),
}
"""case -> (Trinity-RFT advantage_fn name, its args) on the seeded batch with ``entropy_inputs``."""

DISTILL = {
    "on_policy_distill": ("on_policy_distill", {"kl_coef": 0.5}),
    "jsd": ("jsd", {"lambda_coef": 0.3, "kl_coef": 2.0}),
    "jsd_student_kl": ("jsd", {"lambda_coef": 0.0}),
    "jsd_teacher_kl": ("jsd", {"lambda_coef": 1.0}),
    "jsd_temperature": ("jsd", {"temperature": 2.0}),
}


def entropy_inputs(x: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Entropies and expected entropy scores of the seeded batch (Clip_B, Clip_V), and the
    entropy scores ``S = p (H + log p)`` they imply with its old logprobs."""
    gen = torch.Generator().manual_seed(11)
    entropy = torch.rand(x["old_logprobs"].shape, generator=gen, dtype=torch.float64) * 3
    necs = torch.randn(x["old_logprobs"].shape, generator=gen, dtype=torch.float64) * 0.2
    return {"entropy": entropy, "necs": necs, "scores": x["old_logprobs"].exp() * (entropy + x["old_logprobs"])}


def make_multi_step() -> list[dict]:
    """Rows of 3 tasks x 3 runs of 1-3 steps: ``(task, run, step, reward, step_reward, state, length)``.

    Task 0's runs carry ``step_reward`` on every step, task 1's on none (the final reward is
    the last step's), task 2 has one run. The first step of a task's runs shares a state; two
    runs of task 0 meet again in state ``b``; task 1's rewards are all equal.
    """
    rows = []
    layout = {
        0: [[(0.0, 0.5, "a0"), (1.0, 0.5, "b")], [(0.0, 0.0, "a0"), (0.0, -1.0, "b"), (0.0, 0.0, "c")],
            [(1.0, 1.0, "a0")]],
        1: [[(2.0, None, "a1"), (2.0, None, None)], [(2.0, None, "a1")], [(2.0, None, "a1"), (2.0, None, "d")]],
        2: [[(1.0, None, "a2"), (3.0, None, "e")]],
    }  # fmt: skip
    for task, runs in layout.items():
        for run, steps in enumerate(runs):
            for step, (reward, step_reward, state) in enumerate(steps):
                rows.append({"task": task, "run": run, "step": step, "reward": reward, "step_reward": step_reward,
                             "state": state, "length": 2 + (task + run + step) % 3})  # fmt: skip
    return rows


def _experience(row: dict, mask: torch.Tensor, logprobs: torch.Tensor, index: int):
    from trinity.common.experience import EID, Experience

    info = {"row": index}
    if row.get("step_reward") is not None:
        info["step_reward"] = row["step_reward"]
    if row.get("state") is not None:
        info["env_state_hash"] = row["state"]
    tokens = torch.arange(1 + mask.numel())
    return Experience(
        eid=EID(batch="b", task=str(row["task"]), run=row["run"], step=row.get("step", 0)),
        tokens=tokens,
        prompt_length=1,
        reward=float(row["reward"]),
        logprobs=logprobs.float(),
        action_mask=mask.bool(),
        info=info,
    )


def _advantages(fn, experiences: list, n_rows: int, width: int) -> dict[str, torch.Tensor]:
    """Trinity-RFT's advantages as ``[rows, width]`` and which rows it kept."""
    kept, _ = fn(experiences)
    advantages = torch.zeros(n_rows, width, dtype=torch.float64)
    rows = sorted(exp.info["row"] for exp in kept)
    for exp in kept:
        advantages[exp.info["row"], : exp.advantages.numel()] = exp.advantages.double()
    return {"advantages": advantages, "kept_rows": torch.tensor(rows)}


def build_cases(x: dict[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
    from verl import DataProto

    from trinity.algorithm import ADVANTAGE_FN, KL_FN, POLICY_LOSS_FN

    mask = x["response_mask"]
    cases: dict[str, dict[str, torch.Tensor]] = {}
    for case, (name, args) in LOSSES.items():
        logprobs = x["logprobs"].clone().requires_grad_(True)
        loss, metrics = POLICY_LOSS_FN.get(name)(**args)(
            logprob=logprobs, old_logprob=x["old_logprobs"], action_mask=mask, advantages=x["advantages"]
        )
        loss.backward()
        cases[case] = {"loss": loss.detach(), "grad": logprobs.grad}
    rewards = x["token_level_rewards"].sum(-1)
    for case, (name, args) in ADVANTAGES.items():
        rows = [
            {"task": int(g), "run": i, "reward": float(r)}
            for i, (g, r) in enumerate(zip(x["group_ids"], rewards, strict=True))
        ]
        experiences = [_experience(row, mask[i], x["old_logprobs"][i], i) for i, row in enumerate(rows)]
        cases[case] = _advantages(ADVANTAGE_FN.get(name)(**args), experiences, len(rows), mask.shape[1])
    multi = make_multi_step()
    width = max(row["length"] for row in multi)
    multi_mask = torch.tensor([[1.0] * row["length"] + [0.0] * (width - row["length"]) for row in multi])
    for case, (name, args) in MULTI_STEP.items():
        experiences = [
            _experience(row, multi_mask[i, : row["length"]], torch.zeros(row["length"]), i)
            for i, row in enumerate(multi)
        ]
        cases[case] = _advantages(ADVANTAGE_FN.get(name)(**args), experiences, len(multi), width)
    extra = entropy_inputs(x)
    for case, (name, args) in ENTROPY_CLIP.items():
        tensors = {
            "token_level_rewards": x["token_level_rewards"], "response_mask": mask, "old_log_probs": x["old_logprobs"],
            "rollout_log_probs": x["old_logprobs"], "entropys": extra["entropy"], "necs": extra["necs"],
        }  # fmt: skip
        data = DataProto.from_dict(tensors=tensors, non_tensors={"uid": x["group_ids"].numpy()})
        out, _ = ADVANTAGE_FN.get(name)(**args)(data)
        cases[case] = {"advantages": out.batch["advantages"], "response_mask": out.batch["response_mask"]}
    for case, (name, args) in DISTILL.items():
        data = DataProto.from_dict(
            tensors={"old_log_probs": x["old_logprobs"], "teacher_logprobs": x["ref_logprobs"], "response_mask": mask}
        )
        out, _ = ADVANTAGE_FN.get(name)(**args)(data)
        cases[case] = {"advantages": out.batch["advantages"]}
    for name in ("k3", "corrected_k3"):
        logprobs = x["logprobs"].clone().requires_grad_(True)
        kl = KL_FN.get(name)().calculate_kl(logprobs, x["ref_logprobs"], x["old_logprobs"])
        kl.sum().backward()
        cases[f"kl_{name}"] = {"kl": kl.detach(), "grad": logprobs.grad}
    return cases


PRESET_BASE = {
    "sample_strategy": "warmup",
    "policy_loss_fn": "ppo",
    "advantage_fn": "ppo",
    "kl_penalty_fn": "none",
    "kl_loss_fn": "k2",
    "entropy_loss_fn": "default",
}
"""What Trinity-RFT's config validator fills in before a type's own ``default_config()``."""


def presets() -> dict[str, dict]:
    """Every registered algorithm type's function names as Trinity-RFT's validator fills them,
    and the type's flags."""
    from trinity.algorithm import ALGORITHM_TYPE

    out = {}
    for name in ALGORITHM_TYPE._default_mapping:
        cls = ALGORITHM_TYPE.get(name)
        filled = {**PRESET_BASE, **cls.default_config()}
        flags = ("use_critic", "use_reference", "compute_advantage_in_trainer", "can_balance_batch", "schema")
        out[name] = {**filled, **{flag: getattr(cls, flag) for flag in flags}}
    return out


def main() -> None:
    from tensor_tree import save_tree  # beside this script

    import trinity

    if not Path(trinity.__file__).parent.joinpath("algorithm", "advantage_fn").is_dir():
        sys.exit(f"{trinity.__file__} is not Trinity-RFT: put its source first on PYTHONPATH")
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else FIXTURE
    x = verl_ref.make_inputs()
    payload = {"trinity_rft_version": trinity.__version__, "inputs": x, "cases": build_cases(x), "presets": presets()}
    save_tree(payload, out)
    print(f"wrote {out} ({out.stat().st_size} bytes, Trinity-RFT {trinity.__version__}, {len(payload['cases'])} cases)")


if __name__ == "__main__":
    main()
