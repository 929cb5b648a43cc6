"""``mode: serve``: the explorer as an OpenAI-compatible proxy for agents written without trinity.

An agent points its OpenAI client at ``http://<listen_address>:<proxy_port>/v1``; each chat
completion goes to a rollout engine (round robin) and its choices are recorded as experiences
under the response's ``id``. ``POST /feedback`` scores them (all or nothing), ``POST /commit``
hands the scored ones to the ``ServeHost`` to write as a step. The proxy binds loopback by
default, requires ``explorer.rollout_model.api_key`` when set, bounds what it keeps in bytes
(``explorer.proxy_max_memory_mb``) and loads the trainer's newer weights while it serves.
API: ``docs/agents.md``; how a commit is written: ``docs/explorer.md``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import math
import sys
import time
from collections import Counter, OrderedDict
from typing import TYPE_CHECKING, Annotated, Any, Literal

import httpx
import sqlalchemy as sa
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trinity.buffer.errors import BufferUnavailable
from trinity.buffer.storage.sql import create_tables, database_url, shared_engine, write_transaction
from trinity.common.experience import EID, Experience
from trinity.common.http_guard import door_server, error_body
from trinity.common.lazy_import import lazy_module
from trinity.rollout.openai_api import MAX_N, guarded, json_body
from trinity.synchronizer.methods import WeightUpdate
from trinity.synchronizer.signals import TrainerFinished

if TYPE_CHECKING:
    from trinity.explorer.serve_host import ServeHost

torch = lazy_module("torch")
logger = logging.getLogger(__name__)

MAX_RECORDED = 10_000
"""Responses kept waiting for feedback at most; the oldest expire first."""
RECORDED_TTL_SECONDS = 6 * 3600.0
"""How long a response waits for its feedback before it expires (an agent that never scores it)."""
MAX_READY = 100_000
"""Scored experiences kept waiting for ``/commit`` at most; beyond, feedback asks for a commit first."""
MAX_ID_CHARS = 256
"""Characters of a response id or ``task_id`` at most: the width of ``proxy_history``'s columns."""
STORED_MESSAGE_KEYS = ("role", "content", "name", "tool_calls", "tool_call_id", "reasoning_content")
"""The fields of a chat message the proxy keeps (OpenAI's, and vLLM's ``reasoning_content``); any
other is forwarded to the engine but neither held nor recorded."""
EXPERIENCE_BYTES = 12 * 1024
"""What one recorded choice holds besides its messages and tensor data (the Experience, its eid,
info and tensor objects): tracemalloc saw ~5 KiB a response more than the rest of the count;
the rest is margin (tests/explorer/test_serve_proxy.py compares the two)."""


def held_bytes(value: Any) -> int:
    """The bytes a JSON-like ``value`` (dicts, lists, strings, numbers) holds in memory: each
    object's ``sys.getsizeof``, walked without recursion (a shared object counts each time)."""
    total, stack = 0, [value]
    while stack:
        item = stack.pop()
        total += sys.getsizeof(item)
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return total


def stored_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with only the ``STORED_MESSAGE_KEYS`` of each (an unknown field can carry
    megabytes nothing reads)."""
    return [{k: message[k] for k in STORED_MESSAGE_KEYS if k in message} for message in messages]


MAX_ABS_REWARD = 1e6
"""Rewards beyond it are refused: a group's advantages are computed in float32, where the
squares of rewards near 1e19 overflow to inf and turn every advantage of the group into NaN."""


class RewardFeedback(BaseModel):
    """The body of ``/feedback``; an unknown key is an error (a misspelt ``task_id`` would regroup)."""

    model_config = ConfigDict(extra="forbid")

    reward: float = Field(strict=True, allow_inf_nan=False, ge=-MAX_ABS_REWARD, le=MAX_ABS_REWARD)
    msg_ids: list[Annotated[str, Field(max_length=MAX_ID_CHARS)]] = Field(min_length=1, max_length=MAX_RECORDED)
    task_id: str | None = Field(None, max_length=MAX_ID_CHARS)
    run_id: int = Field(0, ge=0, lt=2**31)


def _forwardable_json(raw: bytes) -> Any:
    """A request body the proxy can forward as JSON: Python's parser takes NaN, Infinity and
    numbers past a float's range (1e999), which the upstream request cannot carry (a 502 before)."""

    def refuse(text: str) -> float:
        raise ValueError(f"{text} is not a finite JSON number")

    def finite(text: str) -> float:
        value = float(text)
        return value if math.isfinite(value) else refuse(text)

    return json.loads(raw, parse_constant=refuse, parse_float=finite)


class ChatBody(BaseModel):
    """What the proxy reads of a chat completion request; the engine validates the rest."""

    model_config = ConfigDict(extra="allow")

    messages: list[dict[str, Any]] = Field(min_length=1)
    n: int = Field(1, ge=1, le=MAX_N)
    stream: Literal[False] = False


class ServeProxy:
    """The proxy's state: recorded responses, scored ones waiting for a commit, counters."""

    def __init__(self, host: ServeHost):
        self.host = host
        config = host.config
        self.temperature = config.model.temperature
        self.timeout = float(config.synchronizer.sync_timeout)
        # how often it looks for newer weights: half the check interval, as Trinity-RFT's check loop
        self.weights_poll_seconds = config.explorer.service_status_check_interval / 2
        self.key = config.explorer.rollout_model.endpoint_key()
        self.engine_urls = [client.api_url for client in host.engines.clients]
        self.upstreams = [(client.api_url, _bearer(client.api_key)) for client in host.engines.clients]
        self.min_running = config.explorer.min_running_model_num
        self.serving = list(range(len(self.upstreams)))  # requests go round robin to these: all but a loading wave
        self.turn = itertools.count()
        self.inflight = [0] * len(self.upstreams)  # requests in progress, per engine
        self.versions = [host.engines.version] * len(self.upstreams)  # the weights each engine holds
        self.history = History(config.explorer.db_url) if config.explorer.db_url else None
        # response id -> (when recorded, its choices, the bytes they hold), oldest first; not scored yet
        self.recorded: OrderedDict[str, tuple[float, list[Experience], int]] = OrderedDict()
        self.scored: OrderedDict[str, None] = OrderedDict()  # the ids scored lately (409 on a second score)
        self.ready: list[Experience] = []
        self.max_held_bytes = int(config.explorer.proxy_max_memory_mb * 2**20)
        # bytes held: unscored responses, scored experiences waiting for /commit, and those a
        # commit could not write yet (the host holds them for the next one)
        self.recorded_bytes = self.ready_bytes = self.unwritten_bytes = 0
        self.requests = self.experiences = self.committed = self.dropped = self.expired = 0
        self.commit_lock = asyncio.Lock()
        self.app = self._app()

    def _app(self) -> FastAPI:
        app = FastAPI(title="trinity serve proxy")
        http = httpx.AsyncClient(timeout=httpx.Timeout(self.timeout, connect=10.0))

        @app.post("/v1/chat/completions", openapi_extra=json_body(ChatBody))
        async def chat(request: Request) -> Any:
            try:
                body = _forwardable_json(await request.body())
                ChatBody.model_validate(body)
            except (ValueError, ValidationError) as exc:
                return _error(400, _first_problem(exc))
            messages = stored_messages(body["messages"])
            size = held_bytes(messages)
            if refused := _no_room(size, self.ready_bytes + self.unwritten_bytes, self.max_held_bytes):
                return refused
            # what an experience needs, at the policy's temperature (as Trinity-RFT's proxy does)
            body.update(return_token_ids=True, logprobs=True, temperature=self.temperature)
            engine = self._next_engine()
            (url, headers), version = self.upstreams[engine], self.versions[engine]
            self.inflight[engine] += 1
            try:
                upstream = await http.post(f"{url}/chat/completions", json=body, headers=headers)
                response = upstream.json()
            except (httpx.HTTPError, ValueError) as exc:
                return _error(502, f"the rollout engine at {url} did not answer: {exc}")
            finally:
                self.inflight[engine] -= 1
            if upstream.status_code >= 400:
                return JSONResponse(status_code=upstream.status_code, content=response)
            if not _recordable_id(response):
                return _error(
                    502, f"the rollout engine at {url} answered without an id of 1 to {MAX_ID_CHARS} characters"
                )
            self._record(response, messages, size, version)
            if self.history is not None:
                await asyncio.to_thread(self.history.record, response, messages, version)
            return response

        @app.post("/feedback", openapi_extra=json_body(RewardFeedback))
        async def reward_feedback(request: Request) -> Any:
            try:
                given = RewardFeedback.model_validate(await request.json())
            except ValidationError as exc:
                return _error(422, _first_problem(exc))
            except ValueError as exc:
                return _error(400, _first_problem(exc))
            self._expire()
            twice_given = sorted(m for m, count in Counter(given.msg_ids).items() if count > 1)
            if twice_given:
                return _error(400, f"msg_ids: listed more than once in this request: {twice_given}")
            unknown = [m for m in given.msg_ids if m not in self.recorded and m not in self.scored]
            if unknown:
                return _error(404, f"msg_ids not recorded by this proxy, or expired unscored: {unknown}")
            scored = [m for m in given.msg_ids if m in self.scored]
            if scored:
                return _error(409, f"msg_ids already have feedback: {scored}")
            adding = sum(len(self.recorded[m][1]) for m in given.msg_ids)
            if len(self.ready) + adding > MAX_READY:
                return _error(409, f"{len(self.ready)} scored experiences wait for /commit (at most {MAX_READY})")
            task = given.task_id or given.msg_ids[0]
            for msg_id in given.msg_ids:
                _, experiences, size = self.recorded.pop(msg_id)
                self.recorded_bytes -= size  # held still, now as scored: the total is unchanged
                self.ready_bytes += size
                for i, exp in enumerate(experiences):
                    exp.reward = given.reward
                    exp.eid = EID(batch="", task=task, run=given.run_id * 1000 + i, suffix=msg_id)
                    self.ready.append(exp)
                self.scored[msg_id] = None
            while len(self.scored) > MAX_RECORDED:
                self.scored.popitem(last=False)
            if self.history is not None:
                await asyncio.to_thread(self.history.score, given, task)
            return {"status": "success", "ready": len(self.ready)}

        @app.post("/commit")
        async def commit() -> Any:
            async with self.commit_lock:
                experiences, self.ready = self.ready, []
                self.unwritten_bytes += self.ready_bytes
                self.ready_bytes = 0
                try:
                    step, committed, dropped = await asyncio.to_thread(self.host.commit, experiences)
                except BufferUnavailable as exc:  # the explorer holds them, for the next /commit
                    return _error(503, f"{exc}. The scored experiences are held: /commit again to write them")
                self.unwritten_bytes = 0  # a commit that returns has written every step held
                self.committed += committed
                self.dropped += dropped
            return {"status": "success", "committed": committed, "dropped": dropped, "step": step}

        @app.get("/metrics")
        async def metrics() -> Any:
            self._expire()
            return {
                "step": self.host.writer.step,
                "model_version": self.host.engines.version,
                "requests": self.requests,
                "recorded_experiences": self.experiences,
                "waiting_responses": len(self.recorded),
                "expired_responses": self.expired,
                "held_bytes": self.held_bytes(),
                "max_held_bytes": self.max_held_bytes,
                "ready_experiences": len(self.ready),
                "committed_experiences": self.committed,
                "dropped_experiences": self.dropped,
                "engine_urls": self.engine_urls,
            }

        @app.get("/health")
        async def health() -> Any:
            return {"status": "ok"}

        @app.get("/v1/models")
        async def models() -> Any:
            url, headers = self.upstreams[self._next_engine()]
            try:
                return (await http.get(f"{url}/models", headers=headers)).json()
            except (httpx.HTTPError, ValueError) as exc:
                return _error(502, f"the rollout engine at {url} did not answer: {exc}")

        return app

    def _next_engine(self) -> int:
        return self.serving[next(self.turn) % len(self.serving)]

    def held_bytes(self) -> int:
        """Bytes held: unscored responses, scored experiences, those a commit could not write yet."""
        return self.recorded_bytes + self.ready_bytes + self.unwritten_bytes

    def _record(self, response: dict[str, Any], messages: list[dict[str, Any]], size: int, version: int) -> None:
        """Record the choices of ``response`` to ``messages`` (``size``: the bytes they hold)."""
        recorded, size = recorded_choices(response, messages, size, version)
        self.recorded[response["id"]] = (time.monotonic(), recorded, size)
        self.recorded_bytes += size
        self.requests += 1
        self.experiences += len(recorded)
        self._expire()

    def _expire(self) -> None:
        """Drop the responses that waited for feedback longer than ``RECORDED_TTL_SECONDS``, and
        the oldest beyond ``MAX_RECORDED`` or ``max_held_bytes``."""
        oldest_kept = time.monotonic() - RECORDED_TTL_SECONDS
        while self.recorded and (
            len(self.recorded) > MAX_RECORDED
            or self.held_bytes() > self.max_held_bytes
            or next(iter(self.recorded.values()))[0] < oldest_kept
        ):
            self.recorded_bytes -= self.recorded.popitem(last=False)[1][2]
            self.expired += 1

    async def serve(self, host: str, port: int) -> None:
        """Serve until the process ends, loading the trainer's newer weights as they appear."""
        app = guarded(self.app, host, self.key)
        server = door_server(app, host=host, port=port, log_level="warning")
        watcher = asyncio.ensure_future(self._follow_weights())
        logger.warning(
            "serving the rollout model at http://%s:%d/v1 (feedback: /feedback, commit: /commit%s)",
            host,
            port,
            "; requests must carry explorer.rollout_model.api_key" if self.key else "",
        )
        try:
            await server.serve()
        finally:
            watcher.cancel()

    async def _follow_weights(self) -> None:
        while True:
            await asyncio.sleep(self.weights_poll_seconds)
            try:
                update = await asyncio.to_thread(self.host.engines.sync.fetch, self.host.engines.version + 1, 0)
                if update is not None:
                    await self.load(update)
            except TrainerFinished:  # its last weights are served; a trainer that resumes publishes more
                continue
            except Exception:  # a sync that fails now may work next time; serving goes on
                logger.exception("serve: loading newer weights failed")

    async def load(self, update: WeightUpdate) -> None:
        """Newer weights into the engines. With more engines than ``min_running_model_num`` they load
        in waves of the others: a wave leaves the rotation, waits (``max_timeout`` at most) for its
        requests to finish, loads and comes back, while the rest serve (Trinity-RFT's proxy); else
        all load at once, between their requests."""
        engines = list(range(len(self.upstreams)))
        wave = len(engines) - self.min_running
        if update.loaded or wave <= 0:  # nccl has put the weights into every engine already
            await asyncio.to_thread(self.host.engines.load, update)
        else:
            started = time.perf_counter()
            try:
                for first in range(0, len(engines), wave):
                    group = engines[first : first + wave]
                    self.serving = [i for i in engines if i not in group]
                    await self._drain(group)
                    await asyncio.to_thread(self._update_weights, update, group)
                    for i in group:
                        self.versions[i] = update.version
            finally:
                self.serving = engines
            self.host.engines.version = update.version
            logger.info("serve: weights of version %d loaded in %.2f s", update.version, time.perf_counter() - started)
        self.versions = [update.version] * len(engines)

    async def _drain(self, group: list[int]) -> None:
        """Until the engines of ``group`` have no request in progress (``max_timeout`` at most)."""
        deadline = time.monotonic() + self.host.config.explorer.max_timeout
        while any(self.inflight[i] for i in group):
            if time.monotonic() > deadline:
                raise TimeoutError(f"serve: engines {group} still busy after explorer.max_timeout: weights not loaded")
            await asyncio.sleep(0.05)

    def _update_weights(self, update: WeightUpdate, group: list[int]) -> None:
        calls = [
            self.host.engines.clients[i].call("update_weights", update.state_dict, update.path, update.version)
            for i in group
        ]
        for call in calls:
            call.result()


def recorded_choices(
    response: dict[str, Any], messages: list[dict[str, Any]], size: int, version: int
) -> tuple[list[Experience], int]:
    """The choices of ``response`` to ``messages`` as experiences, and the bytes they hold with
    the messages' ``size``."""
    prompt = response.get("prompt_token_ids") or []
    recorded = []
    for choice in response.get("choices", []):
        tokens = choice.get("token_ids") or []
        logprobs = [entry["logprob"] for entry in (choice.get("logprobs") or {}).get("content") or []]
        reply = choice.get("message") or {}
        exp = Experience(
            tokens=torch.tensor(prompt + tokens, dtype=torch.long),
            prompt_length=len(prompt),
            logprobs=torch.tensor(logprobs, dtype=torch.float32),
            model_version=version,
            truncate_status="response_truncated" if choice.get("finish_reason") == "length" else None,
            messages=[*messages, {"role": "assistant", "content": reply.get("content") or ""}],
            info={"msg_id": response["id"], "recorded_at": time.time()},
        )
        recorded.append(exp)
        size += EXPERIENCE_BYTES + held_bytes(exp.messages[-1]) + 8 * len(exp.messages)
        size += exp.tokens.element_size() * exp.tokens.numel() + exp.logprobs.element_size() * exp.logprobs.numel()
    return recorded, size


class History:
    """``explorer.db_url``: every chat completion the proxy answered and its feedback, as rows of
    ``proxy_history`` (Trinity-RFT's recorder's table): the response id, when, the version of the
    weights that answered, the request's messages and the choices' texts (JSON), and once scored
    the reward, task_id and run_id. A record of what agents were answered; the experiences
    themselves reach the buffer through ``/commit``."""

    def __init__(self, url: str):
        self.engine = shared_engine(database_url(url))
        meta = sa.MetaData()
        self.table = sa.Table(
            "proxy_history",
            meta,
            sa.Column("msg_id", sa.String(256), primary_key=True),
            sa.Column("recorded_at", sa.Float, nullable=False),
            sa.Column("model_version", sa.Integer, nullable=False),
            sa.Column("messages", sa.Text, nullable=False),
            sa.Column("responses", sa.Text, nullable=False),
            sa.Column("reward", sa.Float),
            sa.Column("task_id", sa.String(256)),
            sa.Column("run_id", sa.Integer),
        )
        create_tables(self.engine, meta, "proxy_history")

    def record(self, response: dict[str, Any], messages: list[dict[str, Any]], version: int) -> None:
        replies = [(choice.get("message") or {}).get("content") or "" for choice in response.get("choices", [])]
        row = {
            "msg_id": response["id"],
            "recorded_at": time.time(),
            "model_version": version,
            "messages": json.dumps(messages),
            "responses": json.dumps(replies),
        }
        with write_transaction(self.engine) as conn:
            conn.execute(self.table.insert().values(**row))

    def score(self, reward_feedback: RewardFeedback, task_id: str) -> None:
        scored = {"reward": reward_feedback.reward, "task_id": task_id, "run_id": reward_feedback.run_id}
        ids = reward_feedback.msg_ids
        with write_transaction(self.engine) as conn:
            conn.execute(self.table.update().where(self.table.c.msg_id.in_(ids)).values(**scored))


def _no_room(size: int, scored: int, limit: int) -> JSONResponse | None:
    """A 413 for messages of ``size`` bytes beyond ``limit`` alone, a 409 while the ``scored``
    bytes (which cannot expire) leave them no room."""
    if size + EXPERIENCE_BYTES > limit:
        return _error(413, f"the messages hold {size} bytes: over explorer.proxy_max_memory_mb ({limit} bytes)")
    if scored + size > limit:
        return _error(
            409,
            f"scored experiences waiting for /commit hold {scored} bytes of explorer.proxy_max_memory_mb "
            f"({limit} bytes): /commit them first",
        )
    return None


def _recordable_id(response: Any) -> bool:
    """Whether ``response`` has an id ``proxy_history`` can hold (a string of 1 to ``MAX_ID_CHARS``)."""
    msg_id = response.get("id") if isinstance(response, dict) else None
    return isinstance(msg_id, str) and 0 < len(msg_id) <= MAX_ID_CHARS


def _bearer(key: str | None) -> dict[str, str]:
    """The headers of a request to an engine whose endpoint requires ``key``."""
    return {"Authorization": f"Bearer {key}"} if key else {}


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse(status_code=status, content=error_body(status, message))


def _first_problem(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        return f"{'.'.join(str(p) for p in first['loc']) or 'body'}: {first['msg']}"
    return f"the body is not JSON: {exc}"
