"""Every registered algorithm name resolves, documents itself, and the types are consistent."""

from __future__ import annotations

import pytest

from trinity.algorithm.base import AlgorithmType
from trinity.config.check import _ALGORITHM_FNS as FN_KINDS  # the fields the config pass fills
from trinity.plugins import Kind, resolve

EXPECTED = {
    Kind.ADVANTAGE_FN: {"ppo", "grpo", "reinforceplusplus", "reinforce", "rloo", "remax", "opmd", "asymre",
                        "step_wise_grpo"},
    Kind.POLICY_LOSS_FN: {"ppo", "gspo", "cispo", "opmd", "dpo", "sft", "mix", "topr"},
    Kind.KL_FN: {"none", "k1", "k2", "k3", "low_var_kl", "abs"},
    Kind.ENTROPY_LOSS_FN: {"default", "none", "mix"},
    Kind.SAMPLE_STRATEGY: {"default", "staleness_control", "mix"},
    Kind.ALGORITHM_TYPE: {"ppo", "grpo", "opmd", "dpo", "sft", "mix", "rloo", "reinforceplusplus", "gspo", "cispo",
                          "remax"},
}  # fmt: skip


@pytest.mark.parametrize("kind", [k for k in EXPECTED if k is not Kind.ALGORITHM_TYPE], ids=str)
def test_every_function_resolves_with_docs_and_defaults(kind):
    for name in EXPECTED[kind]:
        cls = resolve(kind, name)
        assert cls.__doc__ and len(cls.__doc__.split()) >= 3, f"{kind}:{name} lacks a docstring"
        instance = cls(**cls.default_args())
        assert instance.args == cls.default_args()


def test_algorithm_types_name_registered_functions():
    for name in EXPECTED[Kind.ALGORITHM_TYPE]:
        algorithm = resolve(Kind.ALGORITHM_TYPE, name)
        assert isinstance(algorithm, AlgorithmType) and algorithm.name == name
        for field, kind in FN_KINDS.items():
            assert getattr(algorithm, field) in EXPECTED[kind], f"{name}.{field}"
        assert algorithm.data_schema in ("rollout", "dpo", "sft")


def test_algorithm_type_requirements():
    get = lambda name: resolve(Kind.ALGORITHM_TYPE, name)  # noqa: E731
    assert get("ppo").use_critic and get("ppo").advantage_fn == "ppo"
    assert not any(get(n).use_critic for n in EXPECTED[Kind.ALGORITHM_TYPE] - {"ppo"})
    assert get("dpo").repeat_times == 2 and get("dpo").data_schema == "dpo" and not get("dpo").can_balance_batch
    assert get("sft").data_schema == "sft" and not get("sft").compute_advantage_in_trainer
    for name in ("grpo", "opmd", "mix", "rloo", "gspo", "cispo"):
        assert get(name).requires_repeat_times_gt_1, name
    # a reference model exactly when a loss or a KL function reads it: dpo always, a KL type by default
    for name in EXPECTED[Kind.ALGORITHM_TYPE]:
        algorithm = get(name)
        reads_reference = algorithm.kl_loss_fn != "none" or algorithm.kl_penalty_fn != "none"
        assert algorithm.needs_reference(algorithm.kl_loss_fn, algorithm.kl_penalty_fn) == (
            reads_reference or name == "dpo"
        ), name
    for name in ("ppo", "grpo", "opmd", "mix", "reinforceplusplus"):
        assert get(name).needs_reference(get(name).kl_loss_fn, get(name).kl_penalty_fn), name
        assert not get(name).needs_reference("none", "none"), name
    assert get("dpo").needs_reference("none", "none")
    assert get("mix").policy_loss_fn == "mix" and get("mix").sample_strategy == "mix"
