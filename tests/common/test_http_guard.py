"""The guard every HTTP door wears: each refusal, and that what it lets through reaches the app intact."""

from __future__ import annotations

import pytest
from fastapi import FastAPI, Request
from fastapi.testclient import TestClient

from trinity.common.http_guard import LOOPBACK_HOSTS, RequestGuard, is_loopback

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
