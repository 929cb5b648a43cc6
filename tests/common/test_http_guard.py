"""The guard every HTTP door wears: each refusal, and that what it lets through reaches the app intact."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import httpx
import pytest
import uvicorn
from fastapi import FastAPI, Request, WebSocket
from fastapi.testclient import TestClient
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from helpers.ports import free_port
from trinity.common.http_guard import (
    DEFAULT_MAX_JSON_DEPTH,
    LOOPBACK_HOSTS,
    RequestGuard,
    is_loopback,
    json_depth,
)

TOKEN = "s3cret-token"


def guarded(**guard_args) -> tuple[TestClient, list[bytes]]:
    app = FastAPI()
    seen: list[bytes] = []

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    @app.get("/state")
    async def state():
        return {"bodies": len(seen)}

    @app.post("/write")
    async def write(request: Request):
        seen.append(await request.body())
        return {"written": len(seen)}

    app.add_middleware(RequestGuard, **guard_args)
    return TestClient(app, base_url="http://127.0.0.1:8000"), seen


def test_a_token_is_required_except_on_open_paths():
    client, seen = guarded(token=TOKEN)
    assert client.get("/health").status_code == 200
    refused = client.post("/write", json={"a": 1})
    assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
    assert refused.json()["error"]["type"] == "authentication_error"
    assert client.post("/write", json={"a": 1}, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.get("/state", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    assert client.post("/write", json={"a": 1}, headers={"Authorization": f"bearer {TOKEN}"}).status_code == 200
    assert seen == [b'{"a":1}']  # the refused requests wrote nothing


def test_a_browser_page_may_carry_the_token_in_its_cookie():
    client, _ = guarded(token=TOKEN, cookie="trinity_token")
    assert client.get("/state").status_code == 401
    assert client.get("/state", cookies={"trinity_token": "nope"}).status_code == 401
    assert client.get("/state", cookies={"trinity_token": TOKEN}).status_code == 200


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"]
)
def test_only_json_bodies_are_accepted(content_type):
    """What a web page may post cross-site without a preflight is refused, with or without a body."""
    client, seen = guarded()
    for body in (b'{"a": 1}', b""):
        answer = client.post("/write", content=body, headers={"Content-Type": content_type})
        assert answer.status_code == 415 and content_type.split(";")[0] in answer.json()["error"]["message"]
    assert client.post("/write", content=b"{}", headers={}).status_code == 415  # a body, no type
    assert client.post("/write").status_code == 200  # no body, no type: a client's bare POST
    assert client.post("/write", json={"b": 2}).status_code == 200
    assert seen == [b"", b'{"b":2}']


def test_a_body_over_the_limit_is_refused_whether_or_not_its_length_is_declared():
    client, seen = guarded(max_body_bytes=100)
    declared = client.post("/write", json={"x": "y" * 200})
    assert declared.status_code == 413 and "100 bytes" in declared.json()["error"]["message"]

    def chunks():  # no Content-Length: the guard counts what arrives
        for _ in range(10):
            yield b"x" * 30

    streamed = client.post("/write", content=chunks(), headers={"Content-Type": "application/json"})
    assert streamed.status_code == 413
    assert client.post("/write", json={"x": "y" * 50}).status_code == 200
    assert len(seen) == 1


def test_another_sites_page_is_refused_even_with_a_simple_request():
    client, seen = guarded()
    cross = client.post("/write", headers={"Origin": "http://evil.example"})
    assert cross.status_code == 403 and "evil.example" in cross.json()["error"]["message"]
    assert client.get("/state", headers={"Origin": "http://evil.example"}).status_code == 403
    assert (
        client.post("/write", json={}, headers={"Origin": "http://127.0.0.1:8000"}).status_code == 200
    )  # its own page
    assert len(seen) == 1


def test_a_loopback_door_answers_to_loopback_names_only():
    """A page at a name that resolves to 127.0.0.1 (DNS rebinding) sends its own name as Host."""
    client, _ = guarded(hosts=LOOPBACK_HOSTS)
    assert client.get("/state").status_code == 200
    assert client.get("/state", headers={"Host": "localhost:8000"}).status_code == 200
    assert client.get("/state", headers={"Host": "[::1]:8000"}).status_code == 200
    rebound = client.get("/state", headers={"Host": "rebind.example:8000"})
    assert rebound.status_code == 403 and "rebind.example" in rebound.json()["error"]["message"]


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.3.2.1", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.5", False),
        ("myhost", False),
    ],
)
def test_is_loopback(host, loopback):
    assert is_loopback(host) is loopback


# --- nesting, bytes in progress, exhaustion, websockets (issue 46) ---------------------------


@pytest.mark.parametrize(
    ("body", "depth"),
    [
        (b"0", 0),
        (b"[[]]", 2),
        (b'{"a": [1, {"b": "[[[["}]}', 3),  # brackets in a string are text
        (b'["a\\\\", [[1]]]', 3),  # an escaped backslash ends the string
        (b'["a\\" [[[", [[]]]', 3),  # an escaped quote does not
        (b'["unterminated [[[[', 1),
        (b"[[[[[[", 6),  # malformed: what a parser meets before it fails
        (b"]]]][", 0),
    ],
)
def test_json_depth_reads_the_nesting_off_the_raw_bytes(body, depth):
    assert json_depth(body) == depth


def test_json_nested_deeper_than_the_limit_is_a_400_naming_it_declared_or_chunked():
    client, seen = guarded(max_json_depth=5)
    deep = "[" * 6 + "]" * 6
    refused = client.post("/write", content=deep, headers={"Content-Type": "application/json"})
    assert refused.status_code == 400 and "limit of 5 levels" in refused.json()["error"]["message"]
    chunked = client.post(
        "/write", content=iter([b"[[[", b"[[[", b"]]]]]]"]), headers={"Content-Type": "application/json"}
    )
    assert chunked.status_code == 400
    bomb = client.post("/write", content=b"[" * 1_000_000, headers={"Content-Type": "application/json"})
    assert bomb.status_code == 400
    at_the_limit = "[" * 5 + "]" * 5
    assert client.post("/write", content=at_the_limit, headers={"Content-Type": "application/json"}).status_code == 200
    text = json.dumps({"text": "[" * 100})  # brackets inside a string are no nesting
    assert client.post("/write", content=text, headers={"Content-Type": "application/json"}).status_code == 200
    assert seen == [at_the_limit.encode(), text.encode()]


def test_the_default_depth_limit_keeps_pythons_parsers_from_recursing_out():
    """The default limit is far below where ``json.loads`` raises a RecursionError."""
    client, seen = guarded()
    for depth in (DEFAULT_MAX_JSON_DEPTH, DEFAULT_MAX_JSON_DEPTH + 1, 100_000):
        answer = client.post("/write", content="[" * depth + "]" * depth, headers={"Content-Type": "application/json"})
        assert answer.status_code == (200 if depth <= DEFAULT_MAX_JSON_DEPTH else 400)
    json.loads(seen[0])


def test_bodies_in_progress_beyond_their_byte_limit_are_a_429():
    """Two requests whose handlers wait: the second's body would take the bytes in progress over the
    limit; once the first is answered, the same body is taken."""
    app = FastAPI()
    release = asyncio.Event()

    @app.post("/slow")
    async def slow(request: Request):
        body = await request.body()
        await release.wait()
        return {"bytes": len(body)}

    guard = RequestGuard(app, max_pending_bytes=1000)

    async def scenario():
        transport = httpx.ASGITransport(app=guard)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            first = asyncio.ensure_future(http.post("/slow", json={"x": "a" * 600}))
            while guard.pending == 0:
                await asyncio.sleep(0.01)
            refused = await http.post("/slow", json={"x": "b" * 600})
            release.set()
            assert (await first).status_code == 200
            again = await http.post("/slow", json={"x": "b" * 600})
            return refused, again

    refused, again = asyncio.run(scenario())
    assert refused.status_code == 429 and "limit is 1000" in refused.json()["error"]["message"]
    assert again.status_code == 200 and guard.pending == 0


@pytest.mark.parametrize("exhausted", [RecursionError, MemoryError])
@pytest.mark.parametrize("wrapped", [True, False])
def test_a_handler_out_of_stack_or_memory_is_a_400(exhausted, wrapped):
    """Behind the guard as the doors wear it: wrapping the app (the proxy, the endpoints) or as its
    middleware (the studio)."""
    app = FastAPI()

    @app.post("/deep")
    async def deep():
        raise exhausted("too much")

    if wrapped:
        client = TestClient(RequestGuard(app), base_url="http://127.0.0.1", raise_server_exceptions=False)
    else:
        app.add_middleware(RequestGuard)
        client = TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False)
    answer = client.post("/deep", json={})
    assert answer.status_code == 400 and exhausted.__name__ in answer.json()["error"]["message"]


@pytest.fixture(scope="module")
def websocket_door():
    """A real server (uvicorn, on a free loopback port) with an echo websocket behind the guard."""
    app = FastAPI()

    @app.websocket("/ws")
    async def echo(peer: WebSocket):
        await peer.accept()
        await peer.send_text(await peer.receive_text())
        await peer.close()

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            RequestGuard(app, token=TOKEN, cookie="c", hosts=LOOPBACK_HOSTS),
            host="127.0.0.1",
            port=port,
            log_level="error",
            lifespan="off",
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    yield f"ws://127.0.0.1:{port}/ws"
    server.should_exit = True
    thread.join(timeout=30)


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 401),
        ({"Authorization": "Bearer wrong"}, 401),
        ({"Authorization": f"Bearer {TOKEN}", "Origin": "http://evil.example"}, 403),
        ({"Authorization": f"Bearer {TOKEN}", "Host": "rebind.example"}, 403),
    ],
)
def test_a_websocket_upgrade_gets_the_token_origin_and_host_checks(websocket_door, headers, status):
    url, host = websocket_door, headers.pop("Host", None)
    if host:  # the address a rebound name gives: this loopback server, under another name
        url = url.replace("127.0.0.1", host)
    with pytest.raises(InvalidStatus) as refused:
        sock = socket.create_connection(("127.0.0.1", int(websocket_door.split(":")[2].split("/")[0])))
        connect(url, sock=sock, additional_headers=headers, open_timeout=10)
    assert refused.value.response.status_code == status
    assert b"error" in refused.value.response.body


@pytest.mark.parametrize("credential", [{"Authorization": f"Bearer {TOKEN}"}, {"Cookie": f"c={TOKEN}"}])
def test_a_websocket_with_the_token_reaches_the_app(websocket_door, credential):
    with connect(websocket_door, additional_headers=credential, open_timeout=10) as opened:
        opened.send("hello")
        assert opened.recv(timeout=10) == "hello"
