"""Every registered algorithm name resolves, declares its args, and the types match upstream's presets."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from reference.tensor_tree import load_tree

from trinity.algorithm import catalogue
from trinity.algorithm.base import AlgorithmType
from trinity.config.base import PluginArgs
from trinity.config.check import ALGORITHM_FNS as FN_KINDS  # the fields the config pass fills
from trinity.plugins import Kind, get_registry, resolve

REPO = Path(__file__).resolve().parents[2]
PRESETS = load_tree(Path(__file__).with_name("reference") / "trinity_rft_reference.safetensors")["presets"]
"""Trinity-RFT 0.6.0's algorithm types, their functions as its config validator fills them, and flags."""

EXPECTED = {
    Kind.ADVANTAGE_FN: {"ppo", "grpo", "grpo_verl", "grpo_passk", "reinforceplusplus", "reinforce_plus_plus_baseline",
                        "reinforce", "rloo", "remax", "opo", "gpg", "opmd", "opmd_verl", "asymre", "asymre_verl", "rec",
                        "step_wise_grpo", "gigpo", "on_policy_distill", "jsd", "clipb", "clipv"},
    Kind.POLICY_LOSS_FN: {"ppo", "gspo", "cispo", "clip_cov", "kl_cov", "geo_mean", "sapo", "gpg", "opmd",
                          "importance_sampling", "sppo", "topr", "m2po", "rec", "sft", "sft_is", "sft_phi", "dpo", "mix",
                          "mix_chord"},
    Kind.KL_FN: {"none", "k1", "kl", "k2", "mse", "k3", "low_var_kl", "abs", "k1+", "kl+", "k3+", "low_var_kl+", "abs+",
                 "corrected_k3"},
    Kind.ENTROPY_LOSS_FN: {"default", "none", "mix"},
    Kind.SAMPLE_STRATEGY: {"default", "warmup", "staleness_control", "mix"},
    Kind.EXPERIENCE_OPERATOR: {"dapo_dynamic_sampling", "reward_std_filter", "reward_filter", "overlong_reward_shaping",
                               "mask_response_truncated", "reward_shaping_mapper", "invalid_reward_filter",
                               "pass_rate_calculator", "data_juicer"},
    Kind.ALGORITHM_TYPE: {"ppo", "grpo", "grpo_verl", "dapo", "m2po", "reinforceplusplus", "rloo", "remax", "opmd",
                          "asymre", "topr", "cispo", "gspo", "sapo", "sppo", "rec", "multi_step_grpo", "gigpo", "mix",
                          "mix_chord", "on_policy_distill", "jsd", "raft", "sft", "cpt", "dpo"},
}  # fmt: skip
TRINITY_RFT_TYPES = set(PRESETS) | {"m2po"}  # m2po came after 0.6.0
"""Trinity-RFT's registry of types: 24 in 0.6.0, 25 in its current release."""


@pytest.mark.parametrize("kind", list(EXPECTED), ids=str)
def test_the_registry_holds_the_catalogue(kind):
    assert set(get_registry().names(kind)) == EXPECTED[kind]


def test_trinity_rft_types_are_all_here():
    assert len(TRINITY_RFT_TYPES) == 25 and TRINITY_RFT_TYPES <= EXPECTED[Kind.ALGORITHM_TYPE]


@pytest.mark.parametrize("kind", [k for k in EXPECTED if k is not Kind.ALGORITHM_TYPE], ids=str)
def test_every_function_resolves_with_docs_and_declared_args(kind):
    for name in EXPECTED[kind]:
        cls = resolve(kind, name)
        assert cls.__doc__ and len(cls.__doc__.split()) >= 3, f"{kind}:{name} lacks a docstring"
        assert issubclass(cls.Args, PluginArgs)
        for field, info in cls.Args.model_fields.items():
            assert info.description, f"{kind}:{name}.{field} has no description"
        if (kind, name) == (Kind.EXPERIENCE_OPERATOR, "data_juicer"):
            continue  # nothing to run without a recipe: test_experience_ops checks its error
        instance = cls(**cls.default_args())
        assert instance.args.model_dump() == cls.default_args() == cls.Args().model_dump()


def test_algorithm_types_name_registered_functions_and_document_themselves():
    for name in EXPECTED[Kind.ALGORITHM_TYPE]:
        algorithm = resolve(Kind.ALGORITHM_TYPE, name)
        assert isinstance(algorithm, AlgorithmType) and algorithm.name == name
        assert len(algorithm.summary.split()) >= 5 and algorithm.paper, name
        for field, kind in FN_KINDS.items():
            assert getattr(algorithm, field) in EXPECTED[kind], f"{name}.{field}"
        assert algorithm.data_schema in ("rollout", "dpo", "sft", "cpt")


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_match_trinity_rft(name):
    """Function names and flags as Trinity-RFT fills them; ``grpo_verl`` names verl's exact estimator."""
    upstream, ours = PRESETS[name], resolve(Kind.ALGORITHM_TYPE, name)
    for field in FN_KINDS:
        expected = upstream[field]
        if field == "sample_strategy" and expected == "warmup":
            expected = "default"  # the deprecated alias
        if name == "grpo_verl" and field == "advantage_fn":
            expected = "grpo_verl"
        assert getattr(ours, field) == expected, f"{name}.{field}"
    assert ours.use_critic == upstream["use_critic"]
    assert ours.recommended_repeat_times == upstream.get("repeat_times")
    schema = {"experience": "rollout"}.get(upstream["schema"], upstream["schema"])
    assert ours.data_schema == schema
    # Trinity-RFT computes group advantages explorer-side; here every RL type computes them in the
    # trainer, and the SFT-like types compute none
    assert ours.compute_advantage_in_trainer == (ours.policy_loss_fn not in ("sft", "dpo"))
    # upstream loads a reference for every type flagged so; here exactly when a function reads it
    assert ours.needs_reference(ours.kl_loss_fn, ours.kl_penalty_fn) == (
        upstream["use_reference"] and (upstream["kl_loss_fn"] != "none" or name == "dpo")
    )


@pytest.mark.parametrize("name", sorted(n for n in PRESETS if "advantage_fn_args" in PRESETS[n]))
def test_upstream_preset_args_are_the_defaults_here(name, make_batch):
    """The args upstream's preset gives its functions behave as the functions' defaults here, so
    the presets carry no args of their own."""
    gen = torch.Generator().manual_seed(0)
    old = -torch.rand(8, 4, generator=gen)
    batch = make_batch(
        torch.ones(8, 4), torch.rand(8, generator=gen), [0, 0, 0, 0, 1, 1, 1, 1], old_logprobs=old,
        teacher_logprobs=old - torch.rand(8, 4, generator=gen), advantages=torch.randn(8, 4, generator=gen),
        run_ids=[0, 0, 1, 1, 2, 3, 4, 5], step_ids=[0, 1, 0, 1, 0, 0, 0, 0],
    )  # fmt: skip
    algorithm, upstream = resolve(Kind.ALGORITHM_TYPE, name), PRESETS[name]
    advantage_fn = resolve(Kind.ADVANTAGE_FN, algorithm.advantage_fn)
    ours, theirs = advantage_fn()(batch)[0], advantage_fn(**upstream["advantage_fn_args"])(batch)[0]
    assert torch.equal(ours.advantages, theirs.advantages)
    loss_fn = resolve(Kind.POLICY_LOSS_FN, algorithm.policy_loss_fn)
    logprobs = old + 0.3 * torch.randn(8, 4, generator=gen)
    ours, theirs = loss_fn()(logprobs, batch)[0], loss_fn(**upstream.get("policy_loss_fn_args", {}))(logprobs, batch)[0]
    assert torch.equal(ours, theirs)


def test_algorithm_type_requirements():
    get = lambda name: resolve(Kind.ALGORITHM_TYPE, name)  # noqa: E731
    assert get("ppo").use_critic and get("ppo").advantage_fn == "ppo"
    assert not any(get(n).use_critic for n in EXPECTED[Kind.ALGORITHM_TYPE] - {"ppo"})
    assert get("dpo").repeat_times == 2 and get("dpo").data_schema == "dpo"
    assert get("sft").data_schema == "sft" and not get("sft").compute_advantage_in_trainer
    assert get("cpt").data_schema == "cpt" and get("raft").data_schema == "rollout"
    for name in ("grpo", "opmd", "mix", "rloo", "gspo", "cispo", "sapo", "rec", "gigpo", "multi_step_grpo", "m2po"):
        assert get(name).requires_repeat_times_gt_1, name
    assert get("dpo").needs_reference("none", "none")
    assert not get("grpo").needs_reference("none", "none")
    assert get("mix").policy_loss_fn == "mix" and get("mix").sample_strategy == "mix"
    assert get("m2po").policy_loss_fn == "m2po" and get("m2po").advantage_fn == "grpo"


def test_docs_table_every_type():
    """``docs/algorithms.md`` has a row per algorithm type, with its paper."""
    text = (REPO / "docs" / "algorithms.md").read_text().split("## Algorithm types")[1].split("\n## ")[0]
    rows = {line.split("|")[1].strip().strip("`"): line for line in text.splitlines() if line.startswith("| `")}
    for name in EXPECTED[Kind.ALGORITHM_TYPE]:
        assert name in rows, f"docs/algorithms.md has no row for {name}"
        assert resolve(Kind.ALGORITHM_TYPE, name).paper.split(",")[0] in rows[name], name


def test_docs_function_tables_are_the_registry_s():
    """The function tables of ``docs/algorithms.md`` are what ``python -m trinity.algorithm.catalogue`` writes."""
    page = (REPO / "docs" / "algorithms.md").read_text()
    assert catalogue.updated(page) == page, "run `python -m trinity.algorithm.catalogue`"


@pytest.mark.parametrize(
    ("doc", "cell"),
    [
        ("Bounded staleness (cf. AReaL, arXiv:1). More.", "Bounded staleness (cf. AReaL, arXiv:1)"),
        ("PPO (Schulman et al. 2017; dual clip: Ye). More.", "PPO (Schulman et al. 2017; dual clip: Ye)"),
        ("CHORD's importance-\n    sampled SFT, ``l = -p.x``. More.", "CHORD's importance-sampled SFT, ``l = -p.x``"),
        ("A filter, e.g. on length. Then more.", "A filter, e.g. on length"),
        ("One sentence only.\n\nA second paragraph.", "One sentence only"),
    ],
)
def test_a_table_cell_is_the_docstring_s_first_whole_sentence(doc, cell):
    assert catalogue.first_sentence(doc) == cell
