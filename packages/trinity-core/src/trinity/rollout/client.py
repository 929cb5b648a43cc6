"""The explorer's side of one rollout engine: many requests in flight, each answered on its own.

Workflows (through ``ModelWrapper``) send one request per call, many at once. A ``concurrent``
engine (vLLM) gets each as it comes, through its ``*_async`` methods. Any other engine computes
one call at a time: requests that arrive together with equal sampling arguments merge into one
batched call, waiting for announced workflows' first requests (``announce``), so a batch of
small workflows is as fast as one ``generate`` over all their prompts. The client also holds the
engine's tokenisation for the workflows (``chat_tokenizer``).
"""

from __future__ import annotations

import asyncio
import copy
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from trinity.model.engines import RolloutEngine, SamplingArgs

if TYPE_CHECKING:
    from trinity.config.schema import InferenceModelConfig
    from trinity.model.tokenization import ChatTokenizer

_SETTLE_SECONDS = 0.0005
"""How long the batcher waits for more requests after the last one arrived."""
_FIRST_CALL_SECONDS = 0.05
"""How long, at most, the batcher holds a batch for started workflows that have not called
yet (one whose first act is slow, e.g. an environment reset, costs each batch this much)."""
REQUESTS = ("generate", "chat", "logprobs")
"""The engine methods a workflow's request becomes (the rest go through ``call``)."""


class EngineClient:
    """Runs one rollout engine for the explorer; requests go to a private event loop thread.

    The engine's own calls (batched requests of a non-concurrent engine, weight updates) run
    on one worker thread, so such an engine is never called concurrently.
    """

    def __init__(self, engine: RolloutEngine):
        self.engine = engine
        self.api_url = engine.api_url
        """Base URL of the engine's OpenAI-compatible endpoint: its own, or ``serve_openai``'s."""
        self.api_key = engine.api_key
        """The bearer token that endpoint requires (``api_key``), None for none."""
        self._api_server: Any = None
        self._loop = asyncio.new_event_loop()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rollout-engine")
        self._updates = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rollout-weights")
        self._pending: dict[str, tuple[str, SamplingArgs, list[tuple[list, asyncio.Future]]]] = {}
        self._starting: set[object] = set()  # announced callers not heard from yet (loop thread only)
        self._flushing = False
        threading.Thread(target=self._loop.run_forever, name="engine-client", daemon=True).start()

    @property
    def model_version(self) -> int:
        return self.engine.model_version

    @property
    def chat_tokenizer(self) -> ChatTokenizer:
        """The engine's tokenizer and chat template, for workflows that build experiences token by
        token (a multi-turn conversation, a response continued after a forced end of thinking)."""
        if self.engine.chat_tokenizer is None:
            raise TypeError(f"the {type(self.engine).__name__} has no tokenizer: this workflow needs one")
        return self.engine.chat_tokenizer

    def submit(self, method: str, items: list, args: SamplingArgs | None = None, caller: object = None) -> Future:
        """Queue ``engine.<method>(items, args)`` (``generate``, ``chat`` or ``logprobs``); the
        future gets this request's results, one per item."""
        if method not in REQUESTS:
            raise ValueError(f"{method!r} is not a request of a rollout engine ({', '.join(REQUESTS)})")
        return asyncio.run_coroutine_threadsafe(self.request(method, items, args, caller), self._loop)

    def announce(self, caller: object) -> None:
        """``caller`` has started and will send a request soon: the batcher holds the next
        batch for it (``_FIRST_CALL_SECONDS`` at most) until it does or is withdrawn."""
        self._loop.call_soon_threadsafe(self._starting.add, caller)

    def withdraw(self, caller: object) -> None:
        """``caller`` is done; the batcher no longer waits for it."""
        self._loop.call_soon_threadsafe(self._starting.discard, caller)

    def call(self, method: str, *args: Any) -> Future:
        """Run another engine method (``update_weights``, ...) on the engine's thread; with partial
        rollout, ``update_weights`` on a thread of its own, beside the sampling call it pauses."""
        if method == "update_weights" and self.engine.partial_rollout:
            return self._updates.submit(self.engine.update_weights, *args)
        return self._executor.submit(getattr(self.engine, method), *args)

    async def request(self, method: str, items: list, args: SamplingArgs | None = None, caller: object = None) -> list:
        """``submit`` on the client's own loop (the OpenAI endpoint's handlers run there)."""
        self._starting.discard(caller)
        request = (items,) if method == "logprobs" else (items, args)
        if self.engine.concurrent:
            return await getattr(self.engine, f"{method}_async")(*request)
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

    async def _run_group(self, method: str, args: SamplingArgs | None, requests: list[tuple[list, Any]]) -> None:
        requests = [(items, future) for items, future in requests if not future.cancelled()]  # a timed-out task's
        if not requests:
            return
        items = [item for request_items, _ in requests for item in request_items]
        call = (items,) if method == "logprobs" else (items, args)
        try:
            results = await self._loop.run_in_executor(self._executor, getattr(self.engine, method), *call)
        except Exception as exc:  # every waiting workflow sees the engine's error, each its own copy
            for _, future in requests:  # (one object raised in many tasks would gather all their frames)
                if not future.done():
                    future.set_exception(copy.copy(exc).with_traceback(exc.__traceback__))
            return
        start = 0
        for request_items, future in requests:
            if not future.done():  # cancelled while the engine worked
                future.set_result(results[start : start + len(request_items)])
            start += len(request_items)

    def restart(self) -> None:
        """Start a crashed engine again (``RolloutEngine.restart``) on the engine's thread; an
        endpoint of the engine's own may have moved."""
        self.call("restart").result()
        if self._api_server is None:
            self.api_url = self.engine.api_url

    def serve_openai(self, config: InferenceModelConfig) -> str:
        """Serve ``trinity.rollout.openai_api`` over this client on ``config.openai_api_host``
        (``endpoint_port``), for an engine without an endpoint of its own, behind ``config.api_key``;
        returns its base URL."""
        import socket

        from trinity.common.http_guard import door_server
        from trinity.rollout.openai_api import endpoint_port, guarded, openai_app

        sock = socket.create_server((config.openai_api_host, endpoint_port(config)))
        host, port = sock.getsockname()[:2]
        self.api_key = config.endpoint_key()
        app = guarded(openai_app(self, config), config.openai_api_host, self.api_key)
        server = door_server(app, log_level="warning", access_log=False)
        self._api_server = server

        async def start() -> None:
            self._loop.create_task(server.serve(sockets=[sock]))
            while not server.started:
                await asyncio.sleep(0.01)

        asyncio.run_coroutine_threadsafe(start(), self._loop).result(timeout=60)
        self.api_url = f"http://{host}:{port}/v1"
        return self.api_url

    def close(self) -> None:
        if self._api_server is not None:
            self._api_server.should_exit = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._executor.shutdown(wait=False)
        self._updates.shutdown(wait=False)
        self.engine.shutdown()
