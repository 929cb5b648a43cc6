"""The built-in algorithm types: Trinity-RFT's 25 (``algorithm.algorithm_type``) and ``remax``.

Each is a preset of function names with upstream's defaults (Trinity-RFT's
``trinity/algorithm/algorithm.py``); the config pass fills every unset ``algorithm.<fn>``
from it, then the fn's args from its ``default_args()``. Advantages are computed
trainer-side from the batch's group ids for every RL type (Trinity-RFT computes group
advantages in the explorer; the result is the same); SFT-like types compute none.
``docs/algorithms.md`` tables them.
"""

from dataclasses import replace

from trinity.algorithm.base import AlgorithmType

PPO = AlgorithmType(
    name="ppo",
    summary="clipped surrogate on GAE advantages from a learned critic, KL loss to the reference",
    paper="Schulman et al. 2017, arXiv:1707.06347 (GAE: arXiv:1506.02438)",
    advantage_fn="ppo",
    use_critic=True,
    recommended_repeat_times=1,
)

GRPO = AlgorithmType(
    name="grpo",
    summary="PPO's clipped surrogate on group-normalised outcome advantages, no critic",
    paper="Shao et al. 2024, DeepSeekMath, arXiv:2402.03300",
    advantage_fn="grpo",
    requires_repeat_times_gt_1=True,
    recommended_repeat_times=2,
)

GRPO_VERL = replace(
    GRPO,
    name="grpo_verl",
    summary="GRPO with verl's exact advantage (a task with one rollout keeps its score)",
    paper="Shao et al. 2024, arXiv:2402.03300; verl compute_grpo_outcome_advantage",
    advantage_fn="grpo_verl",
    requires_repeat_times_gt_1=False,  # verl keeps the score of a task with one rollout
)

DAPO = replace(
    GRPO,
    name="dapo",
    summary="GRPO without KL; with clip-higher, token-mean loss, dynamic sampling and overlong shaping set in the config",
    paper="Yu et al. 2025, DAPO, arXiv:2503.14476",
    kl_loss_fn="none",
    recommended_repeat_times=16,
)

M2PO = replace(
    GRPO,
    name="m2po",
    summary="unclipped IS surrogate masking the tokens whose squared log-ratio breaks a second-moment bound",
    paper="Zheng et al. 2025, M2PO, arXiv:2510.01161",
    policy_loss_fn="m2po",
    kl_loss_fn="none",
    recommended_repeat_times=8,
)

REINFORCEPLUSPLUS = AlgorithmType(
    name="reinforceplusplus",
    summary="PPO's surrogate on batch-whitened discounted returns, no critic",
    paper="Hu 2025, REINFORCE++, arXiv:2501.03262",
    advantage_fn="reinforceplusplus",
    recommended_repeat_times=2,
)

RLOO = replace(
    GRPO,
    name="rloo",
    summary="PPO's surrogate on leave-one-out baselined rewards",
    paper="Ahmadian et al. 2024, arXiv:2402.14740",
    advantage_fn="rloo",
)

REMAX = AlgorithmType(
    name="remax",
    summary="PPO's surrogate on returns baselined by the greedy response's reward",
    paper="Li et al. 2023, ReMax, arXiv:2310.10505",
    advantage_fn="remax",
    kl_loss_fn="none",
)

OPMD = replace(
    GRPO,
    name="opmd",
    summary="online policy mirror descent: REINFORCE on group-baselined rewards, scaled by 1/(1+tau)",
    paper="Yao et al. 2025, arXiv:2509.24203 (Trinity-RFT)",
    advantage_fn="opmd",
    policy_loss_fn="opmd",
)

ASYMRE = replace(
    GRPO,
    name="asymre",
    summary="REINFORCE with a group baseline shifted below the mean, weighting positive samples more",
    paper="Arnal et al. 2025, asymmetric REINFORCE, arXiv:2506.20520",
    advantage_fn="asymre",
    policy_loss_fn="opmd",
    kl_loss_fn="none",
    entropy_loss_fn="none",
)

TOPR = AlgorithmType(
    name="topr",
    summary="REINFORCE on rewards, negative samples tapered by the truncated importance ratio",
    paper="Le Roux et al. 2025, TOPR, arXiv:2503.14286",
    advantage_fn="reinforce",
    policy_loss_fn="topr",
    recommended_repeat_times=2,
)

CISPO = replace(
    GRPO,
    name="cispo",
    summary="REINFORCE on GRPO advantages with clipped, stop-gradient importance weights",
    paper="MiniMax 2025, MiniMax-M1, arXiv:2506.13585",
    policy_loss_fn="cispo",
)

GSPO = replace(
    GRPO,
    name="gspo",
    summary="clipped surrogate on the length-normalised sequence ratio, GRPO advantages",
    paper="Zheng et al. 2025, GSPO, arXiv:2507.18071",
    policy_loss_fn="gspo",
)

SAPO = replace(
    GRPO,
    name="sapo",
    summary="a smooth temperature-controlled gate on the ratio instead of the hard clip, GRPO advantages",
    paper="Gao et al. 2025, SAPO, arXiv:2511.20347",
    policy_loss_fn="sapo",
)

SPPO = replace(
    GRPO,
    name="sppo",
    summary="the log-ratio as surrogate on in-range tokens, group-baselined rewards",
    paper="Vaswani et al. 2021, sPPO, arXiv:2108.05828",
    advantage_fn="opmd",
    policy_loss_fn="sppo",
    kl_loss_fn="none",
    entropy_loss_fn="none",
)

REC = replace(
    GRPO,
    name="rec",
    summary="group-relative REINFORCE as an off-policy algorithm, with REC's clipping and weighting variants",
    paper="Yao et al. 2025, arXiv:2509.24203",
    advantage_fn="rec",
    policy_loss_fn="rec",
)

MULTI_STEP_GRPO = replace(
    GRPO,
    name="multi_step_grpo",
    summary="GRPO over multi-turn trajectories: each step gets its trajectory's final-step advantage",
    paper="Trinity-RFT, after rLLM (github.com/rllm-org/rllm)",
    advantage_fn="step_wise_grpo",
    recommended_repeat_times=8,
)

GIGPO = replace(
    GRPO,
    name="gigpo",
    summary="episode-level GRPO advantage plus a step-level one among steps from the same environment state",
    paper="Feng et al. 2025, GiGPO, arXiv:2505.10978",
    advantage_fn="gigpo",
    recommended_repeat_times=8,
)

MIX = replace(
    GRPO,
    name="mix",
    summary="GRPO on rollouts plus SFT on expert data from an auxiliary buffer, weighted by mu",
    paper="Trinity-RFT; cf. LUFFY, Yan et al. 2025, arXiv:2504.14945",
    advantage_fn="grpo",
    policy_loss_fn="mix",
    entropy_loss_fn="mix",
    sample_strategy="mix",
    recommended_repeat_times=8,
)

MIX_CHORD = replace(
    MIX,
    name="mix_chord",
    summary="mix with a scheduled SFT weight and phi-weighted expert tokens",
    paper="Zhang et al. 2025, CHORD, arXiv:2508.11408",
    policy_loss_fn="mix_chord",
)

ON_POLICY_DISTILL = AlgorithmType(
    name="on_policy_distill",
    summary="the student samples, a teacher scores each token: per-token reverse-KL advantage, PPO loss",
    paper="Agarwal et al. 2024, GKD, arXiv:2306.13649; Thinking Machines' on-policy distillation",
    advantage_fn="on_policy_distill",
    kl_loss_fn="none",
    entropy_loss_fn="none",
    recommended_repeat_times=8,
)

JSD = replace(
    ON_POLICY_DISTILL,
    name="jsd",
    summary="on-policy distillation with a per-token Jensen-Shannon advantage",
    paper="Agarwal et al. 2024, GKD (generalised JSD), arXiv:2306.13649",
    advantage_fn="jsd",
)

SFT = AlgorithmType(
    name="sft",
    summary="supervised fine-tuning on prompt/response data",
    paper="negative log-likelihood of the responses (Ouyang et al. 2022, arXiv:2203.02155)",
    policy_loss_fn="sft",
    kl_loss_fn="none",
    entropy_loss_fn="none",
    data_schema="sft",
    compute_advantage_in_trainer=False,
)

RAFT = replace(
    SFT,
    name="raft",
    summary="SFT on the explorer's own (reward-filtered) rollouts",
    paper="Dong et al. 2023, RAFT, arXiv:2304.06767",
    data_schema="rollout",
)

CPT = replace(
    SFT,
    name="cpt",
    summary="continued pre-training: next-token loss on every token of plain text",
    paper="Gururangan et al. 2020, don't stop pretraining, arXiv:2004.10964",
    data_schema="cpt",
)

DPO = AlgorithmType(
    name="dpo",
    summary="direct preference optimisation on chosen/rejected pairs against the reference",
    paper="Rafailov et al. 2023, arXiv:2305.18290",
    policy_loss_fn="dpo",
    use_reference=True,
    repeat_times=2,
    data_schema="dpo",
    compute_advantage_in_trainer=False,
)
