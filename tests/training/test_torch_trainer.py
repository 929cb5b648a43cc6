"""The torch training engine on the tiny model: real rollouts, real algorithm functions."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from helpers.engine_helpers import make_config
from trinity.common.batch import Batch
from trinity.common.experience import EID, Experience
from trinity.config.schema import InferenceModelConfig, ModelConfig, OptimizerConfig
from trinity.model.engines import CheckpointRefused, SamplingArgs
from trinity.plugins import Kind, resolve
from trinity.rollout.transformers_rollout import TransformersRolloutEngine
from trinity.training.losses import batch_totals
from trinity.training.torch_trainer import TorchTrainingEngine, micro_batches, optimizer_for

PROMPTS = ["12+7=", "The quick brown fox", "Question: What is 3 plus 4? Answer:"]


SGD = {
    "algorithm__optimizer__optimizer_type": "sgd",
    "algorithm__optimizer__lr": 1.0,
    "algorithm__optimizer__weight_decay": 0.0,
    "trainer__grad_clip": 0.0,
}


@pytest.fixture(scope="module")
def experiences(tiny_model_dir: Path) -> list[Experience]:
    """Four sampled responses per prompt, cut to varied lengths, rewarded 1 / 0 alternately."""
    rollout = TransformersRolloutEngine(
        InferenceModelConfig(model_path=str(tiny_model_dir)),
        ModelConfig(model_path=str(tiny_model_dir), max_prompt_tokens=32, max_response_tokens=16),
    )
    results = rollout.generate(PROMPTS, SamplingArgs(n=4, max_tokens=16, min_tokens=16, seed=0))
    out = []
    for task, completions in enumerate(results):
        for run, c in enumerate(completions):
            keep = 4 + (3 * task + 5 * run) % 13
            out.append(
                Experience(
                    tokens=torch.tensor(c.prompt_token_ids + c.response_token_ids[:keep]),
                    prompt_length=len(c.prompt_token_ids),
                    logprobs=torch.tensor(c.response_logprobs[:keep]),
                    reward=float(run % 2 == 0),
                    eid=EID(batch="0", task=str(task), run=run),
                )
            )
    return out


def with_advantages(engine: TorchTrainingEngine, experiences: list[Experience]) -> Batch:
    """The orchestration's order: prepare (logprobs, ref, values), then the advantage fn."""
    batch = engine.prepare_batch(Batch.from_experiences(experiences))
    algo = engine.config.algorithm
    advantage_fn = resolve(Kind.ADVANTAGE_FN, algo.advantage_fn)(**algo.advantage_fn_args)
    return advantage_fn(batch)[0]


def weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], atol: float) -> None:
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=atol, rtol=0, msg=key)


def test_grpo_step_moves_logprobs_with_advantages(tiny_model_dir: Path, experiences: list[Experience]) -> None:
    engine = TorchTrainingEngine(make_config(tiny_model_dir))
    batch = with_advantages(engine, experiences)
    before = engine.compute_logprobs(batch)
    mask = batch.response_mask
    torch.testing.assert_close(before * mask, batch.old_logprobs * mask, atol=1e-4, rtol=0)  # = rollout logprobs
    metrics = engine.train_step(batch)
    for key in ("pg_loss", "ppo_kl", "pg_clipfrac", "entropy", "kl_loss", "grad_norm", "lr"):
        assert math.isfinite(metrics[f"actor/{key}"]), key
    assert metrics["actor/ppo_kl"] == pytest.approx(0.0, abs=1e-6)  # first pass is on-policy
    change = ((engine.compute_logprobs(batch) - before) * batch.response_mask).sum(dim=1)
    sign = batch.advantages[:, 0].sign()
    assert (change[sign > 0] > 0).all() and (change[sign < 0] < 0).all()


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
def test_micro_batches_and_dynamic_bsz_equal_the_full_batch(
    tiny_model_dir: Path, experiences: list[Experience], mode: str
) -> None:
    common = {
        **SGD,
        "algorithm__loss_agg_mode": mode,
        "algorithm__entropy_loss_fn_args": {"entropy_coef": 0.01},
        "algorithm__kl_loss_fn_args": {"kl_coef": 0.1},
    }
    variants = {
        "full": {"trainer__micro_batch_size_per_gpu": len(experiences)},
        "micro3": {"trainer__micro_batch_size_per_gpu": 3},
        "dynamic": {"trainer__use_dynamic_bsz": True, "trainer__max_token_len_per_gpu": 60},
    }
    results = {}
    batch = None
    for name, fields in variants.items():
        engine = TorchTrainingEngine(make_config(tiny_model_dir, **common, **fields))
        batch = batch or with_advantages(engine, experiences)
        results[name] = (engine.train_step(batch), weights(engine.actor), len(engine._micro_batches(batch)))
    full_metrics, full_weights, _ = results["full"]
    assert [results[n][2] for n in variants] == [1, 4, results["dynamic"][2]] and results["dynamic"][2] > 1
    for name in ("micro3", "dynamic"):
        metrics, actor, _ = results[name]
        for key in ("actor/grad_norm", "actor/pg_loss", "actor/kl_loss", "actor/entropy"):
            assert metrics[key] == pytest.approx(full_metrics[key], rel=1e-5, abs=1e-7), (name, key)
        assert_same_weights(actor, full_weights, atol=1e-6)


def test_empty_responses_contribute_nothing(tiny_model_dir: Path, experiences: list[Experience]) -> None:
    empty = Experience(tokens=experiences[0].prompt_tokens, prompt_length=experiences[0].prompt_length, reward=1.0)
    trained = []
    for rows in (experiences, [empty, *experiences]):
        engine = TorchTrainingEngine(make_config(tiny_model_dir, trainer__micro_batch_size_per_gpu=1, **SGD))
        batch = engine.prepare_batch(Batch.from_experiences(rows))
        engine.train_step(batch.with_fields(advantages=batch.response_mask * (batch.rewards[:, None] - 0.5)))
        trained.append(weights(engine.actor))
    assert_same_weights(trained[1], trained[0], atol=1e-6)


def test_ppo_epochs_are_optimizer_steps(tiny_model_dir: Path, experiences: list[Experience]) -> None:
    twice = make_config(
        tiny_model_dir, trainer__trainer_config={"actor_rollout_ref": {"actor": {"ppo_epochs": 2}}}, **SGD
    )
    engine = TorchTrainingEngine(twice)
    batch = with_advantages(engine, experiences)
    engine.train_step(batch)
    stepwise = TorchTrainingEngine(make_config(tiny_model_dir, **SGD))
    stepwise.train_step(batch)
    stepwise.train_step(batch)
    assert_same_weights(weights(engine.actor), weights(stepwise.actor), atol=1e-6)


def test_micro_batch_partition() -> None:
    lengths = torch.tensor([5, 9, 3, 7, 20, 2, 8, 8])
    fixed = micro_batches(lengths, max_rows=3)
    assert [t.tolist() for t in fixed] == [[0, 1, 2], [3, 4, 5], [6, 7]]
    dynamic = micro_batches(lengths, max_tokens=20)
    assert sorted(torch.cat(dynamic).tolist()) == list(range(8))
    assert all(len(t) * lengths[t].max() <= 20 for t in dynamic)
    pairs = micro_batches(lengths, unit=2, max_rows=3)
    assert [t.tolist() for t in pairs] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    paired = micro_batches(lengths, unit=2, max_tokens=40)
    assert all(t.view(-1, 2)[:, 0].remainder(2).eq(0).all() and (t.view(-1, 2).diff(dim=1) == 1).all() for t in paired)
    assert [t.tolist() for t in paired][0] == [4, 5]  # longest unit first, alone: 2 x 20 fills the budget


def test_grad_clip_bounds_the_update(tiny_model_dir: Path, experiences: list[Experience]) -> None:
    engine = TorchTrainingEngine(make_config(tiny_model_dir, **{**SGD, "trainer__grad_clip": 1e-3}))
    batch = with_advantages(engine, experiences)
    before = [p.detach().clone() for p in engine.actor.parameters()]
    metrics = engine.train_step(batch)
    step = torch.cat([(p.detach() - b).flatten() for p, b in zip(engine.actor.parameters(), before, strict=True)])
    assert metrics["actor/grad_norm"] > 1e-2  # reported before clipping
    assert step.norm().item() == pytest.approx(1e-3, rel=1e-4)


def verl_lr_factor(step: int, warmup: int, total: int, style: str, min_ratio: float) -> float:
    """The schedule the engine wrote by hand before transformers' ``get_scheduler`` (verl's):
    linear warmup from 0, then constant or half a cosine down to ``min_ratio`` at ``total``."""
    if step < warmup:
        return step / max(1, warmup)
    if style == "constant":
        return 1.0
    progress = (step - warmup) / max(1, total - warmup)
    return max(min_ratio, math.cos(math.pi * progress) * (1 - min_ratio) * 0.5 + (1 + min_ratio) * 0.5)


def lr_sequence(opt: OptimizerConfig, steps: int, run_steps: int | None = None) -> list[float]:
    optimizer, scheduler = optimizer_for(torch.nn.Linear(1, 1), opt, opt.lr, run_steps)
    lrs = []
    for _ in range(steps):
        lrs.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    return lrs


def test_lr_schedule_is_verls(capsys: pytest.CaptureFixture[str]) -> None:
    """Every warmup / constant / cosine setting gives the hand-written schedule's LR at every
    step, past the total too (the cosine comes back up, as before)."""
    constant = OptimizerConfig(lr=1.0, lr_warmup_steps=4, lr_scheduler_type="constant")
    assert lr_sequence(constant, 6) == [0, 0.25, 0.5, 0.75, 1, 1]
    cosine = lr_sequence(OptimizerConfig(lr=1.0, lr_warmup_steps=2, total_training_steps=6, min_lr_ratio=0.1,
                                         lr_scheduler_type="cosine"), 7)  # fmt: skip
    assert cosine[:3] == [0, 0.5, 1.0] and cosine[-1] == pytest.approx(0.1) and cosine[4] == pytest.approx(0.55)
    worst, cases = 0.0, 0
    for style in ("constant", "cosine"):
        for warmup_steps, ratio in ((-1, 0.0), (0, 0.5), (-1, 0.25), (3, 0.9)):
            for total, run_steps, min_ratio in ((-1, 9, 0.0), (1, None, 0.1), (8, None, 0.5), (20, 5, 0.01)):
                opt = OptimizerConfig(lr=1e-3, lr_scheduler_type=style, lr_warmup_steps=warmup_steps,
                                      lr_warmup_steps_ratio=ratio, total_training_steps=total, min_lr_ratio=min_ratio)  # fmt: skip
                steps = total if total > 0 else run_steps
                warmup = warmup_steps if warmup_steps > 0 else int(ratio * steps)
                got = lr_sequence(opt, steps + 4, run_steps)
                expected = [1e-3 * verl_lr_factor(i, warmup, steps, style, min_ratio) for i in range(steps + 4)]
                worst, cases = max(worst, *(abs(a - b) for a, b in zip(got, expected, strict=True))), cases + 1
    with capsys.disabled():
        print(f"\nLR schedules: {cases} settings, largest |get_scheduler - hand-written| {worst:.1e}")
    assert worst < 1e-15
    with pytest.raises(ValueError, match="total_training_steps or trainer.total_steps"):
        lr_sequence(OptimizerConfig(lr_scheduler_type="cosine"), 1)


def test_lr_schedules(tiny_model_dir: Path, experiences: list[Experience]) -> None:
    config = make_config(
        tiny_model_dir,
        algorithm__optimizer__lr_warmup_steps_ratio=0.5,
        algorithm__optimizer__total_training_steps=4,
        algorithm__optimizer__lr_scheduler_type="cosine",
        algorithm__optimizer__min_lr_ratio=0.1,
    )
    engine = TorchTrainingEngine(config)
    batch = with_advantages(engine, experiences)
    lrs = [engine.train_step(batch)["actor/lr"] for _ in range(5)]
    assert lrs == pytest.approx([0.0, 5e-4, 1e-3, 5.5e-4, 1e-4])
    # warm-up given in steps wins over the ratio: 2 steps of 4
    engine = TorchTrainingEngine(
        make_config(
            tiny_model_dir,
            algorithm__optimizer__lr_warmup_steps=2,
            algorithm__optimizer__lr_warmup_steps_ratio=0.9,
            algorithm__optimizer__total_training_steps=4,
        )
    )
    lrs = [engine.train_step(batch)["actor/lr"] for _ in range(3)]
    assert lrs == pytest.approx([0.0, 5e-4, 1e-3])


def test_ppo_critic_learns_values(tiny_model_dir: Path, experiences: list[Experience]) -> None:
    critic_args = {"critic": {"optim": {"lr": 1e-3}}}
    config = make_config(tiny_model_dir, "ppo", algorithm__optimizer__lr=1e-4, trainer__trainer_config=critic_args)
    engine = TorchTrainingEngine(config)
    assert engine.critic is not None and engine.reference is not None
    batch = with_advantages(engine, experiences)
    assert batch.values.shape == batch.responses.shape and batch.returns is not None
    assert not batch.values.any()  # a new value head starts at 0
    losses = []
    for _ in range(4):
        metrics = engine.train_step(batch)
        losses.append(metrics["critic/vf_loss"])
    for key in ("vf_clipfrac", "vpred_mean", "grad_norm", "lr"):
        assert math.isfinite(metrics[f"critic/{key}"]), key
    assert metrics["critic/lr"] == 1e-3 and metrics["actor/lr"] == 1e-4
    assert losses == sorted(losses, reverse=True) and losses[-1] < 0.8 * losses[0]


def test_critic_warmup_trains_the_critic_alone_until_its_step(
    tiny_model_dir: Path, experiences: list[Experience]
) -> None:
    """``trainer.critic_warmup`` 3, as verl: steps 1 and 2 update the critic only (the actor's
    weights and its LR schedule stay), step 3 updates both."""
    config = make_config(tiny_model_dir, "ppo", algorithm__optimizer__lr=1e-4, trainer__critic_warmup=3)
    engine = TorchTrainingEngine(config)
    batch = with_advantages(engine, experiences)
    start = weights(engine.actor)
    for step in (1, 2):
        critic_before = weights(engine.critic)
        metrics = engine.train_step(batch)
        assert "critic/vf_loss" in metrics and not any(key.startswith("actor/") for key in metrics), step
        assert_same_weights(weights(engine.actor), start, atol=0)
        assert weights(engine.critic).keys() == critic_before.keys()
        assert any(not torch.equal(weights(engine.critic)[k], critic_before[k]) for k in critic_before)
    metrics = engine.train_step(batch)
    assert "actor/pg_loss" in metrics and metrics["actor/lr"] == 1e-4
    assert any(not torch.equal(weights(engine.actor)[k], start[k]) for k in start)


def test_grpo_without_a_kl_function_loads_no_reference(tiny_model_dir: Path, experiences: list[Experience]) -> None:
    engine = TorchTrainingEngine(make_config(tiny_model_dir, algorithm__kl_loss_fn="none"))
    assert engine.reference is None
    batch = with_advantages(engine, experiences)
    assert batch.ref_logprobs is None
    assert math.isfinite(engine.train_step(batch)["actor/pg_loss"])


def test_kl_loss_is_against_the_frozen_reference(tiny_model_dir: Path, experiences: list[Experience]) -> None:
    engine = TorchTrainingEngine(make_config(tiny_model_dir, algorithm__kl_loss_fn_args={"kl_coef": 0.1}))
    batch = with_advantages(engine, experiences)
    initial_ref = batch.ref_logprobs.clone()
    mask = batch.response_mask
    torch.testing.assert_close(initial_ref * mask, batch.old_logprobs * mask, atol=1e-4, rtol=0)  # ref = initial actor
    first = engine.train_step(batch)["actor/kl_loss"]
    later = [engine.train_step(batch)["actor/kl_loss"] for _ in range(2)]
    assert first == pytest.approx(0.0, abs=1e-9) and later[-1] > 1e-6
    assert not any(p.requires_grad for p in engine.reference.parameters())
    torch.testing.assert_close(engine.compute_ref_logprobs(batch), initial_ref)


def test_dpo_keeps_pairs_in_micro_batches(tiny_model_dir: Path, experiences: list[Experience]) -> None:
    pairs = [
        Experience(
            tokens=a.prompt_tokens, prompt_length=a.prompt_length, chosen=a.response_tokens, rejected=b.response_tokens
        )
        for a, b in zip(experiences[0::2], experiences[1::2], strict=True)
    ]
    engine = TorchTrainingEngine(make_config(tiny_model_dir, "dpo", trainer__micro_batch_size_per_gpu=3))
    batch = engine.prepare_batch(Batch.from_experiences(pairs))
    assert all(len(index) % 2 == 0 for index in engine._micro_batches(batch))
    first = engine.train_step(batch)["actor/dpo_loss"]
    assert first == pytest.approx(math.log(2), abs=1e-5)  # actor == reference: margin 0
    assert engine.train_step(batch)["actor/dpo_loss"] < first


def test_checkpoint_round_trip_and_sync(tiny_model_dir: Path, experiences: list[Experience], tmp_path: Path) -> None:
    config = make_config(tiny_model_dir, "ppo")
    original = TorchTrainingEngine(config)
    batch = with_advantages(original, experiences)
    for _ in range(2):
        original.train_step(batch)
    original.save_checkpoint(str(tmp_path), step=2)
    assert (tmp_path / "actor" / "huggingface" / "model.safetensors").exists()
    assert (tmp_path / "critic" / "extra_state.pt").exists()
    expected = original.train_step(batch)

    resumed = TorchTrainingEngine(config)
    assert resumed.load_checkpoint(str(tmp_path)) == 2
    got = resumed.train_step(batch)
    assert got.keys() == expected.keys()
    for key in expected:
        assert got[key] == pytest.approx(expected[key], rel=1e-6, abs=1e-9), key
    assert_same_weights(weights(resumed.actor), weights(original.actor), atol=1e-6)
    assert_same_weights(weights(resumed.critic), weights(original.critic), atol=1e-6)

    rollout = TransformersRolloutEngine(
        InferenceModelConfig(model_path=str(tiny_model_dir)), ModelConfig(model_path=str(tiny_model_dir))
    )
    ids = batch.input_ids[0][batch.attention_mask[0].bool()].tolist()
    response_len = int(batch.response_mask[0].sum())
    rollout.update_weights(state_dict=original.weights_for_sync(), version=3)
    synced = torch.tensor(rollout.logprobs([ids])[0][-response_len:])
    torch.testing.assert_close(synced, original.compute_logprobs(batch)[0, :response_len], atol=1e-5, rtol=0)
    rollout.update_weights(checkpoint_path=str(tmp_path), version=2)
    from_disk = torch.tensor(rollout.logprobs([ids])[0][-response_len:])
    trained_two_steps = resumed.compute_logprobs(batch)[0, :response_len]
    assert not torch.allclose(from_disk, trained_two_steps)  # the checkpoint holds step 2, not 3


def test_sync_weights_hold_a_tied_head_once_in_the_rollout_engines_dtype(tiny_model_dir: Path) -> None:
    """The tiny model ties its LM head to the embedding: the head is not sent twice (the rollout
    model's own tie carries it), and a CPU rollout engine holds float32 whatever its dtype key."""
    engine = TorchTrainingEngine(make_config(tiny_model_dir, explorer__rollout_model__dtype="bfloat16"))
    state = engine.actor.state_dict()
    assert state["lm_head.weight"].data_ptr() == state["model.embed_tokens.weight"].data_ptr()
    weights = engine.weights_for_sync()
    assert weights.keys() == state.keys() - {"lm_head.weight"}
    assert {tensor.dtype for tensor in weights.values()} == {torch.float32}
    rollout = TransformersRolloutEngine(
        InferenceModelConfig(model_path=str(tiny_model_dir)), ModelConfig(model_path=str(tiny_model_dir))
    )
    with torch.no_grad():
        engine.actor.model.embed_tokens.weight.add_(0.5)  # moves the tied head too
    rollout.update_weights(state_dict=engine.weights_for_sync(), version=1)
    torch.testing.assert_close(rollout.model.lm_head.weight, engine.actor.lm_head.weight, rtol=0, atol=0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize(("rollout_dtype", "sent"), [("bfloat16", torch.bfloat16), ("float32", torch.float32)])
def test_sync_weights_on_a_gpu_are_cast_to_the_rollout_dtype(tiny_model_dir: Path, rollout_dtype, sent) -> None:
    engine = TorchTrainingEngine(make_config(tiny_model_dir, explorer__rollout_model__dtype=rollout_dtype))
    weights = engine.weights_for_sync()
    assert {tensor.dtype for tensor in weights.values()} == {sent}
    assert {tensor.device.type for tensor in weights.values()} == {"cpu"}


def test_entropy_scores_for_clipb_clipv(tiny_model_dir: Path, experiences: list[Experience]) -> None:
    """S = p (H + log p) of each sampled token and its expectation over the vocabulary, from one
    forward pass over the full sequences, in micro-batches of one row."""
    engine = TorchTrainingEngine(make_config(tiny_model_dir, "grpo", trainer__micro_batch_size_per_gpu=1))
    batch = Batch.from_experiences(experiences)
    prepared = engine.prepare_batch(batch, entropy_scores=True)
    mask = batch.response_mask
    for row in (0, 5):
        exp = experiences[row]
        with torch.no_grad():
            logits = engine.actor(input_ids=exp.tokens[None]).logits[0, exp.prompt_length - 1 : -1].double()
        log_p = logits.log_softmax(-1)
        p, token = log_p.exp(), log_p.gather(-1, exp.tokens[exp.prompt_length :, None])[:, 0]
        entropy = -(p * log_p).sum(-1)
        expected_s = token.exp() * (entropy + token)
        expected_n = (p * p * (log_p + entropy[:, None])).sum(-1)
        n = exp.response_length
        torch.testing.assert_close(prepared.entropy_scores[row, :n].double(), expected_s, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(prepared.expected_entropy_scores[row, :n].double(), expected_n, atol=1e-4, rtol=1e-4)
    assert (prepared.entropy_scores[mask == 0] == 0).all()
    out, metrics = resolve(Kind.ADVANTAGE_FN, "clipb")(mu=0.5)(prepared)
    assert out.response_mask.sum() <= mask.sum() and 0 <= metrics["frac_clipped"] < 1
    assert engine.prepare_batch(batch).entropy_scores is None  # only when asked


class _Payload:
    """What a tampered checkpoint could hold: unpickling it would create ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_a_checkpoint_holding_more_than_tensors_is_refused_unrun(tiny_model_dir: Path, tmp_path: Path) -> None:
    """A checkpoint folder may be shared: ``extra_state.pt`` loads with ``weights_only``, so a
    pickled object in it is refused, naming the file, and its code never runs."""
    config = make_config(tiny_model_dir, "grpo")
    TorchTrainingEngine(config).save_checkpoint(str(tmp_path), step=1)
    state_file = tmp_path / "actor" / "extra_state.pt"
    state = torch.load(state_file, weights_only=True)
    marker = tmp_path / "ran"
    torch.save({**state, "step": _Payload(marker)}, state_file)
    with pytest.raises(CheckpointRefused, match=f"{state_file} holds objects other than tensors and plain values"):
        TorchTrainingEngine(config).load_checkpoint(str(tmp_path))
    assert not marker.exists()


def test_fix_actor_microbatch_loss_scale_false_weighs_token_mean_micro_batches_by_rows(
    tiny_model_dir: Path, experiences: list[Experience]
) -> None:
    """Trinity-RFT's default scale: a micro-batch's token-mean loss x its rows / the batch's rows
    (verl's ``1 / gradient_accumulation`` for equal micro-batches), so micro-batches of unequal
    token counts no longer add up to the full batch; true (trinity's default) weighs by tokens."""
    results = {}
    for fix in (True, False):
        fields = {**SGD, "trainer__micro_batch_size_per_gpu": 3, "trainer__fix_actor_microbatch_loss_scale": fix}
        engine = TorchTrainingEngine(make_config(tiny_model_dir, **fields))
        batch = with_advantages(engine, experiences)
        parts = engine._micro_batches(batch)
        totals = batch_totals(batch)
        shares = []
        for index in parts:
            mb = batch.select(index)
            _, _, weight = engine.losses.actor_micro_loss(
                mb.old_logprobs, torch.zeros_like(mb.old_logprobs), mb, totals
            )
            shares.append(weight)
        tokens = [float(batch.select(index).response_mask.sum() / batch.response_mask.sum()) for index in parts]
        expected = tokens if fix else [len(index) / len(batch) for index in parts]
        assert shares == pytest.approx(expected) and len(set(map(round, tokens, [4] * len(tokens)))) > 1
        engine.train_step(batch)
        results[fix] = weights(engine.actor)
    full = TorchTrainingEngine(make_config(tiny_model_dir, **SGD, trainer__micro_batch_size_per_gpu=len(experiences)))
    full.train_step(with_advantages(full, experiences))
    assert_same_weights(results[True], weights(full.actor), atol=1e-6)
    with pytest.raises(AssertionError):
        assert_same_weights(results[False], weights(full.actor), atol=1e-6)


def test_grad_offload_keeps_the_summed_gradients_off_the_model_between_micro_batches(
    tiny_model_dir: Path, experiences: list[Experience]
) -> None:
    """``trainer.grad_offload``: each micro-batch's forward finds no gradient on the model (the sums
    wait on the CPU), and the step is the same as without it."""
    trained, seen, batch = {}, {}, None
    for offload in (False, True):
        fields = {**SGD, "trainer__micro_batch_size_per_gpu": 3, "trainer__grad_offload": offload}
        engine = TorchTrainingEngine(make_config(tiny_model_dir, **fields))
        batch = batch or with_advantages(engine, experiences)
        holding = seen[offload] = []
        hook = engine.actor.register_forward_pre_hook(
            lambda module, args, holding=holding: holding.append(any(p.grad is not None for p in module.parameters()))
        )
        engine.train_step(batch)
        hook.remove()
        trained[offload] = weights(engine.actor)
    assert seen[False][1:] == [True] * 3 and seen[True][1:] == [False] * 3  # after the first of 4 micro-batches
    assert_same_weights(trained[True], trained[False], atol=1e-6)


class _Unspared:
    """A policy loss as given, but not declared to vanish at zero advantage: every row trains."""

    vanishes_at_zero_advantage = False

    def __init__(self, loss: Any) -> None:
        self.loss, self.loss_agg_mode = loss, loss.loss_agg_mode

    def __call__(self, logprobs: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        return self.loss(logprobs, batch)


@pytest.mark.parametrize(
    "policy_loss, alike_tasks", [("ppo", {"0"}), ("gspo", {"0"}), ("cispo", {"0"}), ("ppo", {"0", "1", "2"})]
)
def test_rows_without_advantage_take_no_backward_and_change_nothing(
    tiny_model_dir: Path, experiences: list[Experience], policy_loss: str, alike_tasks: set[str]
) -> None:
    """A group whose samples all scored alike has zero advantages: its rows run forward without
    gradient, and the update and every metric equal those of all rows trained (two epochs, so the
    second sees ratios off 1; Adam's weight decay and momentum act when every group is alike).
    With a KL term every row trains."""
    alike = [replace(e, reward=1.0) if e.eid.task in alike_tasks else e for e in experiences]
    epochs = {"actor_rollout_ref": {"actor": {"ppo_epochs": 2}}}
    fields = {"algorithm__policy_loss_fn": policy_loss, "trainer__micro_batch_size_per_gpu": 5}
    results, batch = {}, None
    for variant in ("spared", "unspared", "kl"):
        kl = "k2" if variant == "kl" else "none"
        engine = TorchTrainingEngine(
            make_config(tiny_model_dir, **fields, algorithm__kl_loss_fn=kl, trainer__trainer_config=epochs)
        )
        if variant == "unspared":
            engine.losses = dataclasses.replace(engine.losses, policy=_Unspared(engine.losses.policy))
        batch = batch or with_advantages(engine, alike)
        passes: list[tuple[bool, int]] = []
        hook = engine.actor.register_forward_pre_hook(
            lambda module, args, kwargs, passes=passes: passes.append(
                (torch.is_grad_enabled(), len(kwargs["input_ids"]))
            ),
            with_kwargs=True,
        )
        metrics = engine.train_step(batch)
        hook.remove()
        results[variant] = (metrics, weights(engine.actor), passes)
    zero = int(((batch.advantages != 0) & batch.response_mask.bool()).any(dim=1).logical_not().sum())
    assert zero == 4 * len(alike_tasks)
    (spared, spared_weights, spared_passes), (full, full_weights, full_passes) = results["spared"], results["unspared"]
    with_grad = sum(rows for grad, rows in spared_passes if grad)
    assert with_grad == 2 * (len(alike) - zero) and sum(rows for _, rows in spared_passes) == 2 * len(alike)
    assert all(grad for grad, _ in full_passes) and all(grad for grad, _ in results["kl"][2])
    assert spared.keys() == full.keys()
    for key in spared:
        assert spared[key] == pytest.approx(full[key], rel=1e-5, abs=1e-7), key
    assert_same_weights(spared_weights, full_weights, atol=1e-6)
