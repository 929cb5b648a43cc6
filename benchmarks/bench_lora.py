"""LoRA against full fine-tuning on the torch trainer: step time and memory, per model shape.

    python benchmarks/bench_lora.py [--rounds 3] [--steps 8] [--shapes tiny,wide]

Each measurement is a fresh process (its peak resident memory is its own) that builds the trainer
engine on a locally built model, then times ``--steps`` GRPO updates of one batch (32 rows of 16
prompt + 48 response tokens, micro-batches of 8) after one warm-up step. Full and LoRA (rank 16,
alpha 32, all-linear, as Trinity-RFT's default target) run interleaved, ``--rounds`` times each.
Printed per shape: the median (min-max) step time, peak RSS, the trainable parameters and the
bytes the optimizer holds for them (AdamW: two float32 moments each), and the ratios.

Shapes (Qwen2, the tiny tokenizer): ``tiny`` is the tests' model (hidden 128, 2 layers);
``wide`` hidden 512, 8 layers, MLP 1408 (8 heads, 4 KV heads), 42M parameters with an
embedding of 32,768 rows tied to the head, the proportions of a small production model (on 2
CPU cores a full step of it takes ~10 s).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from figures import spread

SHAPES = {
    "tiny": {},
    "wide": {
        "hidden_size": 512,
        "num_layers": 8,
        "num_heads": 8,
        "num_kv_heads": 4,
        "intermediate_size": 1408,
        "embedding_rows": 32768,
    },
}
LORA = {"name": "lora", "lora_rank": 16, "lora_alpha": 32}


def measure(model_dir: str, lora: bool, steps: int) -> dict:
    """In this process: the engine on ``model_dir``, ``steps`` timed updates; its figures."""
    import torch

    from trinity.common.batch import Batch
    from trinity.common.experience import EID, Experience
    from trinity.config.check import check_algorithm
    from trinity.config.derive import derive_algorithm
    from trinity.config.load import IssueCollector
    from trinity.config.schema import Config, LoRAConfig
    from trinity.plugins import Kind, resolve
    from trinity.training.torch_trainer import TorchTrainingEngine

    config = Config(mode="train")
    config.cluster.node_num, config.cluster.gpu_per_node = 1, 0
    config.model.model_path = model_dir
    config.algorithm.algorithm_type = "grpo"
    config.algorithm.repeat_times = 4
    config.trainer.trainer_type = "torch"
    config.trainer.micro_batch_size_per_gpu = 8
    config.trainer.use_dynamic_bsz = False
    if lora:
        config.model.lora_configs = [LoRAConfig(**LORA)]
    issues = IssueCollector()
    derive_algorithm(config, issues)
    check_algorithm(config, issues)
    issues.raise_if_any()
    engine = TorchTrainingEngine(config)
    gen = torch.Generator().manual_seed(0)
    rows = [
        Experience(
            tokens=torch.randint(3, 500, (64,), generator=gen),
            prompt_length=16,
            reward=float(i % 2),
            eid=EID(batch=0, task=i // 4, run=i % 4),
        )
        for i in range(32)
    ]
    algo = config.algorithm
    advantage = resolve(Kind.ADVANTAGE_FN, algo.advantage_fn)(**(algo.advantage_fn_args or {}))
    batch = advantage(engine.prepare_batch(Batch.from_experiences(rows)))[0]
    engine.train_step(batch)  # warm-up: optimizer state allocated
    times = []
    for _ in range(steps):
        started = time.perf_counter()
        engine.train_step(batch)
        times.append(time.perf_counter() - started)
    trainable = sum(p.numel() for p in engine.actor.parameters() if p.requires_grad)
    optimizer_bytes = sum(
        t.numel() * t.element_size()
        for state in engine.actor_optimizer.state.values()
        for t in state.values()
        if torch.is_tensor(t)
    )
    return {
        "step_s": statistics.median(times),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "trainable": trainable,
        "optimizer_mb": optimizer_bytes / 2**20,
    }


def run(model_dir: Path, lora: bool, steps: int) -> dict:
    code = f"import json, bench_lora; print(json.dumps(bench_lora.measure({str(model_dir)!r}, {lora}, {steps})))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).parent)
    if done.returncode:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--shapes", default="tiny,wide")
    args = parser.parse_args()
    from trinity.testing.tiny_model import build_tiny_model

    with tempfile.TemporaryDirectory() as root:
        for shape in args.shapes.split(","):
            model_dir = build_tiny_model(Path(root) / shape, **SHAPES[shape])
            results: dict[bool, list[dict]] = {False: [], True: []}
            for round_ in range(args.rounds):
                for lora in (False, True):
                    results[lora].append(run(model_dir, lora, args.steps))
                    print(
                        f"{shape} round {round_ + 1}/{args.rounds} {'lora' if lora else 'full'}: {results[lora][-1]}",
                        flush=True,
                    )
            full, lora = results[False], results[True]
            print(f"\n{shape}:")
            for name, rows in (("full", full), ("lora", lora)):
                print(
                    f"  {name}: step {spread([r['step_s'] for r in rows], '.3f')} s, peak RSS "
                    f"{spread([r['peak_rss_mb'] for r in rows], '.0f')} MB, trainable {rows[0]['trainable']:,}, "
                    f"optimizer state {rows[0]['optimizer_mb']:.2f} MB"
                )
            ratios = [b["step_s"] / a["step_s"] for a, b in zip(full, lora, strict=True)]
            print(f"  lora / full step time: {spread(ratios, '.3f')} (pairs of one round)")


if __name__ == "__main__":
    main()
