"""trinity-core's algorithm functions, registered like any third-party plugin's."""

from trinity.plugins import hookimpl

_ADV = "trinity.algorithm.advantage"
_LOSS = "trinity.algorithm.policy_loss"
_KL = "trinity.algorithm.kl"
_ENT = "trinity.algorithm.entropy"
_TYPES = "trinity.algorithm.algorithm_types"
_SAMPLE = "trinity.algorithm.sample_strategy"


@hookimpl
def trinity_register_advantage_fns(register):
    register("ppo", f"{_ADV}:GAEAdvantage")
    register("grpo", f"{_ADV}:GRPOAdvantage")
    register("reinforceplusplus", f"{_ADV}:REINFORCEPlusPlusAdvantage")
    register("reinforce", f"{_ADV}:REINFORCEAdvantage")
    register("rloo", f"{_ADV}:RLOOAdvantage")
    register("remax", f"{_ADV}:ReMaxAdvantage")
    register("opmd", f"{_ADV}:OPMDAdvantage")
    register("asymre", f"{_ADV}:AsymREAdvantage")
    register("step_wise_grpo", f"{_ADV}:StepWiseGRPOAdvantage")


@hookimpl
def trinity_register_policy_loss_fns(register):
    register("ppo", f"{_LOSS}:PPOPolicyLoss")
    register("gspo", f"{_LOSS}:GSPOPolicyLoss")
    register("cispo", f"{_LOSS}:CISPOPolicyLoss")
    register("opmd", f"{_LOSS}:OPMDPolicyLoss")
    register("dpo", f"{_LOSS}:DPOLoss")
    register("sft", f"{_LOSS}:SFTLoss")
    register("mix", f"{_LOSS}:MIXPolicyLoss")
    register("topr", f"{_LOSS}:TOPRPolicyLoss")


@hookimpl
def trinity_register_kl_fns(register):
    register("none", f"{_KL}:NoKL")
    register("k1", f"{_KL}:K1")
    register("k2", f"{_KL}:K2")
    register("k3", f"{_KL}:K3")
    register("low_var_kl", f"{_KL}:LowVarKL")
    register("abs", f"{_KL}:AbsKL")


@hookimpl
def trinity_register_entropy_loss_fns(register):
    register("default", f"{_ENT}:DefaultEntropyLoss")
    register("none", f"{_ENT}:NoEntropyLoss")
    register("mix", f"{_ENT}:MixEntropyLoss")


@hookimpl
def trinity_register_algorithm_types(register):
    for name in ("ppo", "grpo", "opmd", "dpo", "sft", "mix", "rloo", "reinforceplusplus", "gspo", "cispo", "remax"):
        register(name, f"{_TYPES}:{name.upper()}")


@hookimpl
def trinity_register_sample_strategies(register):
    register("default", f"{_SAMPLE}:DefaultSampleStrategy")
    register("staleness_control", f"{_SAMPLE}:StalenessControlSampleStrategy")
    register("mix", f"{_SAMPLE}:MixSampleStrategy")
