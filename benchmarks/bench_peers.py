"""trinity against the peer a user would pick instead: TRL's ``GRPOTrainer`` (or, with
``--algorithm rloo``, its ``RLOOTrainer`` against trinity's ``rloo``), on identical settings,
whole processes, runs interleaved.

    python benchmarks/bench_peers.py [quickstart|vocab|all] [--pairs N] [--steps N] [--algorithm rloo]

TRL is installed pinned (``TRL``) in a bench-only environment, ``benchmarks/out/peers-venv``
(``python -m venv --system-site-packages``: the same torch and transformers as trinity's side);
it is a dependency of no package. Both sides start from the same model, take the same prompts
(the quickstart's 25 sums through the chat template with its system prompt), sample at
temperature 1, train with a constant learning rate and no KL term, and are timed from the
process's start to its exit. For each run the bench prints: wall time, steps/s over the steps,
time to the reward threshold (the first 10-step mean >= 0.9), the reward of the last tenth of
the steps, peak memory (the summed RSS of the process tree, sampled every 0.2 s), and the
time before the first step and after the last (start-up and shut-down).

- quickstart: the quickstart's GRPO stage as shipped (16 prompts x 8 samples, at most 6 new
  tokens, lr 1e-3, 200 steps, weights synced after every step), from the model its SFT stage
  leaves (run once here, first). TRL's reward is exact match on the stripped completion (cheaper
  than trinity's ``math_reward``).
- vocab: a step where the per-token costs dominate: the tiny model's body with Qwen2.5's
  151,936-row tied embedding and head, 4 prompts x 4 samples of exactly 64 new tokens, lr 1e-5,
  each sample's reward random on both sides (``UNIFORM_REWARD``: every row trains). Prints each
  side's generation and training seconds per step: trinity's from its roles' timers, TRL's from
  timing its model's ``generate`` inside its steps.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

from figures import spread  # benchmarks/, the running script's folder
from omegaconf import OmegaConf

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests" / "e2e"), str(REPO / "tests")]
from e2e_helpers import QUICKSTART, write_experiment  # noqa: E402

TRL = "trl==1.16.0"
VENV = REPO / "benchmarks" / "out" / "peers-venv"
THRESHOLD, WINDOW = 0.9, 10
TRL_SIDES = {"grpo": "TRL GRPOTrainer", "rloo": "TRL RLOOTrainer"}
"""TRL's trainer for each ``--algorithm``; trinity runs its algorithm type of the same name."""

TRL_SCRIPT = textwrap.dedent(
    """
    import json, random, sys, time
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer, RLOOConfig, RLOOTrainer

    settings = json.loads(sys.argv[1])
    torch.manual_seed(settings["seed"])
    rows = [json.loads(line) for line in open(settings["tasks"])]
    system = settings["system_prompt"]
    dataset = Dataset.from_list(
        [{"prompt": [{"role": "system", "content": system}, {"role": "user", "content": r["question"]}],
          "answer": r["answer"]} for r in rows]
    )
    tokenizer = AutoTokenizer.from_pretrained(settings["model"])
    model = AutoModelForCausalLM.from_pretrained(settings["model"], dtype=torch.float32)
    generating = [0.0]
    generate = model.generate

    def timed_generate(*args, **kwargs):
        start = time.perf_counter()
        try:
            return generate(*args, **kwargs)
        finally:
            generating[0] += time.perf_counter() - start

    model.generate = timed_generate

    def exact_match(completions, answer, **kwargs):
        return [float(c[0]["content"].strip() == a) for c, a in zip(completions, answer)]

    def uniform(completions, **kwargs):
        return [random.random() for _ in completions]

    class Record(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            self.began, generating[0] = time.time(), 0.0

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "reward" in logs:
                line = {"step": state.global_step, "timestamp": time.time(), "reward": logs["reward"],
                        "step_seconds": time.time() - self.began, "generate_seconds": generating[0]}
                print("STEP " + json.dumps(line), flush=True)

    Config, Trainer = {"grpo": (GRPOConfig, GRPOTrainer), "rloo": (RLOOConfig, RLOOTrainer)}[settings["algorithm"]]
    config = Config(
        output_dir=settings["out"], per_device_train_batch_size=settings["prompts"] * settings["samples"],
        num_generations=settings["samples"], max_completion_length=settings["tokens"],
        temperature=1.0, learning_rate=settings["lr"], lr_scheduler_type="constant_with_warmup",
        warmup_steps=settings["warmup"],
        beta=0.0, max_steps=settings["steps"], logging_steps=1, report_to=[], save_strategy="no",
        use_cpu=True, seed=settings["seed"], disable_tqdm=True,
        generation_kwargs={"min_new_tokens": settings["min_tokens"]} if settings["min_tokens"] else None,
    )
    reward = {"exact_match": exact_match, "uniform": uniform}[settings["reward"]]
    trainer = Trainer(model=model, processing_class=tokenizer, reward_funcs=reward,
                          args=config, train_dataset=dataset, callbacks=[Record()])
    trainer.train()
    """
)


def peers_python() -> Path:
    """The bench-only environment's Python, with ``TRL`` installed (made on first use)."""
    python = VENV / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(VENV)], check=True)
    probe = subprocess.run([str(python), "-c", "import trl; print(trl.__version__)"], capture_output=True, text=True)
    if probe.stdout.strip() != TRL.split("==")[1]:
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", TRL], check=True)
    return python


def tree_rss(pid: int) -> int:
    """Bytes resident in ``pid`` and its descendants."""
    import psutil

    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for process in processes:
        try:
            total += process.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


def timed_process(command: list[str], cwd: Path, log: Path) -> tuple[float, float, float, str]:
    """Run ``command`` to its end: (start, end, peak tree RSS in bytes, its output)."""
    peak, done = [0], threading.Event()
    start = time.time()
    with log.open("w") as sink:
        process = subprocess.Popen(command, cwd=cwd, stdout=sink, stderr=subprocess.STDOUT, text=True)

        def sample() -> None:
            while not done.wait(0.2):
                peak[0] = max(peak[0], tree_rss(process.pid))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        code = process.wait()
        end = time.time()
        done.set()
        sampler.join()
    output = log.read_text()
    if code:
        sys.exit(f"{command[:4]} failed ({code}):\n{output[-4000:]}")
    return start, end, peak[0], output


def summary(side: str, start: float, end: float, peak: int, steps: list[dict]) -> dict:
    """The figures of one run from its per-step records (``timestamp``, ``reward``, seconds)."""
    rewards = [step["reward"] for step in steps]
    stamps = [step["timestamp"] for step in steps]
    first_step_began = steps[0]["began"]
    reached = next(
        (
            stamps[i] - start
            for i in range(WINDOW - 1, len(rewards))
            if sum(rewards[i - WINDOW + 1 : i + 1]) / WINDOW >= THRESHOLD
        ),
        None,
    )
    tenth = max(1, len(rewards) // 10)
    return {
        "side": side,
        "wall": end - start,
        "steps_per_s": (len(steps) - 1) / (stamps[-1] - stamps[0]) if len(steps) > 1 else float("nan"),
        "to_threshold": reached,
        "final_reward": sum(rewards[-tenth:]) / tenth,
        "peak_gb": peak / 2**30,
        "startup": first_step_began - start,
        "shutdown": end - stamps[-1],
        "generate": statistics.median(step["generate_seconds"] for step in steps[1:]),
        "train": statistics.median(step["train_seconds"] for step in steps[1:]),
        "curve": [[stamp - start, reward] for stamp, reward in zip(stamps, rewards, strict=True)],
    }


def run_trl(python: Path, root: Path, settings: dict, tag: str) -> dict:
    script = root / "trl_grpo.py"
    script.write_text(TRL_SCRIPT)
    settings = {**settings, "out": str(root / f"trl-{tag}")}
    start, end, peak, output = timed_process(
        [str(python), str(script), json.dumps(settings)], root, root / f"trl-{tag}.log"
    )
    steps = [json.loads(line[5:]) for line in output.splitlines() if line.startswith("STEP ")]
    for step in steps:
        step["train_seconds"] = step["step_seconds"] - step["generate_seconds"]
        step["began"] = step["timestamp"] - step["step_seconds"]
    return summary(TRL_SIDES[settings["algorithm"]], start, end, peak, steps)


def run_trinity(root: Path, config: Path, tag: str) -> dict:
    command = [sys.executable, "-m", "trinity.cli", "run", "--config", str(config)]
    start, end, peak, _ = timed_process(command, config.parent, root / f"trinity-{tag}.log")
    from trinity.monitor.console import read_jsonl

    name = OmegaConf.load(config).name
    monitor = config.parent / "ckpt" / "quickstart" / name / "monitor"
    explorer, trainer = read_jsonl(monitor / "explorer.jsonl"), read_jsonl(monitor / "trainer.jsonl")
    steps = [  # a step: from the explorer's rollout to the trainer's update on it
        {
            "began": explored["timestamp"] - explored["time/explore_step"],
            "timestamp": trained["timestamp"],
            "reward": explored["rollout/reward/mean"],
            "generate_seconds": explored["time/explore_step"],
            "train_seconds": trained["time/train_step"],
        }
        for explored, trained in zip(explorer, trainer, strict=True)
    ]
    return summary("trinity run", start, end, peak, steps)


def warm_model(root: Path) -> tuple[Path, Path]:
    """The quickstart's tiny model after its SFT stage (run here once), and its data."""
    from trinity.testing.tiny_model import build_tiny_model

    data, warm = root / "data", root / "sft" / "ckpt" / "quickstart" / "sft" / "sft_warmup" / "global_step_60"
    if not (warm / "actor" / "huggingface" / "config.json").exists():
        subprocess.run([sys.executable, str(QUICKSTART / "make_data.py"), str(data)], check=True, capture_output=True)
        model = build_tiny_model(root / "model")
        config = write_experiment(root / "sft", model, data, "name=sft", stages=True)
        stages = OmegaConf.load(config)
        stages.stages = stages.stages[:1]
        OmegaConf.save(stages, config)
        subprocess.run(
            [sys.executable, "-m", "trinity.cli", "run", "--config", str(config)],
            check=True,
            capture_output=True,
            cwd=config.parent,
        )
    return warm / "actor" / "huggingface", data


def shipped_warmup() -> int:
    """The quickstart's lr warm-up steps (both sides warm up linearly from 0)."""
    return max(0, OmegaConf.load(QUICKSTART / "quickstart.yaml").algorithm.optimizer.get("lr_warmup_steps", 0))


def quickstart_settings(model: Path, data: Path, steps: int, algorithm: str) -> dict:
    shipped = OmegaConf.load(QUICKSTART / "quickstart.yaml")
    return {
        "model": str(model),
        "tasks": str(data / "tasks.jsonl"),
        "system_prompt": shipped.buffer.explorer_input.taskset.format.system_prompt,
        "prompts": shipped.buffer.batch_size,
        "samples": shipped.algorithm.repeat_times,
        "tokens": shipped.model.max_response_tokens,
        "min_tokens": 0,
        "lr": float(shipped.algorithm.optimizer.lr),
        "warmup": shipped_warmup(),
        "steps": steps,
        "seed": 0,
        "algorithm": algorithm,
        "reward": "exact_match",
    }


def print_row(result: dict) -> None:
    threshold = "never" if result["to_threshold"] is None else f"{result['to_threshold']:.1f} s"
    split = ""
    if result["generate"]:
        split = f", generate {result['generate']:.3f} s, train {result['train']:.3f} s a step (medians)"
    print(
        f"  {result['side']:16s} wall {result['wall']:6.1f} s, {result['steps_per_s']:.2f} steps/s, "
        f"to {THRESHOLD} {threshold}, final reward {result['final_reward']:.3f}, peak {result['peak_gb']:.2f} GB, "
        f"start-up {result['startup']:.1f} s + shut-down {result['shutdown']:.1f} s{split}",
        flush=True,
    )


def compare(name: str, pairs: int, trinity_config, trl_settings: dict, python: Path, root: Path) -> None:
    """``pairs`` interleaved runs of each side (the order alternating), then the medians' ratios."""
    peer = TRL_SIDES[trl_settings["algorithm"]]
    results: dict[str, list[dict]] = {"trinity run": [], peer: []}
    for pair in range(pairs):
        order = ["trinity", "trl"] if pair % 2 == 0 else ["trl", "trinity"]
        for side in order:
            if side == "trl":
                result = run_trl(python, root, trl_settings, f"{name}{pair}")
            else:
                result = run_trinity(root, trinity_config(f"{name}{pair}"), f"{name}{pair}")
            results[result["side"]].append(result)
            print_row(result)
    ours, theirs = results["trinity run"], results[peer]
    ratios = [a["wall"] / b["wall"] for a, b in zip(ours, theirs, strict=True)]
    print(f"{name}: trinity / TRL whole-process time {spread(ratios, '.3f')} over {pairs} pairs", flush=True)
    edges = [a["startup"] + a["shutdown"] for a in ours]
    print(f"{name}: trinity start-up + shut-down {spread(edges, '.1f')} s (target <= 5 s)", flush=True)
    if name.startswith("vocab"):
        train = [a["train"] / b["train"] for a, b in zip(ours, theirs, strict=True)]
        explore = [a["generate"] / b["generate"] for a, b in zip(ours, theirs, strict=True)]
        print(f"{name}: training step trinity / TRL {spread(train, '.3f')} (target <= 1.1)", flush=True)
        print(f"{name}: exploring step / TRL's generation {spread(explore, '.3f')} (target <= 1.05)", flush=True)
    record = REPO / "benchmarks" / "out" / f"peers-{name}.json"
    record.write_text(json.dumps(results, indent=1))
    plot(name, results, REPO / "benchmarks" / "out" / f"peers-{name}.png")


def plot(name: str, results: dict[str, list[dict]], path: Path) -> None:
    """Each run's reward (a trailing mean over ``WINDOW`` steps) against seconds since its
    process started: where a curve begins is start-up, where it ends is the last step."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7, 3.6), layout="constrained")
    axes = figure.subplots()
    for (side, runs), color in zip(results.items(), ("tab:blue", "tab:orange"), strict=True):
        for index, run in enumerate(runs):
            seconds, rewards = zip(*run["curve"], strict=True)
            smooth = [sum(rewards[max(0, i - WINDOW + 1) : i + 1]) / min(i + 1, WINDOW) for i in range(len(rewards))]
            axes.plot(seconds, smooth, color=color, alpha=0.7, label=side if index == 0 else None)
            axes.axvline(run["wall"], color=color, alpha=0.3, linestyle=":")
    axes.set(title=f"{name}: reward against wall time (dotted: process exit)", xlabel="seconds", ylabel="reward")
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    figure.savefig(path, dpi=100)
    print(f"{name}: plot {path}", flush=True)


def workload_name(workload: str, algorithm: str) -> str:
    """The name of a workload's figures and files: ``quickstart``, or ``quickstart-rloo``."""
    return workload if algorithm == "grpo" else f"{workload}-{algorithm}"


def trinity_configs(root: Path, model: Path, data: Path, steps: int, algorithm: str, *changes: str):
    """``config(name)``: the quickstart's experiment for one trinity run of the bench, ``changes``
    over it; no checkpoints but the last."""

    warmup = shipped_warmup()  # write_experiment leaves it out, as for a test's few steps
    single = OmegaConf.load(QUICKSTART / "quickstart.yaml").cluster.single_process  # write_experiment pins Ray

    def config(name: str) -> Path:
        run = (
            f"name={name}",
            f"buffer.total_steps={steps}",
            f"algorithm.algorithm_type={algorithm}",
            f"algorithm.optimizer.lr_warmup_steps={warmup}",
            f"cluster.single_process={single}",
        )
        return write_experiment(root / name, model, data, *run, "trainer.save_interval=0", *changes)

    return config


def quickstart(root: Path, pairs: int, steps: int, python: Path, algorithm: str) -> None:
    model, data = warm_model(root)
    config = trinity_configs(root, model, data, steps, algorithm)
    settings = quickstart_settings(model, data, steps, algorithm)
    compare(workload_name("quickstart", algorithm), pairs, config, settings, python, root)


VOCAB = {"prompts": 4, "samples": 4, "tokens": 64, "lr": 1e-5, "rows": 151_936}
UNIFORM_REWARD = """
import random

from trinity.plugin_api import hookimpl


def uniform(response, truth=None, prompt=None):
    return {"uniform": random.random()}


@hookimpl
def trinity_register_reward_fns(register):
    register("uniform_reward", uniform)
"""
"""The vocab workload's reward on trinity's side, as TRL's ``uniform``: a sample's reward is
random, so that no group's samples score alike (trinity runs such a group's rows forward only)
and both sides train on every row. The untrained model's text is nearly empty (its tokens lie
past the tokenizer's 512), so a reward on the text would be equal within every group."""


def vocab(root: Path, pairs: int, steps: int, python: Path, algorithm: str) -> None:
    from trinity.testing.tiny_model import build_tiny_model

    model = build_tiny_model(root / "vocab_model", embedding_rows=VOCAB["rows"])
    _, data = warm_model(root)
    settings = quickstart_settings(model, data, steps, algorithm) | {
        key: VOCAB[key] for key in ("prompts", "samples", "tokens", "lr")
    }
    settings["min_tokens"], settings["reward"] = VOCAB["tokens"], "uniform"
    plugins = root / "vocab_plugins"
    plugins.mkdir(parents=True, exist_ok=True)
    (plugins / "uniform_reward.py").write_text(UNIFORM_REWARD)
    os.environ["TRINITY_PLUGIN_DIRS"] = str(plugins)

    config = trinity_configs(
        root,
        model,
        data,
        steps,
        algorithm,
        f"buffer.batch_size={VOCAB['prompts']}",
        f"algorithm.repeat_times={VOCAB['samples']}",
        f"model.max_response_tokens={VOCAB['tokens']}",
        f"model.min_response_tokens={VOCAB['tokens']}",
        f"algorithm.optimizer.lr={VOCAB['lr']}",
        f"trainer.micro_batch_size_per_gpu={VOCAB['prompts'] * VOCAB['samples']}",
        "buffer.explorer_input.default_reward_fn_type=uniform_reward",
    )

    compare(workload_name("vocab", algorithm), pairs, config, settings, python, root)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workload", nargs="?", default="all", choices=["quickstart", "vocab", "all"])
    parser.add_argument("--pairs", type=int, default=3, help="interleaved runs of each side")
    parser.add_argument("--steps", type=int, default=None, help="steps a run (quickstart 200, vocab 12)")
    parser.add_argument(
        "--algorithm", choices=sorted(TRL_SIDES), default="grpo", help="TRL's trainer and trinity's type"
    )
    arguments = parser.parse_args()
    python = peers_python()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    with tempfile.TemporaryDirectory(prefix="bench_peers_") as scratch:
        root = Path(scratch)
        if arguments.workload in ("quickstart", "all"):
            quickstart(root, arguments.pairs, arguments.steps or 200, python, arguments.algorithm)
        if arguments.workload in ("vocab", "all"):
            vocab(root, arguments.pairs, arguments.steps or 12, python, arguments.algorithm)


if __name__ == "__main__":
    main()
