"""Cells of the judged workflows (``math_rm``, ``math_ruler``, ``rubric_judge``), the AgentScope
ReAct agent and the catalogue's other single-turn workflows, on the quickstart's arithmetic.

The judge is a rule-based OpenAI-compatible server on loopback (:func:`judge_url`), reached as
an auxiliary model with ``engine_type: external``: it computes ``a+b`` from the question it is
shown and grades each response with ``math_reward``, so it judges correctly by construction.
The model name the explorer sends picks its verdict: ``judge`` (right), ``inverted_judge`` (1 -
right) or ``random_judge`` (a coin); the last two are the controls, which must not raise the
true accuracy, the metric ``gold_reward`` (the taskset's ``math_reward``), never the reward.
"""

from __future__ import annotations

import json
import random
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from learning_cells import Cell, Measure, Workspace
from single_turn_cells import negated

JUDGE_ENV = "TRINITY_LEARNING_JUDGE_URL"
TRUE_ACCURACY = Measure(key="rollout/gold_reward/mean", label="true accuracy")
_VERDICTS: dict[str, Callable[[float, random.Random], float]] = {
    "judge": lambda right, rng: right,
    "inverted_judge": lambda right, rng: 1.0 - right,
    "random_judge": lambda right, rng: float(rng.random() < 0.5),
}
_QUESTION = re.compile(r"^# Question\n(.*)$", re.MULTILINE)
_CANDIDATE = re.compile(r"(?:^|\n\n)# Candidate solution \d+\n")


def _right(question: str, response: str) -> float:
    """1.0 when ``response`` answers the sum ``question`` ("3+4=") correctly, by ``math_reward``."""
    from trinity_workflows.arithmetic import evaluate
    from trinity_workflows.rewards import math_reward

    value, _ = evaluate(question.strip().rstrip("="))
    return math_reward(response, str(int(value)))["accuracy"]


def judge_reply(model: str, prompt: str, rng: random.Random) -> str:
    """The judge's reply to one prompt of ``rubric_judge_workflow`` (``Score: N`` of 10) or of
    ``math_ruler_workflow`` (a list of scores in [0, 1]), by the verdict named ``model``."""
    verdict = _VERDICTS[model]
    question = _QUESTION.search(prompt).group(1)
    if "# Candidate solution 1\n" in prompt:
        body = prompt[prompt.index("# Candidate solution 1\n") :].rsplit("\n\nReason briefly", 1)[0]
        scores = [verdict(_right(question, r), rng) for r in _CANDIDATE.split(body)[1:]]
        return f"[{', '.join(f'{s:g}' for s in scores)}]"
    response = prompt.split("\n# Response\n", 1)[1].rsplit("\n\nJudge the response by the rubric only.", 1)[0]
    return f"Score: {10 * verdict(_right(question, response), rng):g}"


class _JudgeHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: one connection for a run's thousands of calls
    rng = random.Random(0)

    def do_GET(self) -> None:  # /v1/models: the external engine's start check
        self._send({"object": "list", "data": [{"id": name, "object": "model"} for name in _VERDICTS]})

    def do_POST(self) -> None:  # /v1/chat/completions
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        content = judge_reply(body["model"], body["messages"][-1]["content"], self.rng)
        choice = {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
        self._send({"id": "j", "object": "chat.completion", "created": 0, "model": body["model"], "choices": [choice]})

    def _send(self, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:  # quiet: thousands of calls a run
        pass


_server: ThreadingHTTPServer | None = None


def judge_url() -> str:
    """The base URL of this process's judge server (started on first use, on loopback, on a
    daemon thread: it lives as long as the test session or the benchmark)."""
    global _server
    if _server is None:
        _server = ThreadingHTTPServer(("127.0.0.1", 0), _JudgeHandler)
        threading.Thread(target=_server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{_server.server_port}/v1"


def judged(workflow: str, *extra: str) -> Callable[[Workspace], list[str]]:
    """Overrides: ``workflow`` on the arithmetic, judged by the correct judge (auxiliary model 0)."""

    def overrides(ws: Workspace) -> list[str]:
        judge = "{name: judge, model_path: judge, engine_type: external, "
        judge += f"external_model_config: {{base_url_env: {JUDGE_ENV}, model_name: judge}}}}"
        return [
            f"buffer.explorer_input.default_workflow_type={workflow}",
            f"explorer.auxiliary_models=[{judge}]",
            f"explorer.env_vars.{JUDGE_ENV}={judge_url()}",
            *extra,
        ]

    return overrides


def _verdict(model: str) -> Callable[[Workspace], list[str]]:
    return lambda ws: [f"explorer.auxiliary_models.0.external_model_config.model_name={model}"]


JUDGE_CONTROLS = {"inverted judge": _verdict("inverted_judge"), "random judge": _verdict("random_judge")}


def judge_cell(workflow: str, *extra: str, note: str) -> Cell:
    """``workflow`` judged correctly by construction; the true accuracy must rise by 0.15."""
    return Cell(
        name=f"workflow: {workflow}",
        family="judge",
        overrides=judged(workflow, *extra),
        steps=120,
        test_steps=30,
        control_steps=20,
        margin=0.15,
        measure=TRUE_ACCURACY,
        controls=JUDGE_CONTROLS,
        note=note,
    )


MATH_RM = judge_cell("math_rm_workflow", note="A reward model grades each sample by the math rubric.")
MATH_RULER = judge_cell("math_ruler_workflow", note="RULER: one judge call scores the group of 8 together.")
RUBRIC_JUDGE = judge_cell(
    "rubric_judge_workflow",
    "buffer.explorer_input.taskset.workflow_args.rubric='10 if the response is the correct sum, else 0.'",
    note="A judge with the taskset's own rubric (workflow_args.rubric).",
)

NEGATED = negated("grpo")
"""GRPO's advantages with the wrong sign (plugins/single_turn_plugins.py): must not learn."""

AGENTSCOPE_REACT = Cell(
    name="workflow: agentscope_react_workflow",
    family="agent",
    overrides=lambda ws: [
        "buffer.explorer_input.default_workflow_type=agentscope_react_workflow",
        "buffer.explorer_input.taskset.workflow_args={max_iters: 1, inject_runtime_state: false}",
        "explorer.rollout_model.enable_openai_api=true",
        "explorer.rollout_model.enable_history=true",
        "buffer.batch_size=8",
    ],
    steps=80,
    margin=0.15,
    controls=NEGATED,
    note="An AgentScope ReAct agent (one iteration) answers through the rollout model's OpenAI endpoint; "
    "its recorded call is the experience. 8 tasks a step: each of the 64 agent runs builds two OpenAI "
    "clients (the recording one and AgentScope's own, replaced at once), each loading the CA bundle "
    "(ssl load_verify_locations), about 3x a direct call, too slow for a CI test. "
    "inject_runtime_state false: AgentScope's current-time reminder would make every prompt new and "
    "200 tokens long. Not yet run to completion (a shared machine at load 80 took 100 s a step).",
)
"""An agent framework's calls, recorded through the OpenAI endpoint, are trained on."""

SIMPLE = Cell(
    name="workflow: simple_workflow",
    family="single-turn workflow",
    overrides=lambda ws: ["buffer.explorer_input.default_workflow_type=simple_workflow"],
    steps=120,
    margin=0.15,
    controls=NEGATED,
    note="The taskset's prompt and reward function (math_reward) as they are: here the prompt math_workflow "
    "sends and the same reward, hence grpo's curve at every step (one seed, 2026-12-05).",
)

MATH_EVAL = Cell(
    name="workflow: math_eval_workflow",
    family="single-turn workflow",
    overrides=lambda ws: [
        "explorer.eval_on_startup=true",
        "explorer.eval_interval=10",
        "buffer.explorer_input.eval_tasksets=[{name: arith_eval, storage_type: file, repeat_times: 4, "
        f"path: {ws.arithmetic / 'tasks.jsonl'}, default_workflow_type: math_eval_workflow, "
        "format: {prompt_key: question, response_key: answer, system_prompt: Answer with the sum.}}]",
    ],
    steps=60,
    margin=0.15,
    measure=Measure(key="eval/arith_eval/accuracy/mean@4", window=2, label="eval accuracy"),
    controls=NEGATED,
    note="An eval workflow (no logprobs, nothing to train on): GRPO trains with math_workflow and "
    "math_eval_workflow measures the 25 sums every 10 steps, 4 samples each.",
)


def countdown_sums(ws: Workspace) -> Path:
    """The sums as one-number countdown puzzles (Trinity-RFT's layout: the response column holds
    ``{"numbers", "target"}``): "3+4=" is solved by the equation "7" with numbers [7], target 7."""
    path = ws.root / "judge_agent" / "countdown_sums.jsonl"
    if not path.exists():
        rows = [json.loads(line) for line in (ws.arithmetic / "tasks.jsonl").read_text().splitlines()]
        path.parent.mkdir(parents=True, exist_ok=True)
        puzzles = [{**row, "answer": {"numbers": [int(row["answer"])], "target": int(row["answer"])}} for row in rows]
        path.write_text("".join(json.dumps(puzzle) + "\n" for puzzle in puzzles))
    return path


COUNTDOWN = Cell(
    name="workflow: countdown_workflow",
    family="single-turn workflow",
    overrides=lambda ws: [
        "buffer.explorer_input.default_workflow_type=countdown_workflow",
        "buffer.explorer_input.default_reward_fn_type=countdown_reward",
        f"buffer.explorer_input.taskset.path={countdown_sums(ws)}",
    ],
    steps=120,
    margin=0.15,
    controls=NEGATED,
    note="A degenerate countdown: the one allowed number is the sum itself, so the equation is the "
    "answer (countdown_reward: 0.1 for a well-formed equation, 1 when it also reaches the target). "
    "A real countdown ([3, 4] -> 7, answered '3+4') needs an SFT warm-up on equations the shared "
    "warm model (bare digits) lacks.",
)

CELLS = [MATH_RM, MATH_RULER, RUBRIC_JUDGE, AGENTSCOPE_REACT, SIMPLE, MATH_EVAL, COUNTDOWN]
NOT_CELLS = {
    "math_boxed_workflow": "math_boxed_reward scores only a \\boxed{} answer; the shared warm model "
    "answers bare digits, so all 128 samples score 0 (no advantage). It needs an SFT warm-up on "
    "boxed answers (5 tokens, within max_response_tokens 6); the Workspace builds warm models from "
    "the quickstart's SFT rows only.",
    "sudoku_workflow": "not built yet: the rules and the board are a long prompt for the tiny model, and a "
    "'row col value' move needs an SFT warm-up on solving moves before RL sees a reward above -1 (an invalid "
    "reply ends the episode at -1).",
    "alfworld_workflow, sciworld_workflow, webshop_workflow": "the stand-in environments "
    "(tests/workflows/standin_envs) replay scripted rewards whatever the action, so nothing is "
    "learnable there; the real games are not installed and need far more than 6-token replies.",
    "async_simple_workflow, async_math_workflow, async_math_boxed_workflow, async_math_eval_workflow, "
    "async_math_rm_workflow, async_math_ruler_workflow": "the same classes as the workflows without "
    "async_, whose cells (or reasons) stand for them.",
    "on_policy_distill_math_workflow, rubric_judge_openai_workflow": "on_policy_distill_workflow and "
    "rubric_judge_workflow with another prompt or another road to the judge; their cells stand for the "
    "mechanism.",
    "math_trainable_ruler_workflow": "the policy is its own judge: its unlabelled tasks' rewards are its "
    "own list of scores, which the tiny model never writes without an SFT warm-up on judgements (all "
    "rewards 0 until then).",
    "thinking_budget_workflow, toolcall_workflow": "both are about replies in a format the shared warm "
    "model (bare digits) does not write: an answer after a thinking block, or a <tool_call> JSON list "
    "after one; a cell needs an SFT warm-up on that format first.",
    "agentscope_react_math_workflow, agentscope_v1_react_search_workflow, agentscope_workflow_adapter": "an "
    "AgentScope agent a step, as agentscope_react_workflow, which is too slow on 2 cores to run to "
    "completion yet (its note above); the search agent also needs a judge model.",
    "intercode_sql_workflow, email_search_workflow, bcp_simple_react_workflow": "their first reward needs a "
    "well-formed SQL statement or tool call in the format the shared warm model (bare digits) never writes, "
    "and email/bcp a judge model besides; a cell needs an SFT warm-up on that format first (their tests drive "
    "them with a scripted policy).",
    "RAFT_alfworld_workflow, RAFT_reflect_alfworld_workflow": "they keep only won ALFWorld games as "
    "fine-tuning data, and the ALFWorld stand-in replays scripted rewards whatever the action (as "
    "alfworld_workflow).",
    "learn2ask_workflow": "its reward is a judge model's grading of a medical question; the only judge here "
    "is the tiny model, whose grades are noise.",
}
"""Workflow families without a cell, and why (for the table)."""
