"""Chat throughput through the serve proxy (``mode: serve``) vs straight to the rollout engine's endpoint.

    python benchmarks/bench_serve.py [--model DIR] [--sessions 8] [--turns 3] [--tokens 16] [--rounds 5]

Starts ``trinity run`` in mode serve (examples/agent_serve/serve.yaml, transformers engine,
tiny model unless ``--model``), reads the engine's own endpoint from the proxy's ``/metrics``,
then runs ``--rounds`` interleaved pairs: ``--sessions`` concurrent chat sessions of ``--turns``
turns (each turn the conversation so far plus a follow-up; ``min_tokens = max_tokens =
--tokens`` so both sides generate the same amount) once through the proxy, once direct. Both
sides ask for what an experience needs (token ids and logprobs) at the same temperature; the
proxy also records every response as an experience. Prints completion tokens/s of each side per
round and the median ratio proxy / direct (target >= 0.9); then the hop's own cost: the median
latency of ``--latency`` one-token requests sent one at a time, alternating proxy and direct.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import openai
from omegaconf import OmegaConf

REPO = Path(__file__).resolve().parents[1]
SERVE_CONFIG = REPO / "examples" / "agent_serve" / "serve.yaml"


async def sessions(base_url: str, count: int, turns: int, tokens: int) -> float:
    """Completion tokens per second of ``count`` concurrent sessions against ``base_url``."""
    client = openai.AsyncOpenAI(base_url=base_url, api_key="EMPTY", max_retries=0, timeout=600)
    extra = {"return_token_ids": True, "min_tokens": tokens}

    async def session(index: int) -> int:
        messages, generated = [{"role": "user", "content": f"Count from {index} upwards."}], 0
        for turn in range(turns):
            reply = await client.chat.completions.create(
                model="policy", messages=messages, max_tokens=tokens, temperature=1.0, logprobs=True, extra_body=extra
            )
            generated += reply.usage.completion_tokens
            messages += [
                {"role": "assistant", "content": reply.choices[0].message.content or ""},
                {"role": "user", "content": f"Go on ({turn + 1})."},
            ]
        return generated

    start = time.perf_counter()
    generated = sum(await asyncio.gather(*(session(i) for i in range(count))))
    await client.close()
    return generated / (time.perf_counter() - start)


def hop_latency(proxy: str, engine: str, count: int) -> tuple[float, float]:
    """Median seconds of a one-token chat request through the proxy and direct, alternating."""
    times: dict[str, list[float]] = {proxy: [], engine: []}
    body = {"model": "policy", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}
    body.update(logprobs=True, return_token_ids=True)
    with httpx.Client(timeout=600) as http:
        for i in range(2 * count):
            url = (proxy, engine)[i % 2]
            start = time.perf_counter()
            http.post(f"{url}/chat/completions", json=body).raise_for_status()
            times[url].append(time.perf_counter() - start)
    return statistics.median(times[proxy]), statistics.median(times[engine])


def start_serving(model: Path, workdir: Path, tokens: int, turns: int) -> tuple[subprocess.Popen, str]:
    """``trinity run`` in mode serve on a free port; the process and the proxy's URL once healthy."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = OmegaConf.load(SERVE_CONFIG)
    config.merge_with_dotlist(
        [
            f"checkpoint_root_dir={workdir / 'ckpt'}",
            f"model.model_path={model}",
            f"model.max_response_tokens={tokens}",
            f"model.max_prompt_tokens={64 + 2 * turns * (tokens + 16)}",
            f"explorer.proxy_port={port}",
            "model.temperature=1.0",
        ]
    )
    OmegaConf.save(config, workdir / "serve.yaml")
    log = open(workdir / "serve.log", "w")  # noqa: SIM115 -- the server's lifetime
    process = subprocess.Popen(
        [sys.executable, "-m", "trinity.cli", "run", "--config", str(workdir / "serve.yaml")],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, "RAY_AUTH_MODE": "disabled"},
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 600
    while time.time() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"trinity run exited: see {workdir / 'serve.log'}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return process, url
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise TimeoutError("the proxy did not come up in 10 minutes")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path)
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--latency", type=int, default=40)
    opts = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench_serve_"))
    model = opts.model
    if model is None:
        from trinity.testing.tiny_model import build_tiny_model

        model = build_tiny_model(workdir / "model")
    process, proxy = start_serving(model, workdir, opts.tokens, opts.turns)
    try:
        (engine,) = httpx.get(f"{proxy}/metrics").json()["engine_urls"]
        run = lambda url: asyncio.run(sessions(url, opts.sessions, opts.turns, opts.tokens))  # noqa: E731
        run(engine)  # warm-up
        ratios = []
        for round_ in range(opts.rounds):
            first, second = (f"{proxy}/v1", engine) if round_ % 2 == 0 else (engine, f"{proxy}/v1")
            rates = {first: run(first), second: run(second)}
            via_proxy, direct = rates[f"{proxy}/v1"], rates[engine]
            ratios.append(via_proxy / direct)
            print(f"round {round_ + 1}: proxy {via_proxy:.1f} tok/s, direct {direct:.1f} tok/s, ratio {ratios[-1]:.3f}")
        recorded = httpx.get(f"{proxy}/metrics").json()["recorded_experiences"]
        print(
            f"sessions {opts.sessions} x {opts.turns} turns x {opts.tokens} tokens; proxy recorded {recorded} "
            f"experiences; ratio proxy / direct: median {statistics.median(ratios):.3f} "
            f"(min {min(ratios):.3f}, max {max(ratios):.3f}), target >= 0.9"
        )
        via_proxy, direct = hop_latency(f"{proxy}/v1", engine, opts.latency)
        print(
            f"one-token request, median of {opts.latency}: proxy {1000 * via_proxy:.1f} ms, direct "
            f"{1000 * direct:.1f} ms, the hop {1000 * (via_proxy - direct):.1f} ms"
        )
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=60)


if __name__ == "__main__":
    main()
