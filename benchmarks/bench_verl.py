"""Training throughput of the verl engine against the torch reference engine, same batch.

    python benchmarks/bench_verl.py [--rows 64] [--prompt 32] [--response 96] [--repeat 5] [--hidden 128]

Builds the tiny model locally, then times ``train_step`` (a GRPO update with a KL loss against
the reference model) and ``compute_logprobs`` of both engines on one batch, after a warm-up.
Prints tokens/s (attended tokens of the batch / seconds; min-time and median-time figures) and
the ratio verl / torch. Needs verl installed (``pip install 'trinity-verl[engine]'``); on a
machine without CUDA the verl engine runs on the CPU (FSDP2, gloo, world size 1).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable

import torch

from trinity.common.batch import Batch
from trinity.common.experience import EID, Experience
from trinity.config.check import check_algorithm
from trinity.config.derive import derive_algorithm
from trinity.config.load import IssueCollector
from trinity.config.schema import Config
from trinity.testing.tiny_model import build_tiny_model
from trinity.training.torch_trainer import TorchTrainingEngine


def make_batch(rows: int, prompt: int, response: int, seed: int = 0) -> Batch:
    """``rows`` samples in groups of 8; prompts and responses of random lengths up to the limits."""
    gen = torch.Generator().manual_seed(seed)
    experiences = []
    for i in range(rows):
        p = torch.randint(3, 500, (int(torch.randint(prompt // 2, prompt + 1, (1,), generator=gen)),), generator=gen)
        r = torch.randint(3, 500, (int(torch.randint(1, response + 1, (1,), generator=gen)),), generator=gen)
        experiences.append(
            Experience(tokens=torch.cat([p, r]), prompt_length=len(p), reward=float(i % 2), eid=EID(task=i // 8, run=i))
        )
    batch = Batch.from_experiences(experiences)
    return batch.with_fields(advantages=torch.randn(batch.responses.shape, generator=gen) * batch.response_mask)


def make_config(model_dir: str, engine: str, micro_batch: int) -> Config:
    config = Config(mode="train")
    config.cluster.gpu_per_node = 1  # one device, as the torch engine
    config.model.model_path = model_dir
    config.algorithm.algorithm_type = "grpo"
    config.algorithm.kl_loss_fn = "low_var_kl"
    config.trainer.trainer_type = engine
    config.trainer.use_dynamic_bsz = False
    config.trainer.micro_batch_size_per_gpu = micro_batch
    issues = IssueCollector()
    derive_algorithm(config, issues)
    check_algorithm(config, issues)
    issues.raise_if_any()
    return config


def seconds(call: Callable[[], object], repeat: int) -> list[float]:
    call()
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        runs.append(time.perf_counter() - start)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--response", type=int, default=96)
    parser.add_argument("--micro-batch", type=int, default=16)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    from trinity_verl.engine import VerlTrainingEngine

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = str(build_tiny_model(tmp, hidden_size=args.hidden))
        batch = make_batch(args.rows, args.prompt, args.response)
        tokens = int(batch.attention_mask.sum())
        engines = {
            "torch": TorchTrainingEngine(make_config(model_dir, "torch", args.micro_batch)),
            "verl": VerlTrainingEngine(make_config(model_dir, "verl", args.micro_batch)),
        }
        print(f"batch: {args.rows} rows, {tokens} tokens; device: {'cuda' if torch.cuda.is_available() else 'cpu'}")
        print(f"{'engine':8} {'call':16} {'tokens/s (min time)':>20} {'tokens/s (median)':>18}")
        results: dict[tuple[str, str], float] = {}
        for name, engine in engines.items():
            prepared = engine.prepare_batch(batch)
            calls = {"train_step": lambda e=engine, b=prepared: e.train_step(b)}
            calls["compute_logprobs"] = lambda e=engine: e.compute_logprobs(batch)
            for call_name, call in calls.items():
                runs = seconds(call, args.repeat)
                results[name, call_name] = tokens / min(runs)
                print(f"{name:8} {call_name:16} {tokens / min(runs):20.0f} {tokens / statistics.median(runs):18.0f}")
        for call_name in ("train_step", "compute_logprobs"):
            ratio = results["verl", call_name] / results["torch", call_name]
            print(f"verl / torch {call_name}: {ratio:.2f}")


if __name__ == "__main__":
    main()
