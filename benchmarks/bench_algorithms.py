"""Time every advantage function and policy loss (forward + backward) on a CPU.

    python benchmarks/bench_algorithms.py [--batch 4096] [--length 1024] [--repeat 5]

Prints ms per call (min and median of ``--repeat`` runs after one warm-up) on a batch of ragged
responses in groups of 8. Targets on a 2-core machine: advantage < 100 ms, loss < 300 ms.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from trinity.common.batch import Batch
from trinity.plugins import Kind, get_registry, resolve


def make_batch(size: int, length: int, seed: int = 0) -> Batch:
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, length + 1, (size,), generator=gen)
    mask = (torch.arange(length)[None, :] < lengths[:, None]).float()
    ids = torch.zeros(size, length + 8, dtype=torch.long)
    old = -torch.rand(size, length, generator=gen) * 2
    return Batch(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        position_ids=torch.zeros_like(ids),
        responses=ids[:, 8:],
        response_mask=mask,
        rewards=torch.randint(0, 2, (size,), generator=gen).float(),
        group_ids=torch.arange(size) // 8,
        model_versions=torch.zeros(size, dtype=torch.long),
        old_logprobs=old,
        ref_logprobs=old + 0.1 * torch.randn(size, length, generator=gen),
        values=torch.randn(size, length, generator=gen),
        advantages=torch.randn(size, length, generator=gen) * mask,
        is_expert=torch.arange(size) % 4 == 0,
        run_ids=torch.arange(size) // 2,
        step_ids=torch.arange(size) % 2,
        reward_baselines=torch.rand(size, generator=gen),
    )


def timed(call: Callable[[], object], repeat: int) -> str:
    """``min / median`` ms over ``repeat`` runs after a warm-up (min is the one to trust on a shared machine)."""
    call()
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        runs.append((time.perf_counter() - start) * 1000)
    return f"{min(runs):8.1f} {statistics.median(runs):8.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4096)
    parser.add_argument("--length", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    batch = make_batch(args.batch, args.length)
    logprobs = batch.old_logprobs + 0.05 * torch.randn_like(batch.old_logprobs)
    print(
        f"{args.batch} responses x {args.length} tokens, torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    print(f"{'kind':<16}{'name':<20}{'min ms':>9}{'median':>9}")
    for name in sorted(get_registry().names(Kind.ADVANTAGE_FN)):
        fn = resolve(Kind.ADVANTAGE_FN, name)()
        print(f"{'advantage_fn':<16}{name:<20}{timed(lambda fn=fn: fn(batch), args.repeat)}")
    for name in sorted(get_registry().names(Kind.POLICY_LOSS_FN)):
        fn = resolve(Kind.POLICY_LOSS_FN, name)()

        def step(fn=fn) -> None:
            leaf = logprobs.clone().requires_grad_(True)
            fn(leaf, batch)[0].backward()

        print(f"{'policy_loss_fn':<16}{name + ' (fwd+bwd)':<20}{timed(step, args.repeat)}")


if __name__ == "__main__":
    main()
