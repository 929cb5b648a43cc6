"""What every HTTP door of trinity checks before a handler runs, in one ASGI middleware (the serve
proxy, the engines' OpenAI endpoints, the studio, the Data-Juicer service): another site's page
(``Origin``) or a loopback door under another name (DNS rebinding): 403; no token (bearer or the
named cookie, constant time; not on ``open_paths``): 401; a body not ``application/json``: 415;
over ``max_body_bytes``: 413; JSON nested past ``max_json_depth``, read off the raw bytes before
any parser recurses: 400; while bodies in progress hold ``max_pending_bytes``: 429. Websocket
upgrades get the Host, Origin and token checks; a ``RecursionError`` or ``MemoryError`` in a
handler is a 400. Errors are OpenAI's shape. Who can reach each door: ``docs/security.md``.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from http.cookies import SimpleCookie
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "[::1]"})
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
DEFAULT_MAX_JSON_DEPTH = 64
"""Arrays and objects inside one another a body may nest: no request of any door needs more (a
config is ~8 deep, a tool's JSON schema ~10), and Python's parsers recurse (a RecursionError at
about 1,000)."""
DEFAULT_MAX_PENDING_BYTES = 32 * DEFAULT_MAX_BODY_BYTES
"""Body bytes the requests in progress may hold together; beyond, a new body is a 429."""
EXHAUSTED = (RecursionError, MemoryError)
"""What a handler raises on an input too deep or too large for it: a 400, never a 500."""
KEEP_ALIVE_SECONDS = 75
"""How long every door (uvicorn's ``timeout_keep_alive``) keeps an idle connection open: longer
than clients keep theirs pooled (httpx, inside the openai client, 5 s): with equal timeouts the
server may close a connection just as the client sends on it, and the request fails with
"connection reset by peer"."""


def door_server(app: ASGIApp, **settings: Any) -> Any:
    """The ``uvicorn.Server`` of a door, with the settings every door shares (``KEEP_ALIVE_SECONDS``);
    ``settings`` are ``uvicorn.Config``'s (host, port, log_level, ...)."""
    import uvicorn

    return uvicorn.Server(uvicorn.Config(app, timeout_keep_alive=KEEP_ALIVE_SECONDS, **settings))


def is_loopback(host: str) -> bool:
    """Whether binding to ``host`` keeps a door on this machine (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


def json_depth(body: bytes) -> int:
    """How deep the arrays and objects of the JSON text ``body`` nest, read off its brackets outside
    strings, without parsing it: vectorised, linear (8 MiB of brackets in a few hundredths of a
    second). Of a malformed body it counts at least what a parser would meet before it fails."""
    if not (b"[" in body or b"{" in body):
        return 0
    import numpy as np

    # escapes first, pair by pair from the left as a parser reads them: what is left of a quote delimits
    text = np.frombuffer(body.replace(b"\\\\", b"").replace(b'\\"', b""), dtype=np.uint8)
    outside = (np.cumsum(text == ord('"'), dtype=np.int32) & 1) == 0  # a quote itself counts as inside
    steps = np.zeros(256, dtype=np.int8)
    steps[[ord("["), ord("{")]], steps[[ord("]"), ord("}")]] = 1, -1
    return int(max(np.cumsum(steps[text] * outside, dtype=np.int32).max(), 0))


def too_deep(body: bytes, limit: int) -> bool:
    """Whether ``body`` nests deeper than ``limit``; one with at most ``limit`` brackets is not scanned."""
    return body.count(b"[") + body.count(b"{") > limit and json_depth(body) > limit


def refuse_exhaustion(app: Any) -> None:
    """Answer a ``RecursionError`` or ``MemoryError`` in any handler of the Starlette (FastAPI)
    ``app`` with a 400 in OpenAI's error shape."""
    from starlette.responses import JSONResponse

    async def exhausted(request: Any, exc: Exception) -> Any:
        return JSONResponse(status_code=400, content=error_body(400, _exhausted_message(exc)))

    for kind in EXHAUSTED:
        app.add_exception_handler(kind, exhausted)


def _exhausted_message(exc: BaseException) -> str:
    what = "nested too deeply" if isinstance(exc, RecursionError) else "too large"
    return f"the request is {what} for this endpoint to process ({type(exc).__name__})"


def _host_name(host: str) -> str:
    """The name in a ``Host`` header, without its port (``[::1]:80`` -> ``[::1]``)."""
    if host.startswith("["):
        return host.split("]")[0] + "]"
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


class RequestGuard:
    """ASGI middleware: origin, host, token, JSON content type, body size and nesting, before the
    app sees a request (or a websocket)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str | None = None,
        cookie: str | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        max_json_depth: int = DEFAULT_MAX_JSON_DEPTH,
        max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES,
        open_paths: Iterable[str] = ("/health",),
        hosts: Iterable[str] | None = None,
    ):
        self.app = app
        self.hosts = frozenset(hosts) if hosts is not None else None
        self.token = token or None
        self.cookie = cookie
        self.max_body_bytes = max_body_bytes
        self.max_json_depth = max_json_depth
        self.max_pending_bytes = max_pending_bytes
        self.pending = 0
        """Body bytes the requests in progress hold."""
        self.open_paths = frozenset(open_paths)
        if hasattr(app, "add_exception_handler"):  # a Starlette app: its own handlers answer first
            refuse_exhaustion(app)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):  # lifespan
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        problem = self._refusal(scope, headers)
        if scope["type"] == "websocket":
            return await (
                self._refuse_websocket(scope, receive, send, *problem) if problem else self.app(scope, receive, send)
            )
        if problem:
            return await _reply(send, *problem)
        if scope["method"] not in BODY_METHODS:
            return await self._run(scope, receive, send)
        declared = headers.get("content-length", "")
        return await self._bounded(scope, receive, send, int(declared) if declared.isdigit() else 0)

    def _refusal(self, scope: Scope, headers: dict[str, str]) -> tuple[int, str, str] | None:
        """(status, error type, message) when the request is refused before its body is read."""
        host = headers.get("host", "")
        if self.hosts is not None and _host_name(host) not in self.hosts:
            return 403, "permission_error", f"this endpoint answers to {sorted(self.hosts)} only, not the host {host!r}"
        origin = headers.get("origin")
        if origin is not None and origin.split("://", 1)[-1] != host:
            return 403, "permission_error", f"a request from another site's page ({origin}) is refused"
        if self.token and scope["path"] not in self.open_paths and not self._authorized(headers):
            return 401, "authentication_error", "a valid token is required: send Authorization: Bearer <token>"
        if scope.get("method") in BODY_METHODS:
            media_type = headers.get("content-type", "").split(";")[0].strip().lower()
            has_body = headers.get("content-length", "0") != "0" or "transfer-encoding" in headers
            if media_type != "application/json" and (media_type or has_body):
                shown = media_type or "none"
                return 415, "invalid_request_error", f"Content-Type must be application/json (got {shown})"
            length = headers.get("content-length", "")
            if length.isdigit() and int(length) > self.max_body_bytes:
                return 413, "invalid_request_error", self._too_large()
        return None

    def _authorized(self, headers: dict[str, str]) -> bool:
        given = headers.get("authorization", "")
        if given[:7].lower() == "bearer " and hmac.compare_digest(given[7:].strip().encode(), self.token.encode()):
            return True
        if self.cookie and "cookie" in headers:
            morsel = SimpleCookie(headers["cookie"]).get(self.cookie)
            return morsel is not None and hmac.compare_digest(morsel.value.encode(), self.token.encode())
        return False

    def _too_large(self) -> str:
        return f"the body is over this endpoint's limit of {self.max_body_bytes} bytes"

    def _busy(self) -> tuple[int, str, str]:
        return (
            429,
            "rate_limit_error",
            f"the requests in progress hold {self.pending} bytes of bodies, this endpoint's limit is "
            f"{self.max_pending_bytes}: retry when they are answered",
        )

    async def _bounded(self, scope: Scope, receive: Receive, send: Send, declared: int) -> None:
        """Run the app on a body of at most ``max_body_bytes`` (a declared length was checked up
        front, and the server holds the body to it; a chunked one is counted as it arrives) while
        the bodies in progress stay within ``max_pending_bytes``; the whole body is read and its
        nesting checked before the app sees any of it."""
        if self.pending + declared > self.max_pending_bytes:
            return await _reply(send, *self._busy())
        held = declared
        self.pending += held
        try:
            chunks, received = [], 0
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    return  # the client went away
                chunks.append(message.get("body", b""))
                received += len(chunks[-1])
                if received > self.max_body_bytes:
                    return await _reply(send, 413, "invalid_request_error", self._too_large())
                if received > held:  # chunked: counted as it comes
                    self.pending += received - held
                    held = received
                    if self.pending > self.max_pending_bytes:
                        return await _reply(send, *self._busy())
                if not message.get("more_body"):
                    break
            body = b"".join(chunks)
            del chunks
            limit = self.max_json_depth
            if body.count(b"[") + body.count(b"{") > limit and json_depth(body) > limit:
                message = f"the JSON body nests deeper than this endpoint's limit of {limit} levels"
                return await _reply(send, 400, "invalid_request_error", message)
            replayed = False

            async def replay() -> Message:
                nonlocal replayed, body
                if replayed:
                    return await receive()  # after the body: the disconnect, when it comes
                replayed = True
                given, body = body, b""
                return {"type": "http.request", "body": given, "more_body": False}

            await self._run(scope, replay, send)
        finally:
            self.pending -= held

    async def _run(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The app; a ``RecursionError`` or ``MemoryError`` it raises before answering is a 400."""
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except EXHAUSTED as exc:
            if started:
                raise
            await _reply(send, 400, "invalid_request_error", _exhausted_message(exc))

    async def _refuse_websocket(
        self, scope: Scope, receive: Receive, send: Send, status: int, kind: str, text: str
    ) -> None:
        """Refuse a websocket upgrade: an HTTP answer with ``status`` where the server can send one
        (ASGI's websocket denial response), else a close before accepting (the handshake's 403)."""
        if (await receive())["type"] != "websocket.connect":
            return
        if "websocket.http.response" not in scope.get("extensions", {}):
            return await send({"type": "websocket.close", "code": 1008, "reason": text[:120]})
        await _reply(send, status, kind, text, prefix="websocket.")


def error_body(status: int, message: str, param: str | None = None, kind: str = "invalid_request_error") -> dict:
    """A refusal in OpenAI's error shape, which its client reads: every door answers in it."""
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


async def _reply(send: Send, status: int, kind: str, message: str, prefix: str = "") -> None:
    body = json.dumps(error_body(status, message, kind=kind)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    if status == 429:
        headers.append((b"retry-after", b"1"))
    await send({"type": f"{prefix}http.response.start", "status": status, "headers": headers})
    await send({"type": f"{prefix}http.response.body", "body": body})
