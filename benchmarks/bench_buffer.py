"""Experiences per second written and read by each buffer storage, and the serialisation cost.

Experiences of 1024 tokens (256 prompt + 768 response, with response logprobs), written
and read in batches of 64; ``--rounds`` rounds, the storages interleaved in each, and each
figure is the median (min-max) of the rounds; ``(safe)`` runs with ``buffer.durability: safe``. PostgreSQL rows run against ``--postgres URL``,
or (by default, where Debian's ``postgresql`` is installed) a throwaway local cluster with the
server's default settings (fsync on). Run:
``python benchmarks/bench_buffer.py [--n 6400] [--rounds 3] [--ray] [--postgres URL | --no-postgres]
[--rows sqlite,PostgreSQL]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import torch
from figures import spread  # benchmarks/, the running script's folder

from trinity.buffer import open_experience_reader, open_experience_writer
from trinity.buffer.serialization import deserialize_experience, serialize_experience
from trinity.common.experience import EID, Experience
from trinity.config.schema import ExperienceBufferConfig

PROMPT, RESPONSE, BATCH = 256, 768, 64
REPO = Path(__file__).resolve().parents[1]


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


def cases(tmp: str, postgres: str | None, ray: bool) -> dict[str, dict]:
    """Storage settings by row label; each round gets fresh files and table names."""
    found = {
        "queue (memory)": dict(storage_type="queue"),
        "queue (sqlite)": dict(storage_type="queue", path=os.path.join(tmp, "queue.db")),
        "queue (sqlite, safe)": dict(storage_type="queue", path=os.path.join(tmp, "safe.db"), durability="safe"),
        "sql (sqlite)": dict(storage_type="sql", path=f"sqlite:///{tmp}/sql.db"),
        "queue (jsonl)": dict(storage_type="queue", path=os.path.join(tmp, "queue.jsonl")),
        "file (jsonl)": dict(storage_type="file", path=tmp),
    }
    if postgres:
        found["queue (PostgreSQL)"] = dict(storage_type="queue", path=postgres)
        found["sql (PostgreSQL)"] = dict(storage_type="sql", path=postgres)
    if ray:  # a queue without a path is the actor once Ray runs: last
        found["queue (Ray actor)"] = dict(storage_type="queue")
    return found


def throwaway_postgres(stack: ExitStack) -> str | None:
    """A local cluster for the PostgreSQL rows (``tests/helpers/pg_cluster.py``), or None where none can start."""
    sys.path.insert(0, str(REPO / "tests"))
    from helpers.pg_cluster import missing_reason
    from helpers.pg_cluster import throwaway_postgres as start

    reason = missing_reason()
    if reason:
        print(f"no PostgreSQL rows: {reason}")
        return None
    return stack.enter_context(start()).url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=6400, help="experiences per storage")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, the storages interleaved in each")
    parser.add_argument("--ray", action="store_true", help="also the in-memory queue as a Ray actor")
    parser.add_argument("--postgres", help="a PostgreSQL URL for the PostgreSQL rows (default: a throwaway cluster)")
    parser.add_argument("--no-postgres", action="store_true", help="leave the PostgreSQL rows out")
    parser.add_argument("--rows", help="only the rows whose label has one of these comma-separated words")
    args = parser.parse_args()
    torch.set_num_threads(1)
    data = experiences(args.n)
    figures: dict[str, list[tuple[float, float]]] = {}
    with ExitStack() as stack:
        postgres = None if args.no_postgres else args.postgres or throwaway_postgres(stack)
        for round_ in range(args.rounds):
            tmp = tempfile.mkdtemp(prefix="trinity-bench-")
            for label, fields in cases(tmp, postgres, args.ray).items():
                if args.rows and not any(word in label for word in args.rows.split(",")):
                    continue
                if label.endswith("(Ray actor)") and round_ == 0:
                    import ray

                    ray.init(num_cpus=2, include_dashboard=False, namespace="bench")
                name = f"{label.split()[0]}_bench_{round_}_{os.getpid()}"
                storage = ExperienceBufferConfig(name=name, capacity=10 * args.n, max_read_timeout=10, **fields)
                figures.setdefault(label, []).append(bench_storage(storage, data))
    print(f"{args.n} experiences of {PROMPT}+{RESPONSE} tokens, batches of {BATCH}; median (min-max) of {args.rounds}")
    print(f"{'storage':<20} {'written/s':>22} {'read/s':>22}")
    for label, runs in figures.items():
        print(f"{label:<20} {spread([w for w, _ in runs], ',.0f'):>22} {spread([r for _, r in runs], ',.0f'):>22}")
    to_bytes, from_bytes, size = bench_serialization(data)
    print(
        f"serialisation round trip {to_bytes + from_bytes:.1f} µs ({to_bytes:.1f} + {from_bytes:.1f}), "
        f"{size:,} bytes per experience"
    )


if __name__ == "__main__":
    main()
