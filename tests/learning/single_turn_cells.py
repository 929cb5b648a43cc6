"""Cells of the single-turn families: the RL algorithm types on the quickstart's arithmetic from
the warm model, preference (dpo), supervised (sft, cpt) and RL with expert data (mix, mix_chord).

Every RL type runs the quickstart's config (16 tasks x 8 rollouts a step, lr 1e-3) with its
own ``algorithm_type`` and what the type needs besides (DAPO's experience pipeline, a critic,
a greedy baseline, a reward filter, an expert buffer); its measure is the rollout reward.
"""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import torch
from learning_cells import FORMAT, Cell, Measure
from omegaconf import OmegaConf


def negated(name: str) -> dict:
    """The RL control: the type's own advantages with the wrong sign (plugins/single_turn_plugins.py)."""
    from trinity.plugins import Kind, resolve

    of = resolve(Kind.ALGORITHM_TYPE, name).advantage_fn
    return {
        "advantages negated": lambda ws: ["algorithm.advantage_fn=negated", f"algorithm.advantage_fn_args={{of: {of}}}"]
    }


def algorithm(name: str, *more: str) -> tuple[str, ...]:
    return (f"algorithm.algorithm_type={name}", *more)


def expert_buffer(ws) -> list[str]:
    """The quickstart's 25 SFT answers as the auxiliary (expert) buffer of mix and mix_chord, read
    128 a step beside the step's 128 rollouts (expert_data_ratio 0.5 of 256; with the default 128
    the trainer read half of each step's rollouts and trained on ever staler ones: staleness 60 by
    step 120, and mix_chord did not learn); ``total_epochs`` keeps them for the whole budget."""
    return [
        "buffer.train_batch_size=256",
        "buffer.trainer_input.auxiliary_buffers={sft_dataset: {name: sft_dataset, storage_type: file, "
        f"path: {ws.arithmetic / 'sft.jsonl'}, format: {FORMAT}, total_epochs: 1000}}}}",
    ]


def rl_cell(
    name: str,
    *overrides: str,
    note: str = "",
    expert: bool = False,
    negate: bool = True,
    measure: Measure | None = None,
    margin: float = 0.15,
) -> Cell:
    """The RL type ``name`` on the arithmetic (overrides after its ``algorithm_type``); its control
    negates the type's advantages unless not ``negate`` (types whose learning has another source)."""
    return Cell(
        name=f"algorithm: {name}",
        family="RL + expert SFT" if expert else "single-turn RL",
        overrides=lambda ws: [*algorithm(name, *overrides), *(expert_buffer(ws) if expert else [])],
        steps=120,
        test_steps=40,
        control_steps=25,
        margin=margin,
        measure=measure or Measure(),
        note=note,
        controls=negated(name) if negate else {},
    )


DAPO_PIPELINE = (
    "data_processor.experience_pipeline.operators=[{name: dapo_dynamic_sampling},"
    " {name: overlong_reward_shaping, args: {max_response_length: 6, cache_length: 2}}]"
)
"""DAPO's experience side: groups all right or all wrong dropped and refilled; overlong shaping."""

MIX_EXPERT = (
    "Half of each batch is the 25 expert answers (SFT loss), read over and over (total_epochs 1000). With "
    "total_epochs 1 (Trinity-RFT's default) training ends at step 1: an earlier matrix stalled there, the "
    "explorer waiting for weights that never came; the trainer now says why it ended and the explorer stops "
    "(tests/e2e/test_run.py)."
)

SHUFFLED = {
    "rewards shuffled": lambda ws: ["algorithm.advantage_fn=shuffled_rewards", "algorithm.advantage_fn_args={of: grpo}"]
}
"""GRPO's CI control: its advantages computed on the step's rewards shuffled among the samples
(plugins/single_turn_plugins.py): the same reward statistics, no link to the answers."""
GRPO = dataclasses.replace(rl_cell("grpo"), controls={**SHUFFLED, **negated("grpo")})
"""Single-turn RL learns: GRPO on the quickstart's arithmetic raises the rollout reward."""
ROUTER_REPLAY = Cell(
    name="algorithm: grpo, MoE router replay",
    family="single-turn RL",
    overrides=lambda ws: list(algorithm("grpo", "algorithm.enable_router_replay=true")),
    steps=120,
    test_steps=40,
    margin=0.15,
    model="warm_moe",
    note=(
        "The tiny Qwen3-MoE model (2 layers of 8 experts, 2 a token) after the same SFT warm-up; the "
        "transformers engine records each token's experts and the torch trainer replays them. On a CPU both "
        "sides compute in float32 and route alike, so this row shows a whole run carrying and replaying the "
        "routing; what replay corrects (a bf16 rollout's routing flips) is tests/model/test_router_replay.py's."
    ),
    controls=negated("grpo"),
)
PPO = dataclasses.replace(rl_cell("ppo"), test_steps=30)
"""RL with a critic; its learning test stops at 30 steps: 0.172 -> 0.398 by step 25, 0.412 by step 30,
0.558 by step 40 (2026-12-03, seed 0)."""
OPMD = rl_cell("opmd")


def _area(ws) -> Path:
    return ws.root / "single_turn"


def _write(path: Path, rows: list[dict]) -> Path:
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


HELD_OUT_EVERY = 5
"""Every fifth sum of the 25 is held out of DPO's training: its pairs are the held-out measure's."""


def preference_pairs(ws, held_out: bool = False, swapped: bool = False) -> Path:
    """Each sum's right answer against wrong numbers below 18: the even wrong ones of the 20 sums
    trained on (shuffled), the odd wrong ones of the 5 sums ``held_out`` (every
    :data:`HELD_OUT_EVERY`-th: no prompt, no rejected answer in common with training);
    ``swapped``: the wrong one chosen (the DPO control)."""
    rows = []
    for index, row in enumerate(map(json.loads, (ws.arithmetic / "sft.jsonl").read_text().splitlines())):
        if (index % HELD_OUT_EVERY == 0) != held_out:
            continue
        right = row["answer"]
        for wrong in (str(n) for n in range(held_out, 18, 2) if str(n) != right):
            chosen, rejected = (wrong, right) if swapped else (right, wrong)
            rows.append({"question": row["question"], "chosen": chosen, "rejected": rejected})
    random.Random(0).shuffle(rows)
    name = "dpo_held_out" if held_out else f"dpo{'_swapped' if swapped else ''}"
    return _write(_area(ws) / f"{name}.jsonl", rows)


def shuffled_answers(ws) -> Path:
    """The SFT rows with their answers shuffled among the questions (the SFT control)."""
    rows = [json.loads(line) for line in (ws.arithmetic / "sft.jsonl").read_text().splitlines()]
    answers = [row["answer"] for row in rows]
    random.Random(0).shuffle(answers)
    return _write(
        _area(ws) / "sft_shuffled.jsonl", [{**row, "answer": a} for row, a in zip(rows, answers, strict=True)]
    )


def sentences(ws) -> Path:
    """CPT text: "a plus b is c." for a, b below 100, shuffled (10,000 lines, none repeated in a run)."""
    rows = [{"text": f"{a} plus {b} is {a + b}."} for a in range(100) for b in range(100)]
    random.Random(0).shuffle(rows)
    return _write(_area(ws) / "cpt.jsonl", rows)


def train_on(path: Path, fmt: str, batch: int) -> list[str]:
    """Mode train on a dataset file (SFT, DPO or CPT rows), ``batch`` rows a step."""
    buffer = f"{{name: data, storage_type: file, path: {path}, format: {fmt}}}"
    return ["mode=train", f"buffer.trainer_input.experience_buffer={buffer}", f"buffer.train_batch_size={batch}"]


EVAL_EVERY = 10
EVAL = Measure(key="eval/arithmetic/accuracy/mean@8", window=1, label="eval accuracy")
"""The policy's accuracy on the 25 sums (8 samples each at temperature 1), before training and at
every checkpoint (:func:`train_then_evaluate`)."""


def eval_taskset(ws, greedy: bool = False) -> str:
    """The 25 sums as the eval taskset: 8 samples each, or one greedy answer."""
    sampling = "repeat_times: 1, rollout_args: {temperature: 0.0}" if greedy else "repeat_times: 8"
    return (
        f"buffer.explorer_input.eval_tasksets=[{{name: arithmetic, storage_type: file, {sampling}, "
        f"path: {ws.arithmetic / 'tasks.jsonl'}, format: {FORMAT}}}]"
    )


def train_then_evaluate(cell: Cell, ws, config: Path) -> None:
    """Mode bench on the initial model (step 0), mode train saving every :data:`EVAL_EVERY` steps,
    then mode bench on every checkpoint: the eval accuracy of the policy before and while it
    trains, for types that roll nothing out (dpo, sft)."""
    from trinity.launcher import run

    bench = OmegaConf.load(config)
    bench.mode = "bench"
    OmegaConf.save(bench, config.with_name("bench.yaml"))
    run(str(config.with_name("bench.yaml")))
    run(str(config))
    run(str(config.with_name("bench.yaml")))


DPO_FORMAT = "{prompt_type: plaintext, prompt_key: question, system_prompt: Answer with the sum.}"
HELD_OUT = Measure(
    key="preference/held_out_accuracy", role="preference", window=1, label="held-out preference accuracy"
)
"""The share of held-out pairs (sums never trained on, the odd wrong numbers) whose right answer the policy prefers over
the reference more than the wrong one: DPO's implicit reward ranks them right (ties count half)."""


def held_out_accuracy(ws, model_dir: Path, config: Path) -> float:
    """:data:`HELD_OUT` of the model in ``model_dir`` against the warm model (DPO's reference),
    the pairs tokenised as the trainer tokenises them."""
    from transformers import AutoModelForCausalLM

    from trinity.config import load_config
    from trinity.model.tokenization import load_tokenizer
    from trinity.trainer.supervised import row_to_experience

    loaded = load_config(config)
    fmt = loaded.buffer.trainer_input.experience_buffer.format
    chat = load_tokenizer(loaded.model, fmt)
    rows = map(json.loads, preference_pairs(ws, held_out=True).read_text().splitlines())
    pairs = [row_to_experience(row, fmt, chat, "dpo") for row in rows]

    def margins(path: Path) -> torch.Tensor:
        model = AutoModelForCausalLM.from_pretrained(path)

        def logprob(prompt: torch.Tensor, response: torch.Tensor) -> float:
            logits = model(torch.cat([prompt, response])[None]).logits[0, len(prompt) - 1 : -1]
            return logits.log_softmax(-1).gather(-1, response[:, None]).sum().item()

        with torch.no_grad():
            return torch.tensor([logprob(p.tokens, p.chosen) - logprob(p.tokens, p.rejected) for p in pairs])

    implicit = margins(model_dir) - margins(ws.warm_model)
    return ((implicit > 1e-6).float() + 0.5 * (implicit.abs() <= 1e-6).float()).mean().item()


def train_then_rank_held_out(cell: Cell, ws, config: Path) -> None:
    """Mode train saving every :data:`EVAL_EVERY` steps, then :func:`held_out_accuracy` of the
    start (0.5: the policy is its reference) and of every checkpoint, as ``monitor/preference.jsonl``."""
    from trinity.launcher import run

    (summary,) = run(str(config))
    job = Path(summary["job_dir"])
    checkpoints = sorted(job.glob("global_step_*"), key=lambda path: int(path.name.rsplit("_", 1)[1]))
    rows = [{"step": 0, HELD_OUT.key: held_out_accuracy(ws, ws.warm_model, config)}]
    for checkpoint in checkpoints:
        step = int(checkpoint.name.rsplit("_", 1)[1])
        rows.append({"step": step, HELD_OUT.key: held_out_accuracy(ws, checkpoint / "actor" / "huggingface", config)})
    (job / "monitor" / "preference.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))


DPO = Cell(
    name="algorithm: dpo",
    family="preference",
    overrides=lambda ws: [
        "algorithm.algorithm_type=dpo",
        "algorithm.optimizer.lr=1e-5",
        *train_on(preference_pairs(ws), DPO_FORMAT, 25),
        f"trainer.save_interval={EVAL_EVERY}",
        "trainer.save_hf_checkpoint=always",
    ],
    steps=40,
    test_steps=10,
    margin=0.2,
    control_steps=10,
    model="warm",
    measure=HELD_OUT,
    runner=train_then_rank_held_out,
    note=(
        "The warm model; right answers against the even wrong numbers of 20 sums, measured on the odd ones of the "
        "other 5 (no prompt in common): 0.50 -> 0.86 at step 10 (the learning test, 2026-12-03). Before that split "
        "(every sum in both, 2026-11-28): 0.50 -> 0.81 at step 10, "
        "0.80 at step 40 (lr 1e-5); swapped, 0.50 -> 0.15 -> 0.13. What DPO does "
        "not do here is raise the policy's own accuracy: the right answer's mean probability falls as it learns "
        "(0.68 -> 0.62 by step 40; likelihood displacement, Razin et al. 2024, arXiv:2410.08847): tried from random "
        "weights (greedy accuracy 0.00 -> 0.16 in 40 steps, the format learnt, the sums not) and from the warm "
        "model (sampled accuracy 0.65 -> 0.26 at lr 1e-3, 0.47 at 1e-4, 0.72 at 1e-5, short of a margin), with "
        "on-policy rejected answers alike."
    ),
    controls={
        "chosen and rejected swapped": lambda ws: [
            f"buffer.trainer_input.experience_buffer.path={preference_pairs(ws, swapped=True)}"
        ]
    },
)
"""Preference learning: DPO ranks held-out right answers over wrong ones, against its reference."""
SFT = Cell(
    name="algorithm: sft",
    family="supervised",
    overrides=lambda ws: [
        "algorithm.algorithm_type=sft",
        *train_on(ws.arithmetic / "sft.jsonl", FORMAT, 25),
        f"trainer.save_interval={EVAL_EVERY}",
        eval_taskset(ws),
    ],
    steps=60,
    test_steps=50,  # eval accuracy 0.00 -> 0.445 at step 50, 0.685 at 60 (2026-12-03): the margin with room
    margin=0.3,
    control_steps=50,
    measure=EVAL,
    model="tiny",
    runner=train_then_evaluate,
    controls={
        "answers shuffled": lambda ws: [f"buffer.trainer_input.experience_buffer.path={shuffled_answers(ws)}"],
    },
)
"""SFT from random weights: the tiny model learns the 25 sums."""
CPT = Cell(
    name="algorithm: cpt",
    family="supervised",
    overrides=lambda ws: [
        "algorithm.algorithm_type=cpt",
        *train_on(sentences(ws), "{prompt_type: plaintext, prompt_key: text}", 32),
    ],
    steps=60,
    test_steps=30,
    margin=2.0,
    model="tiny",
    measure=Measure(key="actor/sft_loss", role="trainer", higher_is_better=False, label="held-out loss"),
    note="Each step's loss is on 32 sentences the model has not trained on (one pass over 10,000): a held-out loss.",
    controls={"learning off (lr 1e-9; lr 0 is refused)": lambda ws: ["algorithm.optimizer.lr=1e-9"]},
)
"""Continued pre-training from random weights lowers the loss on unseen text."""

LORA_ADAPTER = (
    "model.lora_configs=[{name: lora, lora_rank: 16, lora_alpha: 32,"
    " target_modules: [q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, lm_head]}]"
)
"""A rank-16 adapter on every linear layer and the LM head (what Tinker's ``train_unembed`` does;
peft's ``all-linear`` leaves the head out, and on this model that held LoRA to +0.11 in 40 steps)."""
LORA = Cell(
    name="lora: grpo (torch trainer + transformers engine)",
    family="LoRA",
    overrides=lambda ws: [
        *algorithm("grpo", "algorithm.optimizer.lr=2e-3"),
        LORA_ADAPTER,
        eval_taskset(ws),
        "explorer.eval_on_startup=true",
        f"explorer.eval_interval={EVAL_EVERY}",
    ],
    steps=60,
    test_steps=30,
    margin=0.15,
    measure=EVAL,
    control_steps=30,  # the rise by step 20 varies from run to run, at times short of the margin
    model="warm_40",
    note=(
        "From the model after 40 SFT steps (eval accuracy 0.24, room to rise), the eval accuracy of the policy "
        "the explorer samples (base + synced adapter) at step 0 and at the end."
    ),
    controls={"adapter not synced": lambda ws: ["synchronizer.sync_method=dropped_memory"]},
)
"""GRPO with only a LoRA adapter trained and synced raises the policy's accuracy."""

OFF_POLICY = ("trainer.trainer_config={actor: {ppo_epochs: 2}}", "synchronizer.sync_offset=2")
"""Two optimizer passes over each batch and the explorer two steps ahead of the trainer: the
second pass's ratio to the sampling policy leaves 1, and every batch was sampled by weights up to
two updates old, so clipping and importance weights act."""


def off_policy_cell(algorithm_type: str, *overrides: str, label: str = "", note: str = "") -> Cell:
    """The RL type (its :func:`rl_cell`) off policy: :data:`OFF_POLICY`, then ``overrides``."""
    cell = rl_cell(algorithm_type, *OFF_POLICY, *overrides, note=note)
    name = label or f"off-policy: {algorithm_type}"
    return dataclasses.replace(cell, name=name, family="off-policy RL", test_steps=None)


STALE = ("trainer.trainer_config={actor: {ppo_epochs: 4}}", "synchronizer.sync_offset=6")
"""High staleness: four passes a batch, sampled by weights up to six updates old."""

OFF_POLICY_CELLS = [
    off_policy_cell(name)
    for name in ("ppo", "gspo", "cispo", "sapo", "m2po", "topr", "asymre", "rec", "sppo", "grpo_verl")
] + [
    off_policy_cell(
        "dapo", "algorithm.policy_loss_fn_args={clip_range_low: 0.2, clip_range_high: 0.28}", DAPO_PIPELINE
    ),
    off_policy_cell(
        "grpo",
        *STALE,
        label="off-policy, stale: grpo (clipped ratio)",
        note="The pair of the next row: PPO's clipped ratio to the sampling policy at high staleness.",
    ),
    off_policy_cell(
        "grpo",
        *STALE,
        "algorithm.policy_loss_fn=gpg",
        label="off-policy, stale: grpo without correction (gpg: no ratio, no clip)",
        note="The same run with REINFORCE's loss, which neither weighs nor clips the stale samples: "
        "where it learns less than the clipped row, the correction matters. 40 steps, seed 0, staleness 5.5 "
        "(2026-12-03): clipped 0.172 -> 0.466, this row 0.172 -> 0.222.",
    ),
    off_policy_cell(
        "grpo",
        *STALE,
        "algorithm.bypass_old_logprobs=false",
        "algorithm.rollout_correction={preset: decoupled_token_is}",
        label="rollout correction: decoupled_token_is (TIS), stale",
        note="The trainer recomputes the old logprobs (decoupled mode) and weighs each token by its truncated "
        "ratio to the rollout's logprobs (TIS, threshold 2): the stale samples' mismatch is corrected.",
    ),
    off_policy_cell(
        "grpo",
        *STALE,
        "algorithm.bypass_old_logprobs=false",
        "algorithm.rollout_correction={preset: disabled}",
        label="rollout correction: disabled (decoupled, no weights), stale",
        note="The TIS row's run without its weights: the pair shows what the correction adds. 40 steps, seed "
        "0, staleness 5.5 (2026-12-03): TIS 0.172 -> 0.575, this row 0.172 -> 0.691: here the decoupled PPO "
        "clip against the recomputed old logprobs is correction enough, and TIS's weights did not help.",
    ),
    off_policy_cell(
        "grpo",
        *STALE,
        "algorithm.bypass_old_logprobs=false",
        "algorithm.rollout_correction={preset: decoupled_token_icepop}",
        label="rollout correction: decoupled_token_icepop (IcePop), stale",
    ),
]
"""The off-policy block: each clipping or importance-weighting type where its ratio leaves 1,
the cells where a correction should matter, and rollout correction."""

CELLS = [
    GRPO,
    ROUTER_REPLAY,
    rl_cell(
        "grpo_verl",
        note="Same curve as grpo at every step (one seed, 2026-12-05): its advantage differs from grpo's only for "
        "a task sampled once, and every task here is sampled 8 times.",
    ),
    rl_cell(
        "gspo",
        note=(
            "Same curve as grpo to 5 decimals (pg_loss and reward at every step): one on-policy update a batch "
            "keeps the ratio at 1, and with the global loss_agg_mode token-mean (check.py gives it to every fn "
            "that sets none, over GSPO's own seq-mean-token-mean) GSPO's gradient is GRPO's."
        ),
    ),
    rl_cell("dapo", "algorithm.policy_loss_fn_args={clip_range_low: 0.2, clip_range_high: 0.28}", DAPO_PIPELINE),
    PPO,
    OPMD,
    rl_cell("rloo"),
    rl_cell("reinforceplusplus"),
    rl_cell("remax", "buffer.explorer_input.default_workflow_type=greedy_baseline_workflow"),
    rl_cell("asymre"),
    rl_cell(
        "cispo", note="Same curve as grpo (first 15 steps checked): on policy its clipped, stop-gradient ratio is 1."
    ),
    rl_cell(
        "m2po",
        note="Same curve as grpo at every step (one seed, 2026-12-05): one on-policy update a batch keeps every "
        "ratio at 1, so no token's (log r)^2 exceeds 0, the mask drops none and the loss's gradient is GRPO's.",
    ),
    rl_cell(
        "raft",
        "data_processor.experience_pipeline.operators=[{name: reward_filter, args: {threshold: 1.0}}]",
        negate=False,
        # the reward after RAFT's filter is always 1: the samples it keeps are the right ones
        measure=Measure(key="rollout/experience_count", label="right samples of 128"),
        margin=0.15 * 128,
    ),
    rl_cell("rec"),
    rl_cell(
        "sapo",
        note="Same curve as grpo at every step (one seed, 2026-12-05): on policy the gate's gradient weight "
        "4 sig(0) (1 - sig(0)) r is 1 at r = 1, PPO's, and the global token-mean aggregation applies (as for gspo).",
    ),
    rl_cell("sppo"),
    rl_cell("topr"),
    rl_cell("mix", expert=True, negate=False, note=MIX_EXPERT),
    rl_cell(
        "mix_chord",
        expert=True,
        negate=False,
        note=f"{MIX_EXPERT} CHORD's phi weighting p (1 - p) takes most of the expert rows' gradient away while the "
        "model rarely writes the expert's answer. 120 steps, seed 0 (2026-12-05): 0.172 -> 0.791, against "
        "mix's 0.172 -> 0.856; with a train batch of 128 (64 rollouts read of the 128 written a step) "
        "0.172 -> 0.237, rollouts up to 60 versions old.",
    ),
    DPO,
    SFT,
    CPT,
    LORA,
    *OFF_POLICY_CELLS,
]
