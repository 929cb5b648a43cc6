"""What a workflow sees of a model: sync and async chat/generate that return Experiences.

``ModelWrapper`` turns engine completions into experiences (tokens, logprobs, model
version, truncation status, messages). ``LocalEngineClient`` serves an in-process
rollout engine and merges requests that arrive together (from concurrent workflows)
into one batched engine call, which is what keeps a batch of small workflows as fast as
one direct ``generate`` over all their prompts. A workflow that has started (the runner
enters its ``ModelWrapper``) is waited for until its first request, so a thread that
starts late does not split the batch.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from trinity.common.experience import Experience
from trinity.common.lazy_import import lazy_module
from trinity.engine.base import Completion, RolloutEngine, SamplingArgs

torch = lazy_module("torch")

_SETTLE_SECONDS = 0.0005
"""How long the batcher waits for more requests after the last one arrived."""
_FIRST_CALL_SECONDS = 0.05
"""How long, at most, the batcher holds a batch for started workflows that have not called
yet (one whose first act is slow, e.g. an environment reset, costs each batch this much)."""


class LocalEngineClient:
    """Runs an engine in this process; concurrent requests with equal args share one call.

    Requests go to a private event loop thread; the engine itself runs on one worker
    thread, so it is never called concurrently.
    """

    def __init__(self, engine: RolloutEngine):
        self.engine = engine
        self._loop = asyncio.new_event_loop()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rollout-engine")
        self._pending: dict[str, tuple[str, SamplingArgs, list[tuple[list, asyncio.Future]]]] = {}
        self._starting: set[object] = set()  # announced callers not heard from yet (loop thread only)
        self._flushing = False
        threading.Thread(target=self._loop.run_forever, name="engine-client", daemon=True).start()

    @property
    def model_version(self) -> int:
        return self.engine.model_version

    @property
    def api_url(self) -> str | None:
        return self.engine.api_url

    def submit(self, method: str, items: list, args: SamplingArgs, caller: object = None) -> Future:
        """Queue ``engine.<method>(items, args)``; the future gets this request's results."""
        return asyncio.run_coroutine_threadsafe(self._enqueue(method, items, args, caller), self._loop)

    def announce(self, caller: object) -> None:
        """``caller`` has started and will send a request soon: the batcher holds the next
        batch for it (``_FIRST_CALL_SECONDS`` at most) until it does or is withdrawn."""
        self._loop.call_soon_threadsafe(self._starting.add, caller)

    def withdraw(self, caller: object) -> None:
        """``caller`` is done; the batcher no longer waits for it."""
        self._loop.call_soon_threadsafe(self._starting.discard, caller)

    def call(self, method: str, *args: Any) -> Future:
        """Run any other engine method (logprobs, update_weights) on the engine's thread."""
        return self._executor.submit(getattr(self.engine, method), *args)

    async def _enqueue(self, method: str, items: list, args: SamplingArgs, caller: object) -> list:
        self._starting.discard(caller)
        future = self._loop.create_future()
        key = f"{method}:{args!r}"
        self._pending.setdefault(key, (method, args, []))[2].append((items, future))
        if not self._flushing:
            self._flushing = True
            self._loop.create_task(self._flush())
        return await future

    async def _flush(self) -> None:
        try:
            while self._pending:
                await self._settle()
                groups, self._pending = self._pending, {}
                for method, args, requests in groups.values():
                    await self._run_group(method, args, requests)
        finally:
            self._flushing = False

    async def _settle(self) -> None:
        """Wait while requests keep arriving and, for ``_FIRST_CALL_SECONDS`` at most, while
        an announced caller has not sent its first one."""
        patience = self._loop.time() + _FIRST_CALL_SECONDS
        count = -1
        while count != (count := sum(len(group[2]) for group in self._pending.values())) or (
            self._starting and self._loop.time() < patience
        ):
            await asyncio.sleep(_SETTLE_SECONDS)

    async def _run_group(self, method: str, args: SamplingArgs, requests: list[tuple[list, asyncio.Future]]) -> None:
        items = [item for request_items, _ in requests for item in request_items]
        try:
            results = await self._loop.run_in_executor(self._executor, getattr(self.engine, method), items, args)
        except Exception as exc:  # every waiting workflow sees the engine's error
            for _, future in requests:
                future.set_exception(exc)
            return
        start = 0
        for request_items, future in requests:
            future.set_result(results[start : start + len(request_items)])
            start += len(request_items)

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._executor.shutdown(wait=False)
        self.engine.shutdown()


class ModelWrapper:
    """A model as workflows use it: each call returns one Experience per sampled response.

    ``defaults`` are the sampling settings of the task (model config merged with the
    taskset's ``rollout_args``); keyword arguments of a call override them.
    """

    def __init__(self, client: LocalEngineClient, defaults: SamplingArgs, enable_history: bool = False):
        self.client = client
        self.defaults = defaults
        self.enable_history = enable_history
        self.history: list[Experience] = []

    def __enter__(self) -> ModelWrapper:
        """A workflow starts with this model: its first request is awaited by the batcher."""
        self.client.announce(self)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.client.withdraw(self)

    @property
    def model_version(self) -> int:
        return self.client.model_version

    def _args(self, overrides: dict[str, Any]) -> SamplingArgs:
        unknown = set(overrides) - set(SamplingArgs.__dataclass_fields__)
        if unknown:
            raise TypeError(
                f"unknown sampling arguments {sorted(unknown)}; accepted: {sorted(SamplingArgs.__dataclass_fields__)}"
            )
        return replace(self.defaults, **overrides)

    def chat(self, messages: list[dict[str, Any]], **sampling: Any) -> list[Experience]:
        """Sample responses to a conversation (through the chat template)."""
        args = self._args(sampling)
        (completions,) = self.client.submit("chat", [messages], args, self).result()
        return self._record([_to_experience(c, messages) for c in completions])

    async def chat_async(self, messages: list[dict[str, Any]], **sampling: Any) -> list[Experience]:
        args = self._args(sampling)
        (completions,) = await asyncio.wrap_future(self.client.submit("chat", [messages], args, self))
        return self._record([_to_experience(c, messages) for c in completions])

    def generate(self, prompt: str, **sampling: Any) -> list[Experience]:
        """Sample continuations of raw text (no chat template)."""
        args = self._args(sampling)
        (completions,) = self.client.submit("generate", [prompt], args, self).result()
        return self._record([_to_experience(c, None) for c in completions])

    async def generate_async(self, prompt: str, **sampling: Any) -> list[Experience]:
        args = self._args(sampling)
        (completions,) = await asyncio.wrap_future(self.client.submit("generate", [prompt], args, self))
        return self._record([_to_experience(c, None) for c in completions])

    def get_openai_client(self) -> Any:
        """An ``openai.OpenAI`` client of the engine's endpoint (``enable_openai_api``); with
        ``enable_history`` its chat completions are recorded as experiences."""
        import openai

        client = openai.OpenAI(base_url=self._api_url(), api_key="EMPTY")
        if self.enable_history:
            create = client.chat.completions.create

            def create_recorded(**kwargs: Any) -> Any:
                response = create(**_with_tokens(kwargs))
                self._record(self._openai_experiences(response, kwargs["messages"]))
                return response

            client.chat.completions.create = create_recorded
        return client

    def get_openai_async_client(self) -> Any:
        """``openai.AsyncOpenAI`` counterpart of ``get_openai_client``."""
        import openai

        client = openai.AsyncOpenAI(base_url=self._api_url(), api_key="EMPTY")
        if self.enable_history:
            create = client.chat.completions.create

            async def create_recorded(**kwargs: Any) -> Any:
                response = await create(**_with_tokens(kwargs))
                self._record(self._openai_experiences(response, kwargs["messages"]))
                return response

            client.chat.completions.create = create_recorded
        return client

    def _openai_experiences(self, response: Any, messages: list[dict[str, Any]]) -> list[Experience]:
        """One experience per choice of a chat completion asked for with ``_with_tokens``."""
        prompt = response.model_extra["prompt_token_ids"]
        completions = [
            Completion(
                prompt_token_ids=prompt,
                response_token_ids=choice.model_extra["token_ids"],
                response_logprobs=[t.logprob for t in choice.logprobs.content],
                text=choice.message.content or "",
                finish_reason="length" if choice.finish_reason == "length" else "stop",
                model_version=self.model_version,
            )
            for choice in response.choices
        ]
        return [_to_experience(c, messages) for c in completions]

    def _api_url(self) -> str:
        if self.client.api_url is None:
            raise ValueError(
                "this model serves no OpenAI API: set enable_openai_api on its config "
                "(explorer.rollout_model or the auxiliary model), with an engine that serves one (vllm)"
            )
        return self.client.api_url

    def logprobs(self, token_ids: Sequence[int]) -> list[float]:
        """Logprob of each token given its prefix under the current weights."""
        return self.client.call("logprobs", [list(token_ids)]).result()[0]

    def extract_experience_from_history(self) -> list[Experience]:
        """The experiences recorded since the last call (``enable_history``), clearing them."""
        history, self.history = self.history, []
        return history

    def _record(self, experiences: list[Experience]) -> list[Experience]:
        if self.enable_history:
            self.history.extend(experiences)
        return experiences


def _with_tokens(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Request arguments that make a vLLM endpoint return what an experience needs: token ids
    of prompt and response, and response logprobs."""
    extra_body = {"return_token_ids": True, **(kwargs.get("extra_body") or {})}
    return {**kwargs, "logprobs": True, "extra_body": extra_body}


def _to_experience(completion: Completion, messages: list[dict[str, Any]] | None) -> Experience:
    prompt, response = completion.prompt_token_ids, completion.response_token_ids
    status = "prompt_truncated" if completion.prompt_truncated else None
    if completion.finish_reason == "length":
        status = status or "response_truncated"
    return Experience(
        tokens=torch.tensor(prompt + response, dtype=torch.long),
        prompt_length=len(prompt),
        logprobs=torch.tensor(completion.response_logprobs, dtype=torch.float32),
        model_version=completion.model_version,
        truncate_status=status,
        messages=[*messages, {"role": "assistant", "content": completion.text}] if messages is not None else None,
        info={"response_text": completion.text, "finish_reason": completion.finish_reason},
    )
