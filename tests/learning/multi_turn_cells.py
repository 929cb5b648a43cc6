"""Cells of the multi-turn, tool-use and distillation families.

Multi-turn: two sums in a row (``sum_pair_*`` workflows of plugins/multi_turn_plugins.py): the
quickstart's system prompt, a sum, the model's reply, a second sum, its reply; the reward is the
mean over both replies, so it needs both turns. The warm model answers a sum right about a
quarter of the time, in the second turn too. Controls: the same runs with the action mask one
turn off (trained on the user's turn and the template, not the model's replies).

Distillation: the student is the random tiny model, the teacher the warm model; the measure is
the workflow's ``kl_divergence`` (summed ``logp_student - logp_teacher`` of each sample), which
falls as the student learns to write what the teacher would. Control: the student is its own
teacher (the random model), where there is nothing to learn.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from learning_cells import Cell, Measure, Workspace

TWO_TURN_PROMPT = "model.max_prompt_tokens=64"
"""The second turn's prompt (system, first sum, reply, second sum) is about 50 tokens."""


def sum_pairs(workspace: Workspace) -> Path:
    """Tasks of two sums (``question`` then ``turns[0]``, their ``answers``): every arithmetic
    task followed by two others, 50 rows (written once under ``multi_turn/``)."""
    path = workspace.root / "multi_turn" / "sum_pairs.jsonl"
    if not path.exists():
        sums = [json.loads(line) for line in (workspace.arithmetic / "tasks.jsonl").read_text().splitlines()]
        rng = random.Random(0)
        rows = [
            {"question": s["question"], "turns": [t["question"]], "answers": [s["answer"], t["answer"]]}
            for s in sums
            for t in rng.sample(sums, 2)
        ]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def sum_pair_cell(name: str, family: str, workflow: str, algorithm: str, **fields) -> Cell:
    """A two-sum cell: ``workflow`` on the sum pairs with ``algorithm``; its control runs the
    workflow's ``_env_masked`` twin."""

    def overrides(ws: Workspace) -> list[str]:
        return [
            f"buffer.explorer_input.taskset.path={sum_pairs(ws)}",
            f"buffer.explorer_input.default_workflow_type={workflow}",
            f"algorithm.algorithm_type={algorithm}",
            TWO_TURN_PROMPT,
        ]

    masked = [f"buffer.explorer_input.default_workflow_type={workflow}_env_masked"]
    return Cell(
        name=name,
        family=family,
        overrides=overrides,
        steps=120,
        margin=0.15,
        controls={"mask on the user's turns": lambda ws: masked},
        **fields,
    )


STEP_WISE_GRPO = sum_pair_cell(
    "multi-turn: step_wise + multi_step_grpo",
    "multi-turn step-wise",
    "sum_pair_step_wise",
    "multi_step_grpo",
    test_steps=30,
)
"""Step-wise multi-turn RL: one experience per reply, each with the run's GRPO advantage. The
trainer takes two steps per explorer step (two experiences per run)."""

GIGPO = sum_pair_cell("multi-turn: step_wise + gigpo", "multi-turn step-wise", "sum_pair_step_wise", "gigpo")
"""GiGPO: the first replies of a task's runs share a state (an anchor group), the second ones
do where the first replies agreed."""

MULTI_TURN = sum_pair_cell("workflow: multi_turn", "multi-turn", "sum_pair_multi_turn", "grpo")
"""The whole conversation as one experience, masked to the model's replies."""


def teacher(model: Path) -> str:
    return f"explorer.auxiliary_models=[{{model_path: {model}, engine_type: transformers}}]"


def distill_cell(algorithm: str, **fields) -> Cell:
    """``algorithm`` with ``on_policy_distill_workflow``: the random tiny model (the student)
    sampling, the warm model (the teacher) scoring; the control makes the student its own teacher."""

    def overrides(ws: Workspace) -> list[str]:
        return [
            f"algorithm.algorithm_type={algorithm}",
            "buffer.explorer_input.default_workflow_type=on_policy_distill_workflow",
            teacher(ws.warm_model),
        ]

    return Cell(
        name=f"algorithm: {algorithm}",
        family="distillation",
        overrides=overrides,
        model="tiny",
        measure=Measure(key="rollout/kl_divergence/mean", higher_is_better=False, label="KL to teacher"),
        steps=60,
        margin=5.0,
        controls={"the student as its own teacher": lambda ws: [teacher(ws.tiny_model)]},
        **fields,
    )


ON_POLICY_DISTILL = distill_cell("on_policy_distill", test_steps=15)
JSD = distill_cell("jsd")

CELLS = [STEP_WISE_GRPO, GIGPO, MULTI_TURN, ON_POLICY_DISTILL, JSD]
