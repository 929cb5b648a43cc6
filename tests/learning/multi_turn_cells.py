"""Cells of the multi-turn, tool-use and distillation families.

Multi-turn: two sums in a row (``sum_pair_*`` workflows of plugins/multi_turn_plugins.py): the
quickstart's system prompt, a sum, the model's reply, a second sum, its reply; the reward is the
mean over both replies, so it needs both turns. The warm model (60 SFT steps) scores about 0.5
on the pair at step 1 (about 0.7 a sum in the first turn, less in the second). Controls: the same runs with the action mask one
turn off (trained on the user's turn and the template, not the model's replies).

Tool use: sums of two 2-digit numbers with the calculator offered; a model SFT'd briefly on
expert conversations (call, result, answer) must call it and copy its result.

Distillation: the student is the RL cells' start (40 SFT steps), the teacher the warm model
SFT'd as long again (right nearly always); the student's reward rises as it answers as the
teacher does. Control: the student is its own teacher, where there is nothing to learn.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

from learning_cells import FORMAT, RL_START, Cell, Workspace, _run_in_process, _save, base_config

from helpers.tool_model import CALCULATOR, tool_call_text

TWO_TURN_PROMPT = "model.max_prompt_tokens=64"
"""The second turn's prompt (system, first sum, reply, second sum) is about 50 tokens."""
WARM_UP = "algorithm.optimizer.lr_warmup_steps=5"
"""The two-sum cells' lr warm-up: from the warm model (0.7 a sum) the first full-lr Adam step
dropped the pair's reward from about 0.55 to 0.2 (step 2), and the cells spent 10-20 steps
regaining it; over 5 warm-up steps none dipped more than 0.05 and both passed their margin by
step 25 (2026-12-05, seeds 0 and 1: multi_turn +0.26 and +0.19, step_wise +0.26 and +0.17)."""
STEP_WISE_BATCH = "buffer.train_batch_size=256"
"""Step-wise runs make an experience per reply: 16 tasks x 8 runs x 2. The trainer takes an
explorer step's in one batch (Trinity-RFT's step-wise examples set batch_size x repeat_times x
turns), so each step trains on what the weights it published sampled, whole task groups at once.
With the default (an experience per run, 128) the trainer took two steps per explorer step and
the explorer's weights fell behind (the trainer's staleness reached 12 by its step 27)."""


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


def sum_pair_cell(name: str, family: str, workflow: str, algorithm: str, *settings: str, **fields) -> Cell:
    """A two-sum cell: ``workflow`` on the sum pairs with ``algorithm`` (and ``settings``); its
    control runs the workflow's ``_env_masked`` twin."""

    def overrides(ws: Workspace) -> list[str]:
        return [
            f"buffer.explorer_input.taskset.path={sum_pairs(ws)}",
            f"buffer.explorer_input.default_workflow_type={workflow}",
            f"algorithm.algorithm_type={algorithm}",
            TWO_TURN_PROMPT,
            WARM_UP,
            *settings,
        ]

    masked = [f"buffer.explorer_input.default_workflow_type={workflow}_env_masked"]
    return Cell(
        name=name,
        family=family,
        overrides=overrides,
        steps=120,
        margin=0.15,
        model="warm",
        controls={"mask on the user's turns": lambda ws: masked},
        **fields,
    )


STEP_WISE_GRPO = sum_pair_cell(
    "multi-turn: step_wise + multi_step_grpo",
    "multi-turn step-wise",
    "sum_pair_step_wise",
    "multi_step_grpo",
    STEP_WISE_BATCH,
    test_steps=30,
    control_steps=25,  # with WARM_UP it passes its margin between steps 20 and 25
    note=(
        "With WARM_UP (2026-12-05): 0.531 -> 0.859 (+0.327) and 0.648 -> 0.846 (+0.198) over 30 steps (seeds 0 "
        "and 1), +0.26 and +0.17 by step 25, dip 0.00 and 0.03; the control 0.531 -> 0.028 in 25 steps and "
        "0.660 -> 0.070 in 30. Without it, "
        "measured from the step before any update (2026-12-04): +0.159 by step 30 in a CI-like run, +0.197 and "
        "+0.24 by step 30 and +0.273 and about +0.3 by step 40 in two more; the control 0.559 -> 0.004 in 40. "
        "30 steps, seed 0, one trainer step per explorer step: 0.305 -> 0.787, 0.349 -> 0.698 and 0.311 -> 0.798 "
        "(+0.35 to +0.49) in three runs, 30-34 s each (2026-11-28). The runs differ (the engine batches concurrent "
        "requests as they arrive): at 20 steps the change was +0.23 to +0.35 in four runs here, +0.139 in one CI "
        "run beside the engine suites (start 0.479), under the margin; hence 30. Before, the trainer took two steps per explorer step and the explorer's weights fell "
        "behind (staleness 12 by trainer step 27, pg_clipfrac 0.15): 0.59 -> 0.2-0.3 over 14 steps. Control "
        "(mask on the user's turns): 0.294 -> 0.089 over 14 explorer steps, the model unlearning the sums. Step 1 "
        "scores about 0.55 in every run and step 2 about 0.2: the start window reads high."
    ),
)
"""Step-wise multi-turn RL: one experience per reply, each with the run's GRPO advantage; one
trainer step per explorer step (:data:`STEP_WISE_BATCH`)."""

GIGPO = sum_pair_cell(
    "multi-turn: step_wise + gigpo",
    "multi-turn step-wise",
    "sum_pair_step_wise",
    "gigpo",
    STEP_WISE_BATCH,
    note=(
        "20 steps, seed 0, one trainer step per explorer step, before WARM_UP: 0.324 -> 0.688 in one run "
        "(2026-11-28). The "
        "weak learning before (+0.06 at 60 steps) ran with the explorer's weights falling behind a trainer "
        "taking two steps per explorer step (multi_step_grpo's note); the anchor groups look right: about 70 "
        "a step, 55% of them shared. Its advantages are smaller than multi_step_grpo's (fnorm none, the paper's: mean |A_E| "
        "0.15-0.23, |A| at most about 1.7 against 2.5), so its updates are too. One run: no CI test yet."
    ),
)
"""GiGPO: the first replies of a task's runs share a state (an anchor group), the second ones
do where the first replies agreed."""

MULTI_TURN = sum_pair_cell(
    "workflow: multi_turn",
    "multi-turn",
    "sum_pair_multi_turn",
    "grpo",
    test_steps=30,
    control_steps=25,  # with WARM_UP it passes its margin between steps 20 and 25
    note="With WARM_UP (2026-12-05): 0.562 -> 0.857 (+0.295) and 0.602 -> 0.819 (+0.217) over 30 steps (seeds 0 "
    "and 1), +0.26 and +0.19 by step 25, dip 0.00 and 0.05; the control 0.535 -> 0.010 in 25 steps and "
    "0.617 -> 0.000 in 30. Without it, 40 steps: 0.420 -> 0.882, 0.384 -> 0.909 and 0.315 -> 0.868 in three runs on 2026-11-27; control (mask on "
    "the user's turns) 0.248 -> 0.000. Measured from the step before any update (2026-12-04, a CI-like run): "
    "0.57 -> 0.19 at step 2, +0.08 by step 20, +0.21 by step 30, 0.57 -> 0.83 (+0.26) by step 40; the control "
    "0.53 -> 0.00.",
)
"""The whole conversation as one experience, masked to the model's replies."""


def teacher(model: Path) -> str:
    return f"explorer.auxiliary_models=[{{model_path: {model}, engine_type: transformers}}]"


def distill_cell(algorithm: str, **fields) -> Cell:
    """``algorithm`` with ``on_policy_distill_workflow``: the warm model (the student) samples,
    :func:`teacher_model` scores every token. The reward (``math_reward``, which the distillation
    advantages never see) rises as the student comes to answer as the teacher does. The
    control makes the student its own teacher (no divergence: nothing to learn)."""

    def overrides(ws: Workspace) -> list[str]:
        return [
            f"algorithm.algorithm_type={algorithm}",
            "buffer.explorer_input.default_workflow_type=on_policy_distill_workflow",
            teacher(teacher_model(ws)),
        ]

    return Cell(
        name=f"algorithm: {algorithm}",
        family="distillation",
        overrides=overrides,
        steps=60,
        margin=0.15,
        controls={"the student as its own teacher": lambda ws: [teacher(ws.start_model(RL_START))]},
        **fields,
    )


ON_POLICY_DISTILL = distill_cell(
    "on_policy_distill",
    test_steps=60,
    control_steps=50,
    note=(
        "It rises slowly but steadily, with no dip: seed 0 0.172 -> 0.428 in 60 steps (+0.153 by step 40, +0.208 "
        "by 50); seeds 1 and 2 +0.202 and +0.169 in 60 steps, +0.083 and +0.117 by 50 (2026-12-04). The control "
        "(self-teacher) +0.066 in 50 steps. At 30 steps (its earlier test budget) +0.09: short of the margin. "
        "kl_coef 2 moved neither seed 1 nor 2 (+0.178, +0.166). The warm model as the student at lr 1e-3 dips "
        "to 0.25 and ends near its start (0.695 -> 0.65, the earlier matrix)."
    ),
)
JSD = distill_cell(
    "jsd",
    note="With Trinity-RFT's advantage (-kl_coef JSD_t, >= 0 for every token) the student collapsed: 0.219 -> "
    "0.000 in 40 steps. With the JSD's own policy gradient (trinity.algorithm.distill.JSDAdvantage) it learns.",
)


SYSTEM_PROMPT = "Answer with the sum."
"""The quickstart's (the cells' taskset format adds it to every task)."""


def calculator_tasks(workspace: Workspace) -> Path:
    """Sums of two 2-digit numbers the tiny model cannot do: the calculator's result must be
    copied. ``tasks.jsonl`` (``tool_call_workflow`` rows) and ``expert.jsonl`` (the call, the
    result, the answer: SFT rows with the tool schema), 40 each, under ``multi_turn/calculator``."""
    out = workspace.root / "multi_turn" / "calculator"
    if not (out / "tasks.jsonl").exists():
        rng = random.Random(0)
        sums = [(rng.randint(10, 49), rng.randint(10, 49)) for _ in range(40)]
        tools = json.dumps([CALCULATOR])
        tasks = [{"question": f"{a}+{b}=", "answer": str(a + b), "tools": tools} for a, b in sums]
        expert = [
            {
                "messages": [
                    {"role": "system", "content": SYSTEM_PROMPT},
                    {"role": "user", "content": f"{a}+{b}="},
                    {"role": "assistant", "content": tool_call_text(f"{a}+{b}")},
                    {"role": "tool", "name": "calculator", "content": str(a + b)},
                    {"role": "assistant", "content": str(a + b)},
                ],
                "tools": tools,
            }
            for a, b in sums
        ]
        out.mkdir(parents=True, exist_ok=True)
        for name, rows in (("tasks.jsonl", tasks), ("expert.jsonl", expert)):
            (out / name).write_text("".join(json.dumps(row) + "\n" for row in rows))
    return out


def sft_model(workspace: Workspace, name: str, start: Path, data: Path, fmt: str, settings: list[str]) -> Path:
    """``start`` fine-tuned on the SFT rows of ``data`` (``trinity run`` mode train with
    ``settings``), built once as ``multi_turn/<name>``."""
    path = workspace.root / "multi_turn" / name
    if not (path / "config.json").exists():
        out = workspace.root / "multi_turn" / f"{name}_sft"
        config = base_config(out, start, workspace.arithmetic)
        config.merge_with_dotlist(
            [
                "mode=train",
                "algorithm.algorithm_type=sft",
                f"buffer.trainer_input.experience_buffer={{name: sft, storage_type: file, path: {data}, format: {fmt}}}",
                *settings,
            ]
        )
        (summary,) = _run_in_process(_save(config, out))
        os.replace(summary["model_path"], path)
    return path


def calculator_model(workspace: Workspace) -> Path:
    """The tiny model SFT'd on the expert conversations, both assistant turns trained
    (``enable_concatenated_multi_turn``; without it only the final answer trains and the model
    never calls the tool). 120 steps: it writes a well-formed call nearly always."""
    expert = calculator_tasks(workspace) / "expert.jsonl"
    settings = [
        "buffer.train_batch_size=20",
        "buffer.total_epochs=60",
        "algorithm.optimizer.lr=3e-3",
        "model.max_prompt_tokens=512",
    ]
    fmt = "{messages_key: messages, tools_key: tools, enable_concatenated_multi_turn: true}"
    return sft_model(workspace, "calculator_model", workspace.tiny_model, expert, fmt, settings)


def teacher_model(workspace: Workspace) -> Path:
    """The warm model SFT'd as long again (120 full-batch steps in all on the 25 sums): right
    nearly always, where the warm model is right about 0.7 of the time and the student
    (:data:`RL_START`) about a fifth."""
    settings = ["buffer.train_batch_size=25", "buffer.total_epochs=60"]
    return sft_model(
        workspace, "teacher_model", workspace.warm_model, workspace.arithmetic / "sft.jsonl", FORMAT, settings
    )


TOOL_CALL = Cell(
    name="workflow: tool_call",
    family="tool use",
    overrides=lambda ws: [
        f"model.model_path={calculator_model(ws)}",
        f"buffer.explorer_input.taskset.path={calculator_tasks(ws) / 'tasks.jsonl'}",
        "buffer.explorer_input.default_workflow_type=tool_call_workflow",
        "model.max_prompt_tokens=512",
        "model.max_response_tokens=80",
        "buffer.batch_size=8",
    ],
    steps=60,
    model="tiny",
    margin=0.15,
    note=(
        "Does not learn yet: after the expert SFT (sft_loss 6.2 -> 0.14, 5.5 min on 2 cores) the model "
        "calls the calculator well-formed in 61 of 64 samples but copies neither the sum into the "
        "expression (1/64) nor the result into its answer (3/64): reward 0.047 at step 1. One explorer "
        "step (8 tasks x 8 runs, ~114 response tokens) took 117 s on the shared 2 cores. Tried 2026-11-28, "
        "not learned by the 2-layer tiny model within a test's budget: (1) a one-letter key copied into a "
        "lookup call and its one-token result copied into the answer: each copy alone learns (a bare echo in "
        "~75 SFT steps, the key in the call in ~250), together they undo each other (key copied 2 of 96 "
        "after 150 + 150 steps); (2) an argument-free tool that reads its task (tools with a task parameter, "
        "a59cd02), so only the result is copied: the copy stayed at chance when the end-of-turn token after "
        "it was trained too (at lr 3e-3: at 1e-3 it is learned, TOOL_USE's note), and one warm-up order (120 "
        "copy-only steps, then 150 mixed) gave 10 of 64 calls and 7 of 10 copies once but not again with "
        "another data draw. TOOL_USE, the secret digit at lr 1e-3 in the SFT and 3e-4 in GRPO, learns."
    ),
    controls={
        "mask on the tool's turns": lambda ws: ["buffer.explorer_input.default_workflow_type=tool_call_env_masked"]
    },
)
"""Tool use: the answer is the calculator's result, which the model must call for and copy."""

SECRET_TOOL = {"type": "function", "function": {"name": "secret", "parameters": {"type": "object", "properties": {}}}}
"""An argument-free tool: it returns its task's secret digit (``secret`` of multi_turn_plugins.py)."""
SECRET_CALL = '<tool_call>{"name": "secret"}</tool_call>'
"""The model's call (Hermes; no ``arguments``: an empty object), 34 tokens with the tiny tokenizer."""
SECRET_QUESTION = "What is the secret?"
SECRET_FORMAT = "{prompt_type: plaintext, prompt_key: question, response_key: answer, system_prompt: null}"
SECRET_TEMPLATE = (
    "{%- if tools %}{{- '<|im_start|>system\\nTools:' }}"
    "{%- for tool in tools %}{{- ' ' + tool.function.name }}{%- endfor %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
"""ChatML that offers tools by name only and shows a tool's result as a ``tool`` turn: a
conversation of call, result and answer is 60 tokens, where the tiny model's own template
(the schemas as JSON, the result in a ``<tool_response>`` block) makes it 130."""


def secret_tasks(workspace: Workspace) -> Path:
    """Under ``multi_turn/secret``: ``tasks.jsonl``, 40 ``tool_call_workflow`` rows (the same
    question, a secret digit each, 4 per digit; the answer is the secret), ``expert.jsonl``, 80 SFT
    conversations, half of them calling the tool and answering with its result, half answering
    with a guess (a digit), and ``chat_template.jinja`` (:data:`SECRET_TEMPLATE`)."""
    out = workspace.root / "multi_turn" / "secret"
    if not (out / "tasks.jsonl").exists():
        rng = random.Random(0)
        tools = json.dumps([SECRET_TOOL])
        tasks = [
            {"question": SECRET_QUESTION, "secret": str(d % 10), "answer": str(d % 10), "tools": tools}
            for d in range(40)
        ]
        rng.shuffle(tasks)
        ask = [{"role": "user", "content": SECRET_QUESTION}]
        expert = []
        for i in range(80):
            d = str(i // 2 % 10)
            if i % 2:  # calls, then answers with the result
                turns = [
                    {"role": "assistant", "content": SECRET_CALL},
                    {"role": "tool", "name": "secret", "content": d},
                    {"role": "assistant", "content": d},
                ]
            else:  # guesses
                turns = [{"role": "assistant", "content": str(rng.randrange(10))}]
            expert.append({"messages": ask + turns, "tools": tools})
        out.mkdir(parents=True, exist_ok=True)
        for name, rows in (("tasks.jsonl", tasks), ("expert.jsonl", expert)):
            (out / name).write_text("".join(json.dumps(row) + "\n" for row in rows))
        (out / "chat_template.jinja").write_text(SECRET_TEMPLATE)
    return out


def secret_model(workspace: Workspace) -> Path:
    """The tiny model SFT'd on the secret conversations, every assistant turn trained: 400 steps
    of 32 at lr 1e-3 (~60 s on 2 cores). It calls in about 45% of samples and copies the result
    with p 0.98; at lr 3e-3 the copy stays at chance (TOOL_USE's note)."""
    data = secret_tasks(workspace)
    settings = [
        f"model.chat_template_path={data / 'chat_template.jinja'}",
        "buffer.train_batch_size=32",
        "buffer.total_steps=400",
        "buffer.total_epochs=1000",
        "algorithm.optimizer.lr=1e-3",
        "model.max_prompt_tokens=128",
    ]
    fmt = "{messages_key: messages, tools_key: tools, enable_concatenated_multi_turn: true}"
    return sft_model(workspace, "secret_model", workspace.tiny_model, data / "expert.jsonl", fmt, settings)


def secret_args(tool: str) -> str:
    """Two model turns at most (call, answer); the schema's ``secret`` runs ``tool`` of multi_turn_plugins.py."""
    return f"buffer.explorer_input.taskset.workflow_args={{max_turns: 2, tool_functions: {{secret: 'multi_turn_plugins:{tool}'}}}}"


TOOL_USE = Cell(
    name="workflow: tool_call (a secret only the tool knows)",
    family="tool use",
    overrides=lambda ws: [
        f"model.model_path={secret_model(ws)}",
        f"model.chat_template_path={secret_tasks(ws) / 'chat_template.jinja'}",
        f"buffer.explorer_input.taskset.path={secret_tasks(ws) / 'tasks.jsonl'}",
        f"buffer.explorer_input.taskset.format={SECRET_FORMAT}",
        secret_args("secret"),
        "buffer.explorer_input.default_workflow_type=tool_call_workflow",
        "model.max_prompt_tokens=96",
        "model.max_response_tokens=40",
        "buffer.batch_size=8",
        "algorithm.optimizer.lr=3e-4",
    ],
    steps=40,
    test_steps=20,
    # by step 12 it had moved +0.125 in one CI-like run (2026-12-05), short of the margin; +0.24 by step 16
    control_steps=16,
    model="tiny",
    margin=0.15,
    note=(
        "The answer is a digit only the tool returns (secret(task), an argument-free tool reading its row). "
        "Warm-up: 400 SFT steps (batch 32, lr 1e-3, every assistant turn trained, ~60 s) on 40 conversations "
        "that call and copy the result and 40 that guess: the model calls in 45% of samples and copies the "
        "result with p 0.98. GRPO, 20 steps of 8 tasks x 8 runs at lr 3e-4: 0.575 -> 0.819 (+0.244) and 0.581 "
        "-> 0.822 (+0.241), and 0.572 -> 0.819 (+0.247) as the learning test; calls 0.45 -> 0.86-0.88, 46-47 "
        "s each on a quiet machine (2026-11-28, 2 cores; the test with its SFT took 400 s under a load of 4). "
        "Controls, 20 steps: "
        "the tool returning a wrong digit 0.028 -> 0.100 (the model stops calling: 0.45 -> 0.00, and guesses); "
        "the mask on the tool's turns 0.519 -> 0.216. At lr 1e-3 (the quickstart's) one update now and then "
        "wipes the copy out (reward 0.72 -> 0.00 in a step with 77% of samples calling; 2 of 4 runs ended at "
        "0), with or without 5 warm-up steps. The SFT's lr matters as much: at 3e-3 the copy stays at chance "
        "(p 0.10 after 200 steps) whenever the end-of-turn token after the copied digit is trained too, at "
        "1e-3 it is learned (0.94 after 150 steps, result copy alone, plain torch): the 'EOT blocks the copy' "
        "of the earlier attempts (TOOL_CALL's note) was the learning rate, not a mask bug."
    ),
    controls={
        "the tool returns a wrong digit": lambda ws: [secret_args("wrong_secret")],
        "mask on the tool's turns": lambda ws: ["buffer.explorer_input.default_workflow_type=tool_call_env_masked"],
    },
)
"""Tool use: the answer is a secret digit only the tool returns; the model must call it and
answer with its result."""


LAKE_ARGS = "{agent_max_steps: 3, env_max_steps: 3}"
"""3 x 3 lakes whose goal is at most 3 moves away, 3 moves an episode (the example's)."""


def lake_tasks(workspace: Workspace) -> Path:
    """16 FrozenLake maps (the example's rows: 3 x 3, p 0.8, seeds 0-15) as ``tasks.jsonl``, and
    ``expert.jsonl``: each map's shortest walk as a conversation (the workflow's system prompt,
    its observations, one ```Move``` a reply), under ``multi_turn/frozen_lake``."""
    from trinity_workflows.envs.frozen_lake import SYSTEM_PROMPT, FrozenLakeEpisode, generate_map, shortest_moves

    out = workspace.root / "multi_turn" / "frozen_lake"
    if not (out / "tasks.jsonl").exists():
        tasks, expert = [], []
        for seed in range(16):
            tasks.append({"size": 3, "p": 0.8, "seed": seed})
            desc = generate_map(3, 0.8, seed, 3)
            episode = FrozenLakeEpisode(desc, is_slippery=False, max_moves=3, seed=seed)
            messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": episode.reset()}]
            for move in shortest_moves(desc):
                reply = f"```{move}```"
                observation, _, done = episode.step(reply)
                messages.append({"role": "assistant", "content": reply})
                if done:
                    break
                messages.append({"role": "user", "content": observation})
            expert.append({"messages": messages})
        out.mkdir(parents=True, exist_ok=True)
        for name, rows in (("tasks.jsonl", tasks), ("expert.jsonl", expert)):
            (out / name).write_text("".join(json.dumps(row) + "\n" for row in rows))
    return out


def lake_model(workspace: Workspace) -> Path:
    """The tiny model SFT'd on the expert walks, every reply trained (100 steps, sft_loss 0.12): it
    answers with a move and reaches the goal in about a third of the episodes, so GRPO's groups
    differ (20 steps, sft_loss 1.7, reached it in none)."""
    expert = lake_tasks(workspace) / "expert.jsonl"
    settings = [
        "buffer.train_batch_size=16",
        "buffer.total_epochs=100",
        "algorithm.optimizer.lr=1e-3",
        "model.max_prompt_tokens=768",
    ]
    fmt = "{messages_key: messages, enable_concatenated_multi_turn: true}"
    return sft_model(workspace, "lake_model", workspace.tiny_model, expert, fmt, settings)


FROZEN_LAKE = Cell(
    name="workflow: frozen_lake_workflow",
    family="multi-turn environment",
    overrides=lambda ws: [
        f"model.model_path={lake_model(ws)}",
        f"buffer.explorer_input.taskset.path={lake_tasks(ws) / 'tasks.jsonl'}",
        f"buffer.explorer_input.taskset.workflow_args={LAKE_ARGS}",
        "buffer.explorer_input.default_workflow_type=frozen_lake_workflow",
        "model.max_prompt_tokens=768",
        "model.max_response_tokens=12",
        "buffer.batch_size=4",
        "algorithm.optimizer.lr=1e-4",
    ],
    steps=60,
    test_steps=40,
    model="tiny",
    margin=0.15,
    note=(
        "After the expert SFT (100 steps on the 16 maps' shortest walks) the model reaches the goal in about a "
        "third of the episodes. 40 GRPO steps of 4 maps x 8 episodes at lr 1e-4 (the example's): 0.31 -> 0.48 in "
        "the 2026-12-03 matrix, 0.37 -> 0.44 (+0.075) in an earlier run of the same config, 0.344 -> 0.244 in the "
        "2026-12-05 one (the engine batches requests as they arrive, so the samples differ run to run; a step's "
        "reward swings 0.03-0.84): the "
        "margin does not hold reliably, so no CI test. At lr 1e-3 (the quickstart's) 0.31 -> 0.00 by step 4 "
        "(replies stop parsing); at 3e-4 with 8 maps a step 0.36 -> 0.38, the policy's entropy rising 0.22 -> 0.55."
    ),
)
"""An environment over several turns: FrozenLake, where only reaching the goal scores."""

CELLS = [STEP_WISE_GRPO, GIGPO, MULTI_TURN, TOOL_USE, TOOL_CALL, FROZEN_LAKE, ON_POLICY_DISTILL, JSD]
