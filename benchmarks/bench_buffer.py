"""Experiences per second written and read by each buffer storage, and the serialisation cost.

Experiences of 1024 tokens (256 prompt + 768 response, with response logprobs), written
and read in batches of 64 (one transaction each), each storage ``--rounds`` times, rounds
interleaved; the median is printed. ``(safe)`` rows run with ``buffer.durability: safe``.
Run: ``python benchmarks/bench_buffer.py [--n 6400] [--rounds 3] [--ray]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import torch

from trinity.buffer import open_experience_reader, open_experience_writer
from trinity.buffer.serialization import deserialize_experience, serialize_experience
from trinity.common.experience import EID, Experience
from trinity.config.schema import ExperienceBufferConfig

PROMPT, RESPONSE, BATCH = 256, 768, 64


def experiences(n: int) -> list[Experience]:
    generator = torch.Generator().manual_seed(0)
    return [
        Experience(
            tokens=torch.randint(0, 150_000, (PROMPT + RESPONSE,), generator=generator),
            prompt_length=PROMPT,
            logprobs=-torch.rand(RESPONSE, generator=generator),
            reward=float(i % 2),
            eid=EID(batch=str(i // BATCH), task=str(i // 8), run=i % 8),
            model_version=i // BATCH,
        )
        for i in range(n)
    ]


def bench_storage(storage: ExperienceBufferConfig, data: list[Experience]) -> tuple[float, float]:
    writer = open_experience_writer(storage, "bench")
    reader = open_experience_reader(storage, "bench")
    started = time.perf_counter()
    for i in range(0, len(data), BATCH):
        writer.write(data[i : i + BATCH])
    written = len(data) / (time.perf_counter() - started)
    writer.finish()
    started, got = time.perf_counter(), 0
    while got < len(data):
        got += len(reader.read(BATCH, timeout=10))
    read = got / (time.perf_counter() - started)
    return written, read


def bench_serialization(data: list[Experience], repeats: int = 3) -> tuple[float, float, int]:
    """Microseconds to serialise and to deserialise one experience (best of ``repeats``), and its size."""
    sample = data[:1000]
    best = (float("inf"), float("inf"))
    for _ in range(repeats):
        started = time.perf_counter()
        blobs = [serialize_experience(exp) for exp in sample]
        serialised = time.perf_counter()
        for blob in blobs:
            deserialize_experience(blob)
        done = time.perf_counter()
        best = min(best, (serialised - started, done - serialised), key=sum)
    per = 1e6 / len(sample)
    return best[0] * per, best[1] * per, sum(map(len, blobs)) // len(blobs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=6400, help="experiences per storage")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per storage (median printed)")
    parser.add_argument("--ray", action="store_true", help="also the in-memory queue as a Ray actor")
    args = parser.parse_args()
    torch.set_num_threads(1)
    data = experiences(args.n)
    tmp = tempfile.mkdtemp(prefix="trinity-bench-")
    cases = {
        "queue (memory)": dict(storage_type="queue"),
        "queue (sqlite)": dict(storage_type="queue", path=os.path.join(tmp, "queue.db")),
        "queue (sqlite, safe)": dict(storage_type="queue", path=os.path.join(tmp, "safe.db"), durability="safe"),
        "sql (sqlite)": dict(storage_type="sql", path=f"sqlite:///{tmp}/sql.db"),
        "queue (jsonl)": dict(storage_type="queue", path=os.path.join(tmp, "queue.jsonl")),
        "file (jsonl)": dict(storage_type="file", path=tmp),
    }
    if args.ray:
        cases["queue (Ray actor)"] = dict(storage_type="queue", name="bench_ray")
    print(f"{args.n} experiences of {PROMPT}+{RESPONSE} tokens, batches of {BATCH}, median of {args.rounds} rounds")
    print(f"{'storage':<22} {'written/s':>10} {'read/s':>10}")
    figures: dict[str, list[tuple[float, float]]] = {label: [] for label in cases}
    for round_ in range(args.rounds):
        for label, fields in cases.items():
            if label.endswith("(Ray actor)") and round_ == 0:  # a queue without a path uses the actor once Ray runs
                import ray

                ray.init(num_cpus=2, include_dashboard=False, namespace="bench")
            fields = dict(fields)
            name = f"{fields.pop('name', label.split()[0] + '_bench')}_{round_}"
            storage = ExperienceBufferConfig(name=name, capacity=10 * args.n, max_read_timeout=10, **fields)
            figures[label].append(bench_storage(storage, data))
    for label, runs in figures.items():
        written, read = (statistics.median(run[i] for run in runs) for i in (0, 1))
        print(f"{label:<22} {written:>10,.0f} {read:>10,.0f}")
    to_bytes, from_bytes, size = bench_serialization(data)
    print(
        f"serialisation round trip {to_bytes + from_bytes:.1f} µs ({to_bytes:.1f} + {from_bytes:.1f}), "
        f"{size:,} bytes per experience"
    )


if __name__ == "__main__":
    main()
