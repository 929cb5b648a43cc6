"""What every HTTP door of trinity checks before a handler runs: the origin, the token, the content type, the size.

One ASGI middleware, worn by the serve proxy, the engines' OpenAI endpoint, the studio and the
Data-Juicer service. It refuses a browser request from another site's page (``Origin``) and a
loopback door addressed by another host name (DNS rebinding) with 403; a request without the
door's token (``Authorization: Bearer``, or the named cookie for a browser page; compared in
constant time; ``open_paths`` need none) with 401; a body that is not ``application/json`` with 415
(JSON makes a browser ask first, and no door says yes); a body over ``max_body_bytes`` with 413.
Errors are OpenAI's shape, which its client reads. Who can reach each door: ``docs/security.md``.
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
KEEP_ALIVE_SECONDS = 75
"""How long every door (uvicorn's ``timeout_keep_alive``) keeps an idle connection open: longer
than clients keep theirs pooled (httpx, inside the openai client, 5 s). At uvicorn's default of
5 s too, a loaded machine let the server close a connection just as the client sent on it: the
request failed with "connection reset by peer" (the serve-mode learning test, 2026-12-01)."""


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


def _host_name(host: str) -> str:
    """The name in a ``Host`` header, without its port (``[::1]:80`` -> ``[::1]``)."""
    if host.startswith("["):
        return host.split("]")[0] + "]"
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


class RequestGuard:
    """ASGI middleware: token, JSON content type and body size, before the app sees a request."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str | None = None,
        cookie: str | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        open_paths: Iterable[str] = ("/health",),
        hosts: Iterable[str] | None = None,
    ):
        self.app = app
        self.hosts = frozenset(hosts) if hosts is not None else None
        self.token = token or None
        self.cookie = cookie
        self.max_body_bytes = max_body_bytes
        self.open_paths = frozenset(open_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        problem = self._refusal(scope, headers)
        if problem:
            return await _reply(send, *problem)
        if scope["method"] not in BODY_METHODS:
            return await self.app(scope, receive, send)
        return await self._bounded(scope, receive, send, declared="content-length" in headers)

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
        if scope["method"] in BODY_METHODS:
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

    async def _bounded(self, scope: Scope, receive: Receive, send: Send, declared: bool) -> None:
        """Run the app on a body of at most ``max_body_bytes``. A declared length was checked up
        front (and the server holds the body to it); a body without one (chunked) is read here
        first, up to the limit, so that one over it is a 413 before the app sees any of it."""
        if declared:
            return await self.app(scope, receive, send)
        chunks, received = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunks.append(message.get("body", b""))
            received += len(chunks[-1])
            if received > self.max_body_bytes:
                return await _reply(send, 413, "invalid_request_error", self._too_large())
            if not message.get("more_body"):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()  # after the body: the disconnect, when it comes
            replayed = True
            return {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        await self.app(scope, replay, send)


def error_body(status: int, message: str, param: str | None = None, kind: str = "invalid_request_error") -> dict:
    """A refusal in OpenAI's error shape, which its client reads: every door answers in it."""
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


async def _reply(send: Send, status: int, kind: str, message: str) -> None:
    body = json.dumps(error_body(status, message, kind=kind)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
