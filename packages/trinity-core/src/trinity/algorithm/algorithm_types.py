"""The built-in algorithm types: default function names and what each algorithm needs.

The config pass fills every unset ``algorithm.<fn>`` from these, then the fn's args from its
``default_args()``. Advantages are computed trainer-side from the batch's group ids for every
RL type (``sft`` and ``dpo`` need none).
"""

from trinity.algorithm.base import AlgorithmType

PPO = AlgorithmType(
    name="ppo",
    advantage_fn="ppo",
    kl_loss_fn="k2",
    use_critic=True,
)
"""PPO with a critic and GAE (Schulman et al. 2017)."""

GRPO = AlgorithmType(
    name="grpo",
    advantage_fn="grpo",
    kl_loss_fn="k2",
    requires_repeat_times_gt_1=True,
)
"""GRPO: group-normalised outcome advantages, PPO loss, KL loss to the reference (DeepSeekMath)."""

OPMD = AlgorithmType(
    name="opmd",
    advantage_fn="opmd",
    policy_loss_fn="opmd",
    kl_loss_fn="k2",
    requires_repeat_times_gt_1=True,
)
"""Online policy mirror descent (Trinity-RFT)."""

DPO = AlgorithmType(
    name="dpo",
    advantage_fn="reinforce",
    policy_loss_fn="dpo",
    entropy_loss_fn="none",
    use_reference=True,
    can_balance_batch=False,
    repeat_times=2,
    data_schema="dpo",
    compute_advantage_in_trainer=False,
)
"""DPO on chosen/rejected pairs (rows stay in pairs: no batch balancing)."""

SFT = AlgorithmType(
    name="sft",
    advantage_fn="reinforce",
    policy_loss_fn="sft",
    entropy_loss_fn="none",
    data_schema="sft",
    compute_advantage_in_trainer=False,
)
"""Supervised fine-tuning on prompt/response data."""

MIX = AlgorithmType(
    name="mix",
    advantage_fn="grpo",
    policy_loss_fn="mix",
    kl_loss_fn="k2",
    entropy_loss_fn="mix",
    sample_strategy="mix",
    requires_repeat_times_gt_1=True,
)
"""GRPO on rollouts plus SFT on expert data from an auxiliary buffer (Trinity-RFT ``mix``)."""

RLOO = AlgorithmType(name="rloo", advantage_fn="rloo", requires_repeat_times_gt_1=True)
"""REINFORCE leave-one-out with the PPO loss."""

REINFORCEPLUSPLUS = AlgorithmType(
    name="reinforceplusplus",
    advantage_fn="reinforceplusplus",
    kl_penalty_fn="k1",
)
"""REINFORCE++: whitened returns, KL to the reference as a token-level reward penalty."""

GSPO = AlgorithmType(name="gspo", advantage_fn="grpo", policy_loss_fn="gspo", requires_repeat_times_gt_1=True)
"""GSPO: GRPO advantages with the sequence-level clipped ratio."""

CISPO = AlgorithmType(name="cispo", advantage_fn="grpo", policy_loss_fn="cispo", requires_repeat_times_gt_1=True)
"""CISPO: GRPO advantages with clipped importance weights (MiniMax-M1)."""

REMAX = AlgorithmType(name="remax", advantage_fn="remax")
"""ReMax: the greedy response's reward as baseline (workflows record ``info['reward_baseline']``)."""
