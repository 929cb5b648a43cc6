"""The verl FSDP engine on a CPU against the torch reference engine: same batch, same numbers.

Real verl 0.9.1 workers (FSDP2, gloo; world size 1, and 2 as Ray actors) and the real tiny model; skipped where
verl is not installed (the main environment), run where it is (see tests/verl/README.md).
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from helpers.engine_helpers import make_config

pytest.importorskip("verl")

from trinity.common.batch import Batch  # noqa: E402
from trinity.common.experience import EID, Experience  # noqa: E402
from trinity.config.schema import Config  # noqa: E402
from trinity.plugins import Kind, resolve  # noqa: E402
from trinity.training.torch_trainer import TorchTrainingEngine  # noqa: E402
from trinity_verl.engine import VerlTrainingEngine  # noqa: E402

TOLERANCE = 1e-5
"""Log-probs, values, metrics and SGD-updated weights (measured on a CPU in fp32: 1e-6, 2e-6)."""
SGD = {
    "algorithm__optimizer__optimizer_type": "sgd",
    "algorithm__optimizer__lr": 0.1,
    "algorithm__optimizer__weight_decay": 0.0,
}
"""Updates are compared under SGD: AdamW divides each gradient by its own scale, so rounding-level
differences of near-zero gradients become a sizeable part of a step (measured: 1.4e-5 at lr 1e-3
with fixed micro-batches, 1.1e-4 with dynamic ones, where the two engines group rows differently)."""
KL = {**SGD, "algorithm__kl_loss_fn": "low_var_kl"}


def sampled(n: int = 12) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``n`` (prompt, response) pairs: prompts of 5-7 and responses of 4-12 random tokens."""
    gen = torch.Generator().manual_seed(0)
    return [
        (torch.randint(3, 500, (5 + i % 3,), generator=gen), torch.randint(3, 500, (4 + (3 * i) % 9,), generator=gen))
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def batch() -> Batch:
    """Twelve rows in three groups of four, rewards 1/0."""
    experiences = [
        Experience(
            tokens=torch.cat([prompt, response]),
            prompt_length=len(prompt),
            reward=float(i % 2),
            eid=EID(batch=0, task=i // 4, run=i % 4),
        )
        for i, (prompt, response) in enumerate(sampled())
    ]
    return Batch.from_experiences(experiences)


def prepared(engine: Any, config: Config, batch: Batch) -> Batch:
    """What the trainer does before ``train_step``: engine fields, then advantages."""
    algo = config.algorithm
    batch = engine.prepare_batch(batch)
    advantage = resolve(Kind.ADVANTAGE_FN, algo.advantage_fn)(**(algo.advantage_fn_args or {}))
    return advantage(batch)[0]


def actor_weights(engine: Any) -> dict[str, torch.Tensor]:
    """Every weight of the actor: verl's gathered state dict; the torch engine's model (its
    ``weights_for_sync`` sends a tied LM head once, which the rollout model's own tie carries)."""
    if isinstance(engine, TorchTrainingEngine):
        return {name: tensor.detach().cpu() for name, tensor in engine.actor.state_dict().items()}
    return engine.weights_for_sync()


def assert_close_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    worst = max((a[k].float() - b[k].float()).abs().max().item() for k in a)
    assert worst < TOLERANCE, worst


def assert_close_metrics(verl: dict[str, float], torch_: dict[str, float], prefix: str) -> None:
    keys = {k for k in torch_ if k.startswith(prefix)}
    assert keys <= verl.keys(), keys - verl.keys()
    for key in keys:
        assert verl[key] == pytest.approx(torch_[key], rel=1e-4, abs=TOLERANCE), key


def masked_diff(a: torch.Tensor, b: torch.Tensor, batch: Batch) -> float:
    return (a - b)[batch.response_mask > 0].abs().max().item()


@pytest.mark.parametrize("dynamic", [False, True], ids=["micro_batches", "dynamic_bsz"])
def test_logprobs_and_one_grpo_update_match_the_torch_engine(tiny_model_dir: Path, batch: Batch, dynamic: bool):
    fields = {**KL, "trainer__use_dynamic_bsz": dynamic}
    if dynamic:
        fields["trainer__max_token_len_per_gpu"] = 64
    configs = {name: make_config(tiny_model_dir, engine=name, **fields) for name in ("verl", "torch")}
    verl, reference = VerlTrainingEngine(configs["verl"]), TorchTrainingEngine(configs["torch"])

    before = verl.compute_logprobs(batch)
    assert masked_diff(before, reference.compute_logprobs(batch), batch) < TOLERANCE
    assert masked_diff(verl.compute_ref_logprobs(batch), reference.compute_ref_logprobs(batch), batch) < TOLERANCE

    verl_batch, torch_batch = prepared(verl, configs["verl"], batch), prepared(reference, configs["torch"], batch)
    assert torch.allclose(verl_batch.advantages, torch_batch.advantages, atol=TOLERANCE)
    verl_metrics, torch_metrics = verl.train_step(verl_batch), reference.train_step(torch_batch)
    assert_close_metrics(verl_metrics, torch_metrics, "actor/")
    assert verl_metrics["actor/pg_loss"] != 0 and verl_metrics["actor/grad_norm"] > 0
    assert_close_weights(actor_weights(verl), actor_weights(reference))
    after = verl.compute_logprobs(batch)
    assert masked_diff(after, reference.compute_logprobs(batch), batch) < TOLERANCE
    assert masked_diff(after, before, batch) > 100 * TOLERANCE  # the update did move the policy


def test_ppo_critic_values_and_update_match_the_torch_engine(tiny_model_dir: Path, batch: Batch):
    """With ``trainer.critic_warmup`` 2 (verl's): step 1 updates the critic alone, step 2 both."""
    fields = {**SGD, "trainer__critic_warmup": 2}
    configs = {name: make_config(tiny_model_dir, "ppo", name, **fields) for name in ("verl", "torch")}
    verl, reference = VerlTrainingEngine(configs["verl"]), TorchTrainingEngine(configs["torch"])
    assert masked_diff(verl.compute_values(batch), reference.compute_values(batch), batch) < TOLERANCE

    verl_batch, torch_batch = prepared(verl, configs["verl"], batch), prepared(reference, configs["torch"], batch)
    before = actor_weights(verl)
    warmup = verl.train_step(verl_batch)
    assert_close_metrics(warmup, reference.train_step(torch_batch), "critic/")
    assert warmup["critic/vf_loss"] > 0 and not any(key.startswith("actor/") for key in warmup)
    assert_close_weights(actor_weights(verl), before)
    verl_batch, torch_batch = prepared(verl, configs["verl"], batch), prepared(reference, configs["torch"], batch)
    verl_metrics, torch_metrics = verl.train_step(verl_batch), reference.train_step(torch_batch)
    assert_close_metrics(verl_metrics, torch_metrics, "critic/")
    assert_close_metrics(verl_metrics, torch_metrics, "actor/")
    assert verl_metrics["critic/vf_loss"] > 0
    assert masked_diff(verl.compute_values(batch), reference.compute_values(batch), batch) < TOLERANCE


@pytest.mark.parametrize("dynamic", [False, True], ids=["micro_batches", "dynamic_bsz"])
def test_two_ranks_train_an_odd_batch_as_one_rank_does(tiny_model_dir: Path, batch: Batch, dynamic: bool, ray_session):
    """A real world of two gloo ranks (Ray actors, FSDP2 shards): 11 rows, padded to 16 (two ranks
    x micro-batches of 4; 12 with dynamic batching) with fully masked rows; log-probs, loss
    metrics and the update are those of one rank on the 11 rows (measured: log-probs 0 / 5e-7,
    metrics 2e-6, SGD weights 1e-8; under AdamW the weights differ by 3e-7 / 9e-6)."""
    odd = batch.select(range(11))
    fields = {**KL, "trainer__use_dynamic_bsz": dynamic, "trainer__max_token_len_per_gpu": 64 if dynamic else None}
    one, two = (make_config(tiny_model_dir, engine="verl", cluster__gpu_per_node=n, **fields) for n in (1, 2))
    single, double = VerlTrainingEngine(one), VerlTrainingEngine(two)
    assert single.ranks.size == 1 and double.ranks.size == 2
    assert [p.batch_size for p in double.ranks.call("padded", odd)] == [12 if dynamic else 16] * 2
    assert masked_diff(double.compute_logprobs(odd), single.compute_logprobs(odd), odd) < TOLERANCE
    assert masked_diff(double.compute_ref_logprobs(odd), single.compute_ref_logprobs(odd), odd) < TOLERANCE

    single_metrics = single.train_step(prepared(single, one, odd))
    double_metrics = double.train_step(prepared(double, two, odd))
    assert_close_metrics(double_metrics, single_metrics, "actor/")
    assert single_metrics["actor/pg_loss"] != 0 and single_metrics["actor/grad_norm"] > 0
    assert_close_weights(actor_weights(double), actor_weights(single))
    # trainer.balance_batch (on by default): the ranks' rows were verl's balanced partition, not halves
    assert double_metrics["global_seqlen/balanced_max"] < double_metrics["global_seqlen/max"]
    assert "global_seqlen/max" not in single_metrics


def test_balanced_ranks_take_equal_shares_of_about_equal_work(batch: Batch):
    """``trainer.balance_batch``: each rank gets as many rows, all rows once, and the ranks' tokens
    differ less than in contiguous halves; without it, contiguous halves. (The rows sorted by
    length, so that the halves are the short and the long ones.)"""
    from trinity_verl.rank import rank_rows

    skewed = batch.select(sorted(range(12), key=lambda row: int(batch.attention_mask[row].sum())))
    lengths = skewed.attention_mask.sum(-1)
    halves = rank_rows(skewed, 2, balance=False)
    assert halves == [list(range(6)), list(range(6, 12))]
    parts = rank_rows(skewed, 2, balance=True)
    assert [len(p) for p in parts] == [6, 6] and sorted(parts[0] + parts[1]) == list(range(12))

    def spread(split: list[list[int]]) -> int:
        tokens = [int(lengths[rows].sum()) for rows in split]
        return max(tokens) - min(tokens)

    assert spread(parts) < spread(halves)


def test_two_ranks_save_and_resume_without_hf_weights(tiny_model_dir: Path, batch: Batch, tmp_path: Path, ray_session):
    """PPO with a critic on two ranks: each rank saves its shards; a checkpoint saved without HF
    weights (``trainer.save_hf_checkpoint`` other than ``always``) resumes all the same."""
    config = make_config(tiny_model_dir, "ppo", "verl", cluster__gpu_per_node=2, **SGD)
    first = VerlTrainingEngine(config)
    first.train_step(prepared(first, config, batch))
    directory = tmp_path / "global_step_1"
    first.save_checkpoint(str(directory), step=1, hf_weights=False)
    first.train_step(prepared(first, config, batch))
    after_two = actor_weights(first)
    first.ranks.shutdown()

    for role, rank in itertools.product(("actor", "critic"), (0, 1)):
        assert (directory / role / f"model_world_size_2_rank_{rank}.pt").is_file()
        assert (directory / role / f"optim_world_size_2_rank_{rank}.pt").is_file()
    assert not list((directory / "actor" / "huggingface").glob("*.safetensors"))

    resumed = VerlTrainingEngine(config)
    assert resumed.load_checkpoint(str(directory)) == 1
    resumed.train_step(prepared(resumed, config, batch))
    assert_close_weights(actor_weights(resumed), after_two)


def test_checkpoint_in_verl_format_resumes(tiny_model_dir: Path, batch: Batch, tmp_path: Path):
    config = make_config(tiny_model_dir, "ppo", "verl", **SGD)
    first = VerlTrainingEngine(config)
    first.train_step(prepared(first, config, batch))
    directory = tmp_path / "global_step_1"
    first.save_checkpoint(str(directory), step=1)
    first.train_step(prepared(first, config, batch))
    after_two = actor_weights(first)

    assert (directory / "actor" / "huggingface" / "config.json").is_file()
    assert list((directory / "actor" / "huggingface").glob("*.safetensors"))
    assert (directory / "actor" / "model_world_size_1_rank_0.pt").is_file()
    assert (directory / "actor" / "optim_world_size_1_rank_0.pt").is_file()
    assert (directory / "critic" / "model_world_size_1_rank_0.pt").is_file()

    resumed = VerlTrainingEngine(config)
    assert resumed.load_checkpoint(str(directory)) == 1
    resumed.train_step(prepared(resumed, config, batch))
    assert_close_weights(actor_weights(resumed), after_two)


def test_dpo_pairs_match_the_torch_engine(tiny_model_dir: Path):
    """Chosen/rejected rows stay paired in verl's fixed micro-batches: same loss, same update."""
    rows = sampled()
    pairs = [
        Experience(tokens=prompt, prompt_length=len(prompt), chosen=chosen, rejected=rejected)
        for (prompt, chosen), (_, rejected) in zip(rows[0::2], rows[1::2], strict=True)
    ]
    dpo = Batch.from_experiences(pairs)
    configs = {name: make_config(tiny_model_dir, "dpo", name, **SGD) for name in ("verl", "torch")}
    verl, reference = VerlTrainingEngine(configs["verl"]), TorchTrainingEngine(configs["torch"])
    for _ in range(2):
        verl_metrics, torch_metrics = verl.train_step(dpo), reference.train_step(dpo)
        assert_close_metrics(verl_metrics, torch_metrics, "actor/")
    assert verl_metrics["actor/dpo_loss"] < math.log(2)  # the second step sees the first one's update
    assert_close_weights(actor_weights(verl), actor_weights(reference))
    with pytest.raises(ValueError, match="DPO on trainer_type verl"):
        VerlTrainingEngine(make_config(tiny_model_dir, "dpo", "verl", trainer__use_dynamic_bsz=True))


def saved_adapter(model_dir: Path, folder: Path) -> Path:
    """A rank-8 peft adapter on the tiny model with B drawn at random (a fresh one, B = 0, would
    leave the adapter out of the logprobs): both engines start from this same one."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
        LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", lora_dropout=0.0, task_type="CAUSAL_LM"),
    )
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.02)
    model.save_pretrained(folder)
    return folder


def test_lora_adapter_trains_and_syncs_alone_as_on_the_torch_engine(tiny_model_dir: Path, batch: Batch, tmp_path: Path):
    from trinity.config.schema import LoRAConfig

    lora = LoRAConfig(name="lora", lora_rank=8, lora_alpha=16, path=str(saved_adapter(tiny_model_dir, tmp_path / "a")))
    configs = {
        name: make_config(tiny_model_dir, engine=name, model__lora_configs=[lora], **KL) for name in ("verl", "torch")
    }
    verl, reference = VerlTrainingEngine(configs["verl"]), TorchTrainingEngine(configs["torch"])

    before = verl.compute_logprobs(batch)
    assert masked_diff(before, reference.compute_logprobs(batch), batch) < TOLERANCE
    # the KL reference: the base model (the adapter disabled) on both
    base = verl.compute_ref_logprobs(batch)
    assert masked_diff(base, reference.compute_ref_logprobs(batch), batch) < TOLERANCE
    assert masked_diff(base, before, batch) > 100 * TOLERANCE
    sent = verl.weights_for_sync()
    assert sent.keys() == reference.weights_for_sync().keys()  # adapter_model.safetensors' names, nothing else
    assert all(".lora_A." in name or ".lora_B." in name for name in sent)

    verl.train_step(prepared(verl, configs["verl"], batch))
    reference.train_step(prepared(reference, configs["torch"], batch))
    assert_close_weights(verl.weights_for_sync(), reference.weights_for_sync())
    after = verl.compute_logprobs(batch)
    # the adapters agree to 1e-5; B A (alpha / r) carries that into the logprobs (measured 3e-5)
    assert masked_diff(after, reference.compute_logprobs(batch), batch) < 10 * TOLERANCE
    assert masked_diff(after, before, batch) > 100 * TOLERANCE
