"""``mode: serve``: the explorer as an OpenAI-compatible proxy for agents written without trinity.

An agent (AgentScope, LangGraph, a plain ``openai`` loop) points its client at
``http://<listen_address>:<proxy_port>/v1``. Each chat completion goes to a rollout engine's
endpoint (round robin over ``engine_num``), with token ids and logprobs asked for, and its
choices are recorded as experiences under the response's ``id``. The agent then scores them:

- ``POST /feedback {"reward": r, "msg_ids": [...], "task_id": "...", "run_id": 0}`` sets the
  reward of those responses (a task's responses form its group); an unknown or already
  scored id is an error (404 / 409) naming it, never a silent drop.
- ``POST /commit`` writes every scored experience to the experience buffer, one explorer
  step; it returns once they are durable, so a kill after it loses none of them.
- ``GET /metrics``, ``GET /health``, ``GET /v1/models``.

A trainer (``mode: train``, another process) trains on the committed experiences; the proxy
loads its newer weights as they appear (checkpoint sync) while it goes on serving.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from typing import TYPE_CHECKING, Any

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, ValidationError

from trinity.common.experience import EID, Experience
from trinity.common.lazy_import import lazy_module

if TYPE_CHECKING:
    from trinity.explorer.explorer import Explorer

torch = lazy_module("torch")
logger = logging.getLogger(__name__)

WEIGHTS_POLL_SECONDS = 2.0
"""How often the proxy looks for newer weights from the trainer."""


class Feedback(BaseModel):
    reward: float
    msg_ids: list[str] = Field(min_length=1)
    task_id: str | None = None
    run_id: int = 0


class ServeProxy:
    """The proxy's state: recorded responses, scored ones waiting for a commit, counters."""

    def __init__(self, explorer: Explorer):
        self.explorer = explorer
        config = explorer.config
        self.temperature = config.model.temperature
        self.timeout = float(config.synchronizer.sync_timeout)
        self.engine_urls = [client.api_url for client in explorer.engines]
        self.engines = itertools.cycle(self.engine_urls)
        self.recorded: dict[str, list[Experience]] = {}  # response id -> its choices, not scored yet
        self.scored: set[str] = set()
        self.ready: list[Experience] = []
        self.requests = self.experiences = self.committed = 0
        self.commit_lock = asyncio.Lock()
        self.app = self._app()

    def _app(self) -> FastAPI:
        app = FastAPI(title="trinity serve proxy")
        http = httpx.AsyncClient(timeout=httpx.Timeout(self.timeout, connect=10.0))

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> Any:
            try:
                body = await request.json()
            except ValueError as exc:
                return _error(400, f"the body is not JSON: {exc}")
            if not isinstance(body, dict) or body.get("stream"):
                return _error(400, "a JSON object without stream: true is expected")
            # what an experience needs, at the policy's temperature (as Trinity-RFT's proxy does)
            body.update(return_token_ids=True, logprobs=True, temperature=self.temperature)
            url, version = next(self.engines), self.explorer.version
            try:
                upstream = await http.post(f"{url}/chat/completions", json=body)
            except httpx.HTTPError as exc:
                return _error(502, f"the rollout engine at {url} did not answer: {exc}")
            if upstream.status_code >= 400:
                return JSONResponse(status_code=upstream.status_code, content=upstream.json())
            response = upstream.json()
            self._record(response, body.get("messages", []), version)
            return response

        @app.post("/feedback")
        async def feedback(request: Request) -> Any:
            try:
                given = Feedback.model_validate(await request.json())
            except (ValueError, ValidationError) as exc:
                return _error(400, _first_problem(exc))
            unknown = [m for m in given.msg_ids if m not in self.recorded and m not in self.scored]
            if unknown:
                return _error(404, f"msg_ids not recorded by this proxy: {unknown}")
            twice = [m for m in given.msg_ids if m in self.scored]
            if twice:
                return _error(409, f"msg_ids already have feedback: {twice}")
            task = given.task_id or given.msg_ids[0]
            for msg_id in given.msg_ids:
                for i, exp in enumerate(self.recorded.pop(msg_id)):
                    exp.reward = given.reward
                    exp.eid = EID(batch="", task=task, run=given.run_id * 1000 + i, suffix=msg_id)
                    self.ready.append(exp)
                self.scored.add(msg_id)
            return {"status": "success", "ready": len(self.ready)}

        @app.post("/commit")
        async def commit() -> Any:
            async with self.commit_lock:
                experiences, self.ready = self.ready, []
                step = await asyncio.to_thread(self.explorer.commit, experiences)
                self.committed += len(experiences)
            return {"status": "success", "committed": len(experiences), "step": step}

        @app.get("/metrics")
        async def metrics() -> Any:
            return {
                "step": self.explorer.step,
                "model_version": self.explorer.version,
                "requests": self.requests,
                "recorded_experiences": self.experiences,
                "ready_experiences": len(self.ready),
                "committed_experiences": self.committed,
                "engine_urls": self.engine_urls,
            }

        @app.get("/health")
        async def health() -> Any:
            return {"status": "ok"}

        @app.get("/v1/models")
        async def models() -> Any:
            return (await http.get(f"{next(self.engines)}/models")).json()

        return app

    def _record(self, response: dict[str, Any], messages: list[dict[str, Any]], version: int) -> None:
        prompt = response.get("prompt_token_ids") or []
        recorded = []
        for choice in response.get("choices", []):
            tokens = choice.get("token_ids") or []
            logprobs = [entry["logprob"] for entry in (choice.get("logprobs") or {}).get("content") or []]
            reply = choice.get("message") or {}
            recorded.append(
                Experience(
                    tokens=torch.tensor(prompt + tokens, dtype=torch.long),
                    prompt_length=len(prompt),
                    logprobs=torch.tensor(logprobs, dtype=torch.float32),
                    model_version=version,
                    truncate_status="response_truncated" if choice.get("finish_reason") == "length" else None,
                    messages=[*messages, {"role": "assistant", "content": reply.get("content") or ""}],
                    info={"msg_id": response["id"], "recorded_at": time.time()},
                )
            )
        self.recorded[response["id"]] = recorded
        self.requests += 1
        self.experiences += len(recorded)

    async def serve(self, host: str, port: int) -> None:
        """Serve until the process ends, loading the trainer's newer weights as they appear."""
        import uvicorn

        server = uvicorn.Server(uvicorn.Config(self.app, host=host, port=port, log_level="warning"))
        watcher = asyncio.ensure_future(self._follow_weights())
        logger.warning(
            "serving the rollout model at http://%s:%d/v1 (feedback: /feedback, commit: /commit)", host, port
        )
        try:
            await server.serve()
        finally:
            watcher.cancel()

    async def _follow_weights(self) -> None:
        while True:
            await asyncio.sleep(WEIGHTS_POLL_SECONDS)
            try:
                update = await asyncio.to_thread(self.explorer.sync.fetch, self.explorer.version + 1, 0)
                if update is not None:
                    await asyncio.to_thread(self.explorer.load_weights, update)
            except Exception:  # a sync that fails now may work next time; serving goes on
                logger.exception("serve: loading newer weights failed")


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": {"message": message, "code": status}})


def _first_problem(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        return f"{'.'.join(str(p) for p in first['loc']) or 'body'}: {first['msg']}"
    return f"the body is not JSON: {exc}"
