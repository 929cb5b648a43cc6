"""How ``EngineClient`` merges concurrent workflows' requests into batched engine calls,
on the reference engine with the tiny model."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from trinity.config.schema import InferenceModelConfig, ModelConfig
from trinity.model.engines import SamplingArgs
from trinity.rollout.client import _FIRST_CALL_SECONDS, EngineClient
from trinity.rollout.model_wrapper import ModelWrapper
from trinity.rollout.transformers_rollout import TransformersRolloutEngine

ARGS = SamplingArgs(n=1, max_tokens=4)
LATE = 0.01
"""A late caller's delay: far beyond the batcher's settle time, within its patience for
announced callers."""


class RecordingEngine(TransformersRolloutEngine):
    """The reference engine, noting how many prompts each engine call got."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.calls: list[int] = []

    def generate_from_ids(self, prompts, args):
        self.calls.append(len(prompts))
        return super().generate_from_ids(prompts, args)


@pytest.fixture
def client(tiny_model_dir: Path):
    path = str(tiny_model_dir)
    client = EngineClient(RecordingEngine(InferenceModelConfig(model_path=path), ModelConfig(model_path=path)))
    yield client
    client.close()


def ask(model: ModelWrapper, delay: float = 0.0) -> threading.Thread:
    """A workflow's thread that calls ``model.generate`` after ``delay`` seconds."""

    def run() -> None:
        time.sleep(delay)
        model.generate("1+1=")

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_a_started_workflow_that_calls_late_still_joins_the_batch(client: EngineClient) -> None:
    models = [ModelWrapper(client, ARGS) for _ in range(4)]
    for model in models:
        model.__enter__()  # as the task runner does when the workflows start
    threads = [ask(model, delay=LATE if i == 3 else 0.0) for i, model in enumerate(models)]
    for thread in threads:
        thread.join(timeout=60)
    assert client.engine.calls == [4]


def test_without_announcing_a_late_request_gets_a_call_of_its_own(client: EngineClient) -> None:
    async def together() -> list:
        """Three requests queued in one turn of the client's loop: three ``submit`` calls from
        this thread may lie further apart than the batcher's settle time on a loaded machine
        (CI once saw [1, 3])."""
        return await asyncio.gather(*(client.request("generate", ["1+1="], ARGS) for _ in range(3)))

    early = asyncio.run_coroutine_threadsafe(together(), client._loop)
    time.sleep(LATE)
    late = client.submit("generate", ["1+1="], ARGS)
    assert [len(result[0]) for result in [*early.result(timeout=60), late.result(timeout=60)]] == [1] * 4
    assert client.engine.calls == [3, 1]


def test_a_caller_that_never_calls_holds_each_batch_for_the_patience_only(client: EngineClient) -> None:
    calls = 20
    silent, asking = ModelWrapper(client, ARGS), ModelWrapper(client, ARGS)
    with silent, asking:
        started = time.perf_counter()
        for _ in range(calls):
            assert len(asking.generate("1+1=")) == 1
        held = time.perf_counter() - started
    assert client.engine.calls == [1] * calls
    assert held >= calls * _FIRST_CALL_SECONDS  # the patience per batch, and then the batch goes


def two_requests_30_ms_apart(client: EngineClient) -> None:
    first = client.submit("generate", ["1+1="], ARGS)
    time.sleep(0.03)  # within the batcher's patience for an announced caller
    second = client.submit("generate", ["2+2="], ARGS)
    for future in (first, second):
        assert len(future.result(timeout=60)[0]) == 1


def test_a_workflow_that_ended_is_no_longer_waited_for(client: EngineClient) -> None:
    with ModelWrapper(client, ARGS):
        two_requests_30_ms_apart(client)  # still running: the first request waits for it
    assert client.engine.calls == [2]
    two_requests_30_ms_apart(client)  # it ended without a request: nothing holds the batch
    assert client.engine.calls == [2, 1, 1]


def test_a_request_cancelled_before_its_batch_runs_is_left_out(client: EngineClient) -> None:
    """A task the runner cancels (timeout, over-rollout) while its request waits: the batch runs
    without it, and the others get their results."""
    started = object()
    client.announce(started)  # the batch waits for this caller: the cancel lands before it runs
    kept = client.submit("generate", ["a"], ARGS)
    dropped = client.submit("generate", ["b"], ARGS)
    dropped.cancel()
    client.withdraw(started)
    assert len(kept.result(timeout=60)[0]) == 1
    assert client.engine.calls == [1] and dropped.cancelled()
