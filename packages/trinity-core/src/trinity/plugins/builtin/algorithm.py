"""trinity-core's algorithm functions, registered like any third-party plugin's."""

from trinity.plugins import hookimpl

_ADV = "trinity.algorithm.advantage"
_STEPS = "trinity.algorithm.multi_step"
_CLIP = "trinity.algorithm.entropy_clip"
_DISTILL = "trinity.algorithm.distill"
_LOSS = "trinity.algorithm.policy_loss"
_SUPERVISED = "trinity.algorithm.supervised_loss"
_KL = "trinity.algorithm.kl"
_ENT = "trinity.algorithm.entropy"
_TYPES = "trinity.algorithm.algorithm_types"
_SAMPLE = "trinity.algorithm.sample_strategy"
_OPS = "trinity.algorithm.experience_ops"

ALGORITHM_TYPES = (
    "ppo", "grpo", "grpo_verl", "dapo", "m2po", "reinforceplusplus", "rloo", "remax", "opmd", "asymre", "topr",
    "cispo", "gspo", "sapo", "sppo", "rec", "multi_step_grpo", "gigpo", "mix", "mix_chord", "on_policy_distill",
    "jsd", "raft", "sft", "cpt", "dpo",
)  # fmt: skip


@hookimpl
def trinity_register_advantage_fns(register):
    for name, target in {
        "ppo": f"{_ADV}:GAEAdvantage",
        "grpo": f"{_ADV}:GRPOAdvantage",
        "grpo_verl": f"{_ADV}:GRPOVerlAdvantage",
        "grpo_passk": f"{_ADV}:GRPOPassKAdvantage",
        "reinforceplusplus": f"{_ADV}:REINFORCEPlusPlusAdvantage",
        "reinforce_plus_plus_baseline": f"{_ADV}:REINFORCEPlusPlusBaselineAdvantage",
        "reinforce": f"{_ADV}:REINFORCEAdvantage",
        "rloo": f"{_ADV}:RLOOAdvantage",
        "remax": f"{_ADV}:ReMaxAdvantage",
        "opo": f"{_ADV}:OPOAdvantage",
        "gpg": f"{_ADV}:GPGAdvantage",
        "opmd": f"{_ADV}:OPMDAdvantage",
        "opmd_verl": f"{_ADV}:OPMDVerlAdvantage",
        "asymre": f"{_ADV}:AsymREAdvantage",
        "asymre_verl": f"{_ADV}:AsymREVerlAdvantage",
        "rec": f"{_ADV}:RECAdvantage",
        "step_wise_grpo": f"{_STEPS}:StepWiseGRPOAdvantage",
        "gigpo": f"{_STEPS}:GiGPOAdvantage",
        "on_policy_distill": f"{_DISTILL}:OnPolicyDistillAdvantage",
        "jsd": f"{_DISTILL}:JSDAdvantage",
        "clipb": f"{_CLIP}:ClipBAdvantage",
        "clipv": f"{_CLIP}:ClipVAdvantage",
    }.items():
        register(name, target)


@hookimpl
def trinity_register_policy_loss_fns(register):
    for name, target in {
        "ppo": f"{_LOSS}:PPOPolicyLoss",
        "gspo": f"{_LOSS}:GSPOPolicyLoss",
        "cispo": f"{_LOSS}:CISPOPolicyLoss",
        "clip_cov": f"{_LOSS}:ClipCovPolicyLoss",
        "kl_cov": f"{_LOSS}:KLCovPolicyLoss",
        "geo_mean": f"{_LOSS}:GeoMeanPolicyLoss",
        "sapo": f"{_LOSS}:SAPOPolicyLoss",
        "gpg": f"{_LOSS}:GPGPolicyLoss",
        "opmd": f"{_LOSS}:OPMDPolicyLoss",
        "importance_sampling": f"{_LOSS}:ImportanceSamplingLoss",
        "sppo": f"{_LOSS}:SPPOPolicyLoss",
        "topr": f"{_LOSS}:TOPRPolicyLoss",
        "m2po": f"{_LOSS}:M2POPolicyLoss",
        "rec": f"{_LOSS}:RECPolicyLoss",
        "sft": f"{_SUPERVISED}:SFTLoss",
        "sft_is": f"{_SUPERVISED}:SFTISLoss",
        "sft_phi": f"{_SUPERVISED}:SFTPhiLoss",
        "dpo": f"{_SUPERVISED}:DPOLoss",
        "mix": f"{_SUPERVISED}:MIXPolicyLoss",
        "mix_chord": f"{_SUPERVISED}:MIXCHORDPolicyLoss",
    }.items():
        register(name, target)


@hookimpl
def trinity_register_kl_fns(register):
    for name, target in {
        "none": "NoKL",
        "k1": "K1",
        "kl": "K1",
        "k2": "K2",
        "mse": "K2",
        "k3": "K3",
        "low_var_kl": "LowVarKL",
        "abs": "AbsKL",
        "k1+": "K1Plus",
        "kl+": "K1Plus",
        "k3+": "K3Plus",
        "low_var_kl+": "K3Plus",
        "abs+": "AbsKLPlus",
        "corrected_k3": "CorrectedK3",
    }.items():
        register(name, f"{_KL}:{target}")


@hookimpl
def trinity_register_entropy_loss_fns(register):
    register("default", f"{_ENT}:DefaultEntropyLoss")
    register("none", f"{_ENT}:NoEntropyLoss")
    register("mix", f"{_ENT}:MixEntropyLoss")


@hookimpl
def trinity_register_algorithm_types(register):
    for name in ALGORITHM_TYPES:
        register(name, f"{_TYPES}:{name.upper()}")


@hookimpl
def trinity_register_sample_strategies(register):
    register("default", f"{_SAMPLE}:DefaultSampleStrategy")
    register("warmup", f"{_SAMPLE}:DefaultSampleStrategy")
    register("staleness_control", f"{_SAMPLE}:StalenessControlSampleStrategy")
    register("mix", f"{_SAMPLE}:MixSampleStrategy")


@hookimpl
def trinity_register_experience_operators(register):
    register("dapo_dynamic_sampling", f"{_OPS}:DAPODynamicSampling")
    register("reward_std_filter", f"{_OPS}:RewardSTDFilter")
    register("reward_filter", f"{_OPS}:RewardFilter")
    register("overlong_reward_shaping", f"{_OPS}:OverlongRewardShaping")
    register("mask_response_truncated", f"{_OPS}:MaskResponseTruncated")
    register("reward_shaping_mapper", f"{_OPS}:RewardShapingMapper")
    register("invalid_reward_filter", f"{_OPS}:InvalidRewardFilter")
    register("pass_rate_calculator", f"{_OPS}:PassRateCalculator")
    register("data_juicer", f"{_OPS}:DataJuicer")
