"""Every HTTP API of trinity fuzzed (issue 32, ``docs/security.md``): the serve proxy, the engines'
OpenAI endpoint, the studio and the Data-Juicer service, each a live server on a free local port.

Requests come from schemathesis, out of each app's OpenAPI schema (valid bodies and invalid
ones), and from hypothesis strategies of raw junk: bytes and JSON of any shape, wrong content
types, a missing or wrong token, another site's ``Origin``, bodies over the limit or sent
chunked, and each API's own fields with wrong values (NaN rewards, a huge ``n``, paths out of
the studio's folder), and hostile shapes (issue 46): JSON nested up to a million deep, bare and
inside each API's own fields; YAML alias bombs and deep YAML where the studio reads YAML; strings
as large as the body limit allows; websocket upgrades with and without the token. Over at least
``REQUESTS`` requests per API (printed with ``pytest -s``):

- no 5xx: the server answers every request with a 2xx or a 4xx;
- no hang: each answer comes within ``ANSWER_SECONDS``, and the server still answers after;
- nothing written on a refused request: the proxy scores and commits nothing, the studio writes
  no file (and none outside its folder ever), the Data-Juicer service keeps its recipe cache;
- a request without the token reaches no handler (401, or 403 for another site's page);
- JSON nested deeper than the guard's limit is a 400 naming it; a websocket upgrade is refused.

Examples are derandomized: a run sends the same requests as the last.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import uvicorn
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from helpers.ports import free_port
from helpers.serve_helpers import serve_explorer
from trinity.common.http_guard import json_depth

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis is not installed (requirements-dev.txt)")
GenerationMode = schemathesis.GenerationMode

REQUESTS = 1000
"""Requests each API gets at least."""
ANSWER_SECONDS = 30.0
"""An answer later than this is a hang."""
TOKEN = "fuzz-token"


# --- the harness ----------------------------------------------------------------------------


@dataclass
class Door:
    """One API under fuzz: its address, its schema, and ``state``: what a refused request must leave as it was."""

    name: str
    url: str
    app: Any
    state: Callable[[], Any] = lambda: None
    open_paths: frozenset[str] = frozenset({"/health"})
    sent: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    slowest: float = 0.0
    """Seconds of the slowest answer."""

    def __post_init__(self) -> None:
        self.http = httpx.Client(base_url=self.url, timeout=ANSWER_SECONDS)
        self.schema = schemathesis.openapi.from_dict(self.app.openapi())

    def send(self, method: str, path: str, *, token: str | None = TOKEN, **kwargs: Any) -> httpx.Response:
        """One request, checked: no 5xx, in time, and a refused one changes nothing."""
        headers = dict(kwargs.pop("headers", None) or {})
        if token is not None:
            headers.setdefault("Authorization", f"Bearer {token}")
        if "json" in kwargs:  # as Python writes it: NaN and Infinity included
            kwargs["content"] = json.dumps(kwargs.pop("json")).encode()
            headers.setdefault("Content-Type", "application/json")
        before = self.state()
        started = time.monotonic()
        try:
            response = self.http.request(method, path, headers=headers, **kwargs)
        except httpx.TimeoutException:
            pytest.fail(f"{self.name}: {method} {path} got no answer in {ANSWER_SECONDS} s (sent {kwargs!r:.300})")
        except httpx.TransportError as exc:  # the server dropped the connection: no answer at all
            pytest.fail(f"{self.name}: {method} {path} got no answer ({exc!r}; sent {kwargs!r:.300})")
        elapsed = time.monotonic() - started
        self.slowest = max(self.slowest, elapsed)
        self.sent += 1
        status = response.status_code
        self.statuses[status] = self.statuses.get(status, 0) + 1
        sent = f"{method} {path} {headers} {kwargs!r:.600}"
        assert status < 500, f"{self.name}: {status} {response.text[:600]}\nfor {sent}"
        assert elapsed < ANSWER_SECONDS, f"{self.name}: {elapsed:.1f} s for {sent}"
        if status >= 400:
            assert self.state() == before, f"{self.name}: the refused request ({status}) changed state: {sent}"
        return response

    def send_case(self, case: Any) -> httpx.Response:
        """A schemathesis case, with the token."""
        sent = case.as_transport_kwargs(base_url=self.url)
        headers = {k: v for k, v in sent["headers"].items() if k.lower() not in ("x-schemathesis-testcaseid",)}
        body = {"json": sent["json"]} if "json" in sent else {"content": sent["data"]} if "data" in sent else {}
        path = sent["url"].removeprefix(self.url)
        return self.send(sent["method"], path, headers=headers, params=sent["params"], **body)

    def report(self) -> None:
        """Print the count (``pytest -s``), and check it."""
        self.http.close()
        statuses = ", ".join(f"{s}: {n}" for s, n in sorted(self.statuses.items()))
        print(f"\n{self.name}: {self.sent} requests, 0 server errors ({statuses}), slowest {self.slowest:.1f} s")
        assert self.sent >= REQUESTS, f"{self.name}: only {self.sent} requests"


def examples(count: int) -> settings:
    """Hypothesis settings for ``count`` reproducible examples against a live server."""
    return settings(
        max_examples=count,
        derandomize=True,
        database=None,
        deadline=None,
        phases=(Phase.explicit, Phase.generate),  # no shrinking: a live server has moved on since
        suppress_health_check=list(HealthCheck),
    )


def fuzz(strategy: st.SearchStrategy, count: int, send: Callable[[Any], Any]) -> None:
    """``send`` each of ``count`` examples of ``strategy``."""

    @examples(count)
    @given(strategy)
    def run(example: Any) -> None:
        send(example)

    run()


def fuzz_schema(door: Door, positive: int, negative: int, skip: tuple[str, ...] = ()) -> None:
    """``positive`` valid and ``negative`` invalid requests per operation of ``door``'s schema
    (``skip``: operations given their own strategy); an operation with nothing to vary once."""
    for result in door.schema.get_all_operations():
        operation = result.ok()
        if f"{operation.method.upper()} {operation.path}" in skip:
            continue
        varied = operation.body or any(True for _ in operation.iter_parameters())
        fuzz(operation.as_strategy(), positive if varied else 1, door.send_case)
        if varied:
            fuzz(operation.as_strategy(generation_mode=GenerationMode.NEGATIVE), negative, door.send_case)


# --- raw junk, for every API ----------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
"""JSON of any shape (NaN and infinities included: Python's json writes and reads them)."""

CONTENT_TYPES = st.sampled_from(
    [
        None,
        "application/json",
        "application/json; charset=latin-1",
        "APPLICATION/JSON",
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/jsonx",
        "",
        ";",
    ]
)


@st.composite
def junk(draw: st.DrawFn, paths: list[str]) -> dict[str, Any]:
    """A request of any method to any path, with a body of any bytes or JSON shape, any content
    type, and the token right, wrong, missing or in the wrong place."""
    path = draw(st.sampled_from([*paths, "/", "/nowhere", "/v1/../health", "/%00", "/" + "a" * 2000]))
    method = draw(st.sampled_from(["GET", "POST", "POST", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"]))
    body = draw(
        st.one_of(
            st.none(),
            st.binary(max_size=300),
            JSON.map(lambda v: json.dumps(v).encode()),
            st.text(max_size=100).map(str.encode),
        )
    )
    headers: dict[str, str] = {}
    content_type = draw(CONTENT_TYPES)
    if content_type is not None:
        headers["Content-Type"] = content_type
    auth = draw(st.sampled_from(["right", "right", "none", "wrong", "scheme", "cookie", "empty"]))
    token = {"right": TOKEN, "wrong": "not-" + TOKEN}.get(auth)
    headers.update(
        {
            "scheme": {"Authorization": f"Basic {TOKEN}"},
            "cookie": {"Cookie": f"token={TOKEN}"},
            "empty": {"Authorization": "Bearer"},
        }.get(auth, {})
    )
    origin = draw(st.sampled_from([None] * 8 + ["http://evil.example", "null"]))
    if origin is not None:
        headers["Origin"] = origin
    chunked = body is not None and draw(st.sampled_from([False] * 4 + [True]))
    content = iter([body]) if chunked else body
    return {"method": method, "path": path, "token": token, "headers": headers, "content": content, "auth": auth}


def send_junk(door: Door, request: dict[str, Any]) -> httpx.Response:
    """Send a ``junk`` request; one without the token reaches no handler."""
    request = dict(request)
    auth = request.pop("auth")
    response = door.send(request.pop("method"), request.pop("path"), **request)
    if auth != "right" and response.request.url.path not in door.open_paths:
        assert response.status_code in (401, 403), (
            f"{door.name}: {response.request.url.path} without the token: {response}"
        )
    return response


def fuzz_junk(door: Door, count: int) -> None:
    fuzz(junk(sorted(door.app.openapi()["paths"])), count, lambda request: send_junk(door, request))


def oversized(door: Door, limit: int) -> None:
    """Bodies over ``limit`` bytes, declared and chunked: a 413 each."""
    body = b"[" + b"0," * (limit // 2) + b"0]"
    for path in door.app.openapi()["paths"]:
        for content in (body, iter([body[: limit // 2], body[limit // 2 :]])):
            response = door.send("POST", path, content=content, headers={"Content-Type": "application/json"})
            assert response.status_code in (413, 405), (door.name, path, response.status_code)


# --- hostile shapes, for every API (issue 46) -------------------------------------------------

DEPTHS = (65, 1_000, 100_000, 1_000_000)
"""Nesting past the guard's limit (64), past Python's recursion limit, and a megabyte of it."""
LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n" for i in range(8)
)
"""A YAML "billion laughs": about 400 bytes, 10**9 nodes once its aliases are expanded."""
DEEP_YAML = ["a: " + "[" * 100_000 + "\n", "a: " + "{b: " * 1000 + "1" + "}" * 1000 + "\n"]
JSON_TYPE = {"Content-Type": "application/json"}


def deep(depth: int) -> list[bytes]:
    """JSON nested ``depth`` deep: arrays, objects, and arrays never closed."""
    return [b"[" * depth + b"]" * depth, b'{"a":' * depth + b"1" + b"}" * depth, b"[" * depth]


def hostile(door: Door, fields: dict[str, list[str]], limit: int, huge: int | None = None) -> None:
    """Every POST path of ``door``: nesting, bare and put for ``VALUE`` in each of the path's
    ``fields`` (bodies it takes): a 400 naming the limit past 64 levels (a 413 past the door's
    ``limit`` of bytes), any answer within it; then a string of ``huge`` bytes (the most the limit
    allows) and the YAML bombs in each field; then websocket upgrades."""
    huge = huge or limit - 1024
    paths = [path for path, ops in door.app.openapi()["paths"].items() if "post" in ops]
    for path in paths:
        for template in ["VALUE", *fields.get(path, [])]:
            prefix, _, suffix = template.encode().partition(b"VALUE")
            outer = json_depth(prefix + b"0" + suffix)
            for depth in DEPTHS:
                for body in deep(depth):
                    content = prefix + body + suffix
                    response = door.send("POST", path, content=content, headers=JSON_TYPE)
                    message = response.json()["error"]["message"]
                    if len(content) > limit:
                        assert response.status_code == 413, (door.name, path, response.text[:300])
                    else:
                        assert response.status_code == 400 and "limit of 64 levels" in message, (door.name, path)
            for body in deep(64 - outer):  # at the limit: whatever the handler makes of it, no 5xx
                door.send("POST", path, content=prefix + body + suffix, headers=JSON_TYPE)
            if template == "VALUE":
                continue
            for value in [
                "x" * (huge - len(template)),
                "\u00e9\U0001f600" * ((huge - len(template)) // 18),
                LAUGHS,
                *DEEP_YAML,
            ]:
                door.send("POST", path, content=prefix + json.dumps(value).encode() + suffix, headers=JSON_TYPE)
    websockets(door, [*paths, "/", "/ws", "/v1/realtime"])


def websockets(door: Door, paths: list[str]) -> None:
    """A websocket upgrade to each path: without the token a 401, from another site's page a 403,
    with the token a 403 (no door has a websocket route); never an open socket or a 5xx."""
    base = door.url.replace("http://", "ws://")
    cases = [
        ({}, 401),
        ({"Authorization": "Bearer not-" + TOKEN}, 401),
        ({"Authorization": f"Bearer {TOKEN}", "Origin": "http://evil.example"}, 403),
        ({"Authorization": f"Bearer {TOKEN}"}, 403),
    ]
    for path in paths:
        for headers, expected in cases:
            started = time.monotonic()
            with pytest.raises(InvalidStatus) as refused:
                connect(base + path, additional_headers=headers, open_timeout=ANSWER_SECONDS).close()
            status = refused.value.response.status_code
            door.sent += 1
            door.statuses[status] = door.statuses.get(status, 0) + 1
            if path in door.open_paths and expected == 401:
                expected = 403  # no token needed there: refused as no route
            assert status == expected, (door.name, path, headers, status)
            door.slowest = max(door.slowest, time.monotonic() - started)
            assert time.monotonic() - started < ANSWER_SECONDS


@contextlib.contextmanager
def serving(app: Any, loop: asyncio.AbstractEventLoop | None = None) -> Iterator[str]:
    """``app`` on a free local port, in a thread (on ``loop`` when given); yields its address."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error", lifespan="off"))
    run = server.run if loop is None else lambda: loop.run_until_complete(server.serve())
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


# --- the studio -----------------------------------------------------------------------------


def files(folder: Path) -> dict[str, tuple[int, int] | None]:
    """Everything under ``folder`` by relative path: a file's (size, mtime in ns), a folder's None."""
    return {
        str(p.relative_to(folder)): None if p.is_dir() else (p.lstat().st_size, p.lstat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
    }


SAVE_PATHS = st.one_of(
    st.sampled_from(
        [
            "config.yaml",
            "sub/dir/run.yml",
            "existing.yaml",
            "../outside/escape.yaml",
            "../outside/existing.yaml",
            "link/escape.yaml",
            "to_outside.yaml",
            "/tmp/trinity-fuzz-escape.yaml",
            "~/trinity-fuzz-escape.yaml",
            "sub",
            "notes.txt",
            "",
            " ",
            "a\x00.yaml",
            "./././x.YAML",
            "sub/../../outside/x.yaml",
            "x" * 300 + ".yaml",
            ".github/workflows/ci.yml",
            ".pre-commit-config.yaml",
            "sub/.hidden/run.yaml",
        ]
    ),
    st.text(max_size=40),
)

STUDIO_TREES = st.one_of(
    JSON,
    st.fixed_dictionaries(
        {},
        optional={
            "project": JSON,
            "mode": st.sampled_from(["both", "explore", "train", "serve", "bench", "nope"]) | JSON,
            "model": st.dictionaries(st.sampled_from(["model_path", "max_prompt_tokens", "max_response_tokens"]), JSON),
            "algorithm": st.dictionaries(st.sampled_from(["algorithm_type", "repeat_times"]), JSON),
            "buffer": st.fixed_dictionaries({"explorer_input": st.dictionaries(st.sampled_from(["taskset"]), JSON)}),
            "cluster": st.dictionaries(st.sampled_from(["node_num", "gpu_per_node"]), JSON),
            "trainer": st.dictionaries(st.sampled_from(["trainer_config_path", "trainer_type"]), JSON),
            "x": st.fixed_dictionaries({"__yaml__": st.text(max_size=40)}),
        },
    ),
)


def test_the_studio(tmp_path: Path) -> None:
    """Its every route; saves anywhere: a refused one writes nothing, none lands outside its root."""
    from trinity.studio.app import create_app

    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "existing.yaml").write_text("project: kept\n")
    (outside / "existing.yaml").write_text("project: kept\n")
    (root / "link").symlink_to(outside)
    (root / "to_outside.yaml").symlink_to(outside / "existing.yaml")
    app = create_app(None, root=root, token=TOKEN)
    with serving(app) as url:
        door = Door("studio", url, app, state=lambda: files(tmp_path), open_paths=frozenset({"/"}))

        def save(body: dict[str, Any]) -> None:
            before = files(tmp_path)
            response = door.send("POST", "/api/save", json=body)
            changed = {p for p, stat in files(tmp_path).items() if before.get(p) != stat}
            assert all(Path(p).parts[0] == "root" for p in changed), f"written outside the root: {changed}"
            if response.status_code == 200:  # the file, and the folders it needed
                target = Path(response.json()["path"]).relative_to(tmp_path)
                assert changed <= {str(target), *map(str, target.parents)}, changed
                assert str(target) in changed

        run_routes = ("GET /api/runs/{run_id}", "POST /api/runs/{run_id}/stop")  # no invalid string to generate
        fuzz_schema(door, positive=60, negative=60, skip=run_routes)
        run_ids = st.text(max_size=40) | st.sampled_from(["..", "../..", "%2e%2e", "x/../..", "20261203-000000-x"])
        fuzz(run_ids, 40, lambda run_id: door.send("GET", f"/api/runs/{quote(run_id, safe='')}"))
        fuzz(run_ids, 40, lambda run_id: door.send("POST", f"/api/runs/{quote(run_id, safe='')}/stop"))
        fuzz(st.fixed_dictionaries({"path": SAVE_PATHS}), 80, lambda b: door.send("POST", "/api/runs", json=b))
        assert door.send("GET", "/api/runs").json() == {"runs": []}  # no config here checks: nothing started
        save_bodies = st.fixed_dictionaries(
            {"config": STUDIO_TREES, "path": SAVE_PATHS},
            optional={"overwrite": st.booleans() | JSON, "save_anyway": st.booleans() | JSON},
        )
        fuzz(save_bodies, 250, save)
        fuzz(st.fixed_dictionaries({"config": STUDIO_TREES}), 150, lambda b: door.send("POST", "/api/check", json=b))
        load_texts = st.text(max_size=200) | JSON.map(json.dumps) | STUDIO_TREES.map(json.dumps)
        fuzz(st.fixed_dictionaries({"text": load_texts}), 100, lambda b: door.send("POST", "/api/load", json=b))
        fuzz_junk(door, 250)
        oversized(door, 8 * 2**20)
        for text in [LAUGHS, *DEEP_YAML]:  # YAML the studio reads: a 400 naming the limit
            for path, body in (
                ("/api/load", {"text": text}),
                ("/api/check", {"config": {"trainer": {"x": {"__yaml__": text}}}}),
                ("/api/save", {"config": {"x": {"__yaml__": text}}, "path": "bomb.yaml", "save_anyway": True}),
            ):
                answer = door.send("POST", path, json=body)
                assert answer.status_code == 400 and "the studio's limit" in answer.json()["detail"], answer.text
        tree = '{"project": VALUE}'
        fields = {
            "/api/check": ['{"config": VALUE}', '{"config": {"x": {"__yaml__": VALUE}}}', '{"config": ' + tree + "}"],
            "/api/load": ['{"text": VALUE}'],
            "/api/save": ['{"config": ' + tree + ', "path": "huge.yaml", "save_anyway": true, "overwrite": true}'],
        }
        hostile(door, fields, limit=2**20)
        assert door.send("GET", "/api/initial").status_code == 200  # it still answers
    assert (outside / "existing.yaml").read_text() == "project: kept\n"
    assert not Path("/tmp/trinity-fuzz-escape.yaml").exists()
    door.report()


# --- the Data-Juicer service ----------------------------------------------------------------

CHEAP_OPS = ["text_length_filter", "alphanumeric_filter", "whitespace_normalization_mapper", "clean_email_mapper"]
CODE_OPS = ["python_lambda_mapper", "python_file_mapper"]


@st.composite
def recipes(draw: st.DrawFn) -> dict[str, Any]:
    """Real operators (and code ones, refused) with arguments of any JSON shape, on rows of any shape."""
    name = draw(st.sampled_from(CHEAP_OPS + CODE_OPS + ["no_such_op"]))
    args = draw(
        st.none()
        | st.dictionaries(st.sampled_from(["min_len", "max_len", "min_ratio", "trust_remote_code", "lambda_str"]), JSON)
    )
    recipe = {"process": [{name: args}], "np": 1}
    if draw(st.booleans()):
        recipe["text_keys"] = draw(st.sampled_from(["text", "other"]) | JSON)
    text = st.text(max_size=30) | JSON
    rows = draw(st.lists(st.dictionaries(st.sampled_from(["text", "other"]), text, max_size=2), max_size=3))
    return {"recipe": recipe, "rows": rows}


def test_the_data_juicer_service() -> None:
    """Its two routes; recipes the server loads and runs: a refused request leaves its cache as it was."""
    pytest.importorskip("data_juicer", reason="py-data-juicer is not installed (trinity-core[data-juicer])")
    from trinity.buffer.data_juicer import create_app

    guard = create_app(token=TOKEN, max_request_mb=1, max_rows=3)
    app = guard.app
    with serving(guard) as url:
        door = Door("data-juicer service", url, app, state=lambda: list(app.state.runners))
        fuzz_schema(door, positive=60, negative=250)
        fuzz(recipes(), 30, lambda body: door.send("POST", "/process", json=body))
        fuzz_junk(door, 700)
        oversized(door, 2**20)
        recipe = '{"recipe": {"process": [{"text_length_filter": {"min_len": 1}}], "np": 1}, "rows": VALUE}'
        fields = {"/process": [recipe, recipe.replace("VALUE", '[{"text": VALUE}]'), '{"recipe": VALUE, "rows": []}']}
        hostile(door, fields, limit=2**20)
        assert door.send("GET", "/health").json()["status"] == "ok"
    door.report()


# --- the engines' OpenAI endpoint -----------------------------------------------------------

MESSAGES = [{"role": "user", "content": "1+1="}]
TEXT = st.text(max_size=40)
SAMPLING = {
    "n": st.integers(-2, 200) | JSON,
    "max_tokens": st.integers(-1, 10**12) | JSON,
    "min_tokens": st.integers(-1, 10**6),
    "temperature": st.floats() | JSON,
    "top_p": st.floats(),
    "top_k": st.integers(-5, 10**9),
    "stop": TEXT | st.lists(TEXT, max_size=3) | JSON,
    "seed": st.integers() | JSON,
    "logprobs": st.booleans() | st.integers(-1, 30) | JSON,
    "return_token_ids": st.booleans() | JSON,
    "stream": st.booleans(),
}
MESSAGE_LISTS = st.lists(
    st.fixed_dictionaries(
        {},
        optional={
            "role": st.sampled_from(["user", "assistant", "system", "tool", "nobody"]) | JSON,
            "content": TEXT
            | JSON
            | st.lists(
                st.fixed_dictionaries({}, optional={"type": st.sampled_from(["text", "image_url"]), "text": JSON})
            ),
            "tool_calls": JSON,
            "name": JSON,
        },
    )
    | JSON,
    max_size=3,
)
CHAT_BODIES = st.fixed_dictionaries(
    {"messages": MESSAGE_LISTS},
    optional={
        **SAMPLING,
        "tools": JSON | st.lists(st.fixed_dictionaries({"type": JSON, "function": JSON})),
        "tool_choice": JSON,
    },
)
COMPLETION_BODIES = st.fixed_dictionaries({"prompt": TEXT | JSON}, optional=SAMPLING)


ENGINE_FIELDS = {
    "/v1/chat/completions": [
        '{"messages": VALUE}',
        '{"messages": [{"role": "user", "content": VALUE}], "max_tokens": 1}',
        '{"messages": [{"role": "user", "content": "1+1=", "name": VALUE}], "max_tokens": 1}',
        '{"messages": [{"role": "user", "content": "1+1="}], "tools": [{"type": "function", "function": VALUE}]}',
    ],
    "/v1/completions": ['{"prompt": VALUE, "max_tokens": 1}', '{"prompt": "1", "stop": VALUE, "max_tokens": 1}'],
}
"""Where each route of an OpenAI endpoint takes a value (the proxy's chat route too)."""


def test_the_engine_openai_endpoint(tiny_model_dir: Path) -> None:
    """The transformers engine's endpoint on the tiny model (a 24-token context keeps 1,000
    requests quick); the engine answers a fixed prompt after the fuzz as it did before."""
    from helpers.engine_helpers import transformers_client
    from trinity.config.schema import InferenceModelConfig, ModelConfig
    from trinity.rollout.openai_api import openai_app

    config = InferenceModelConfig(
        model_path=str(tiny_model_dir), engine_type="transformers", name="tiny", api_key=TOKEN
    )
    model = ModelConfig(model_path=str(tiny_model_dir), max_model_len=24)
    with transformers_client(config, model) as client:
        url = client.serve_openai(config).removesuffix("/v1")
        door = Door("engine OpenAI endpoint", url, openai_app(client, config))
        greedy = {"model": "tiny", "prompt": "1+1=", "max_tokens": 4, "temperature": 0.0, "return_token_ids": True}
        before = door.send("POST", "/v1/completions", json=greedy).json()["choices"]
        fuzz_schema(door, positive=40, negative=150)
        fuzz(CHAT_BODIES, 150, lambda body: door.send("POST", "/v1/chat/completions", json=body))
        fuzz(COMPLETION_BODIES, 100, lambda body: door.send("POST", "/v1/completions", json=body))
        fuzz_junk(door, 400)
        oversized(door, 8 * 2**20)
        hostile(door, ENGINE_FIELDS, limit=8 * 2**20, huge=2**20)
        assert door.send("POST", "/v1/completions", json=greedy).json()["choices"] == before
    door.report()


# --- the serve proxy ------------------------------------------------------------------------


def test_the_serve_proxy(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Chat completions through to the engine, feedback on real and made-up ids with rewards of
    any value, commits: a refused request records, scores and commits nothing, and what is
    committed is exactly what accepted feedback scored."""
    from trinity.buffer import open_experience_reader
    from trinity.explorer.serve import ServeProxy
    from trinity.rollout.openai_api import guarded

    explorer = serve_explorer(tmp_path, tiny_model_dir, TOKEN)
    proxy = ServeProxy(explorer.serve_host)

    def state() -> tuple:
        return (list(proxy.recorded), len(proxy.ready), list(proxy.scored), proxy.committed, proxy.dropped)

    try:
        with serving(guarded(proxy.app, "127.0.0.1", proxy.key), loop=explorer.runner.loop) as url:
            door = Door("serve proxy", url, proxy.app, state=state)
            chat = {"model": "policy", "messages": MESSAGES, "n": 2}
            ids = [door.send("POST", "/v1/chat/completions", json=chat).json()["id"] for _ in range(40)]
            scored, accepted = 0, set()

            def feedback(body: Any) -> None:
                nonlocal scored
                waiting = {m: len(proxy.recorded[m][1]) for m in proxy.recorded}
                ready = len(proxy.ready)
                response = door.send("POST", "/feedback", json=body)
                if response.status_code == 200:  # all of it: every id listed, once, and a finite reward
                    choices = sum(waiting[m] for m in body["msg_ids"])
                    assert len(proxy.ready) == ready + choices and math.isfinite(body["reward"])
                    scored += choices
                    accepted.update(body["msg_ids"])

            def commit(body: Any) -> None:
                ready = len(proxy.ready)
                before = proxy.committed + proxy.dropped
                response = door.send("POST", "/commit", json=body)
                assert response.status_code == 200, response.text
                assert proxy.committed + proxy.dropped == before + ready and not proxy.ready

            known = st.sampled_from(ids)
            feedbacks = st.fixed_dictionaries(
                {
                    "reward": st.sampled_from([math.nan, math.inf, -math.inf, 1.0])
                    | st.floats()
                    | st.integers()
                    | JSON,
                    "msg_ids": st.lists(known, min_size=1, max_size=3) | st.lists(known | TEXT, max_size=3) | JSON,
                },
                optional={"task_id": TEXT | JSON, "run_id": st.integers() | JSON, "extra": JSON},
            )
            fuzz_schema(door, positive=40, negative=100, skip=("POST /commit",))
            fuzz(feedbacks, 250, feedback)
            fuzz(st.none() | JSON, 10, commit)
            fuzz(CHAT_BODIES, 100, lambda body: door.send("POST", "/v1/chat/completions", json=body))
            fuzz_junk(door, 350)
            oversized(door, 8 * 2**20)
            fields = {
                "/v1/chat/completions": ENGINE_FIELDS["/v1/chat/completions"],
                "/feedback": [
                    '{"reward": 1.0, "msg_ids": VALUE}',
                    '{"reward": 1.0, "msg_ids": ["x"], "task_id": VALUE}',
                ],
            }
            hostile(door, fields, limit=8 * 2**20, huge=2**20)
            commit(None)
            assert proxy.committed + proxy.dropped == scored > 0
        storage = explorer.config.buffer.trainer_input.experience_buffer
        rows = open_experience_reader(storage, "fuzz-audit", auto_commit=False).read(10_000, timeout=0.5)
        assert len(rows) == proxy.committed  # the buffer holds what accepted feedback scored, and only that
        assert {exp.info["msg_id"] for exp in rows} <= accepted and all(math.isfinite(exp.reward) for exp in rows)
    finally:
        explorer.shutdown()
    door.report()
