"""An OpenAI-compatible endpoint over any rollout engine (``enable_openai_api``).

For engines without one of their own (transformers), on the engine client's event loop:
``/v1/chat/completions``, ``/v1/completions``, ``/v1/models``, ``/health``, bound to
``openai_api_host`` (loopback by default). Requests batch with the workflows' own and answer as
vLLM's server does (``return_token_ids``, ``logprobs``, reasoning and tool-call parsers). Every
endpoint of trinity's sits behind ``guarded`` (``api_key``, ``trinity.common.http_guard``); a
malformed request is a 400 naming the field. docs/engines.md has the details.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator

from trinity.common.http_guard import LOOPBACK_HOSTS, ASGIApp, RequestGuard, error_body, is_loopback
from trinity.model.engines import Completion, EngineStartError, SamplingArgs
from trinity.model.tokenization import TOOL_CALL_PARSERS, ToolCallParser, tool_schemas

if TYPE_CHECKING:
    from trinity.config.schema import InferenceModelConfig

REASONING_PARSERS = ("deepseek_r1", "qwen3")
"""Parsers of ``<think>...</think>`` reasoning text (vLLM's names)."""
_THINK = re.compile(r"^\s*(?:<think>)?(.*?)</think>\s*", re.S)
MAX_N = 128
"""Choices one request may ask for (``n``): each holds memory until it is answered."""
MAX_TEMPERATURE = 100.0
"""Beyond it sampling is uniform anyway, and a huge temperature overflows the logits to NaN."""
MAX_STOPS, MAX_STOP_CHARS = 16, 256
"""Stop strings a request may give, and characters in each: the engine's stop-string matcher is
built per request over the whole vocabulary (a 1 MiB stop string took 9 s on a 512-token one)."""
Stop = Annotated[str, StringConstraints(max_length=MAX_STOP_CHARS)]


logger = logging.getLogger(__name__)

LOGGED_CHARS = 2000
"""Characters of a request logged with ``enable_log_requests``."""


def json_body(model: type[BaseModel]) -> dict[str, Any]:
    """A route's ``openapi_extra`` declaring ``model`` as its JSON body, for a handler that reads
    the raw request (to answer a malformed one in its own words): what the schema shows, and
    what the fuzz tests generate requests from."""
    schema = {"schema": model.model_json_schema()}
    return {"requestBody": {"required": True, "content": {"application/json": schema}}}


def endpoint_port(config: InferenceModelConfig) -> int:
    """Port of an engine's OpenAI endpoint: ``base_port + engine_id`` (Trinity-RFT's), or 0 (a free one)."""
    return config.base_port + config.engine_id if config.base_port else 0


def guarded(app: ASGIApp, host: str, key: str | None) -> RequestGuard:
    """``app``, bound to ``host``, behind the request guard: the bearer ``key`` when one is set
    and, on loopback, loopback host names only (a page on a rebound DNS name is refused)."""
    return RequestGuard(app, token=key, hosts=LOOPBACK_HOSTS if is_loopback(host) else None)


class _Request(BaseModel):
    """What both endpoints accept; unknown fields are ignored, as OpenAI clients send extras."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    n: int = Field(1, ge=1, le=MAX_N)
    temperature: float | None = Field(None, ge=0, le=MAX_TEMPERATURE)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=-1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    min_tokens: int | None = Field(None, ge=0)
    stop: list[Stop] = Field([], max_length=MAX_STOPS)
    seed: int | None = Field(None, ge=-(2**63), lt=2**63)
    logprobs: bool | int | None = None
    stream: Literal[False] = False
    return_token_ids: bool = False

    @field_validator("stop", mode="before")
    @classmethod
    def _stops(cls, stop: Any) -> Any:
        """One stop string or a list of them, as OpenAI takes it; null for none."""
        return [stop] if isinstance(stop, str) else [] if stop is None else stop

    def sampling(self, tools: list[dict[str, Any]] | None = None) -> SamplingArgs:
        return SamplingArgs(
            n=self.n,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            max_tokens=self.max_completion_tokens or self.max_tokens,
            min_tokens=self.min_tokens,
            stop=self.stop,
            seed=self.seed,
            tools=tools,
        )


class ChatRequest(_Request):
    messages: list[dict[str, Any]] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None

    @field_validator("messages")
    @classmethod
    def _text_content(cls, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """A message needs a string ``role``, and its content is a string, a list of parts or
        null. Content given as parts (as agent frameworks send it) becomes its text; the chat
        template renders strings. Parts other than text, and text parts without a string
        ``text``, are refused by index."""
        for i, message in enumerate(messages):
            if not isinstance(message.get("role"), str):
                raise ValueError(f"messages[{i}].role: a message needs its role (a string)")
            parts = message.get("content")
            if parts is not None and not isinstance(parts, (str, list)):
                raise ValueError(f"messages[{i}].content: a string or a list of text parts, not {type(parts).__name__}")
            if isinstance(parts, list):
                kinds = [part.get("type") if isinstance(part, dict) else type(part).__name__ for part in parts]
                if any(kind != "text" for kind in kinds):
                    raise ValueError(f"messages[{i}].content: only text parts are served, got {kinds}")
                for j, part in enumerate(parts):
                    if not isinstance(part.get("text"), str):
                        raise ValueError(f"messages[{i}].content[{j}].text: a text part needs its text (a string)")
                messages[i] = {**message, "content": "".join(part["text"] for part in parts)}
        return messages


class CompletionRequest(_Request):
    prompt: str = Field(min_length=1)


class Requests(Protocol):
    """What the endpoint asks of the engine client (``EngineClient``, which serves the endpoint)."""

    async def request(self, method: str, items: list, args: SamplingArgs | None = None) -> list: ...


def openai_app(client: Requests, config: InferenceModelConfig) -> FastAPI:
    """The endpoint's app; its handlers run on the client's event loop."""
    app = FastAPI(title="trinity OpenAI-compatible endpoint")
    name = config.name or config.model_path or "model"
    parser = _tool_call_parser(config)
    parse_reasoning = config.reasoning_parser in REASONING_PARSERS

    async def body(request: Request, model: type[_Request]) -> _Request | JSONResponse:
        try:
            parsed = model.model_validate(await request.json())
            if config.enable_log_requests:  # what vLLM's --enable-log-requests shows: the request, bounded
                logger.info("%s: %s", request.url.path, parsed.model_dump_json(exclude_defaults=True)[:LOGGED_CHARS])
            return parsed
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(part) for part in first["loc"]) or "body"
            message = f"{field}: {first['msg']}"
            return JSONResponse(status_code=400, content=_error(message, field))
        except ValueError as exc:  # not JSON
            return JSONResponse(status_code=400, content=_error(f"the body is not JSON: {exc}", None))

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": name, "object": "model", "owned_by": "trinity"}]}

    @app.post("/v1/chat/completions", openapi_extra=json_body(ChatRequest))
    async def chat(request: Request) -> Any:
        parsed = await body(request, ChatRequest)
        if isinstance(parsed, JSONResponse):
            return parsed
        try:
            tools = tool_schemas(parsed.tools) or None
            (completions,) = await client.request("chat", [parsed.messages], parsed.sampling(tools))
        except ValueError as exc:  # messages or tools the chat template cannot render, a prompt too long
            return JSONResponse(status_code=400, content=_error(str(exc), "messages"))
        calls = parser if tools and parsed.tool_choice != "none" else None
        choices = [_chat_choice(i, c, parsed, parse_reasoning, calls) for i, c in enumerate(completions)]
        return _response("chat.completion", name, completions, choices, parsed.return_token_ids)

    @app.post("/v1/completions", openapi_extra=json_body(CompletionRequest))
    async def complete(request: Request) -> Any:
        parsed = await body(request, CompletionRequest)
        if isinstance(parsed, JSONResponse):
            return parsed
        try:
            (completions,) = await client.request("generate", [parsed.prompt], parsed.sampling())
        except ValueError as exc:  # a prompt too long
            return JSONResponse(status_code=400, content=_error(str(exc), "prompt"))
        choices = [
            {"index": i, "text": c.text, "finish_reason": c.finish_reason, "logprobs": _text_logprobs(c, parsed)}
            for i, c in enumerate(completions)
        ]
        for choice, completion in zip(choices, completions, strict=True):
            if parsed.return_token_ids:
                choice["token_ids"] = completion.response_token_ids
        return _response("text_completion", name, completions, choices, parsed.return_token_ids)

    return app


def _error(message: str, param: str | None) -> dict[str, Any]:
    return error_body(400, message, param)


def _response(
    kind: str, name: str, completions: list[Completion], choices: list[dict], token_ids: bool
) -> dict[str, Any]:
    prompt = completions[0].prompt_token_ids if completions else []
    generated = sum(len(c.response_token_ids) for c in completions)
    response = {
        "id": f"{'chatcmpl' if kind == 'chat.completion' else 'cmpl'}-{uuid.uuid4().hex}",
        "object": kind,
        "created": int(time.time()),
        "model": name,
        "choices": choices,
        "usage": {
            "prompt_tokens": len(prompt),
            "completion_tokens": generated,
            "total_tokens": len(prompt) + generated,
        },
    }
    if token_ids:
        response["prompt_token_ids"] = prompt
    return response


def _tool_call_parser(config: InferenceModelConfig) -> ToolCallParser | None:
    """The parser of ``tool_call_parser`` with ``enable_auto_tool_choice``; an unknown name is an error."""
    name = config.tool_call_parser
    if name is not None and name not in TOOL_CALL_PARSERS:
        raise EngineStartError(
            f"tool_call_parser {name!r}: this endpoint parses {', '.join(TOOL_CALL_PARSERS)} "
            "(the vLLM engine's own endpoint knows vLLM's parsers)"
        )
    return TOOL_CALL_PARSERS[name] if name and config.enable_auto_tool_choice else None


def _chat_choice(
    index: int, completion: Completion, request: ChatRequest, reasoning: bool, tools: ToolCallParser | None
) -> dict:
    text, reasoning_text = completion.text, None
    if reasoning and (found := _THINK.match(text)):
        reasoning_text, text = found.group(1).strip(), text[found.end() :]
    message: dict[str, Any] = {"role": "assistant", "content": text}
    finish = completion.finish_reason
    if tools and (calls := [call.openai() for call in tools.parse(text) if call.error is None]):
        message["content"] = tools.strip(text) or None
        message["tool_calls"] = calls
        finish = "tool_calls"
    if reasoning_text is not None:
        message["reasoning_content"] = reasoning_text
    choice: dict[str, Any] = {"index": index, "message": message, "finish_reason": finish}
    choice["logprobs"] = {"content": _token_logprobs(completion)} if request.logprobs else None
    if request.return_token_ids:
        choice["token_ids"] = completion.response_token_ids
    return choice


def _token_logprobs(completion: Completion) -> list[dict[str, Any]]:
    return [
        {"token": f"token_id:{token}", "logprob": logprob, "bytes": None, "top_logprobs": []}
        for token, logprob in zip(completion.response_token_ids, completion.response_logprobs, strict=False)
    ]


def _text_logprobs(completion: Completion, request: CompletionRequest) -> dict[str, Any] | None:
    if not request.logprobs:
        return None
    return {
        "tokens": [f"token_id:{t}" for t in completion.response_token_ids],
        "token_logprobs": list(completion.response_logprobs),
    }
