"""The serve proxy's bounds, in process: a serve-mode explorer on the tiny model, the proxy's app
behind its guard, the official ``openai`` client through an ASGI transport (the end-to-end run
over HTTP, with the trainer: tests/e2e/test_serve.py)."""

from __future__ import annotations

import asyncio
import ctypes
import gc
import json
import logging
import sqlite3
import threading
import tracemalloc
from collections.abc import Awaitable
from pathlib import Path
from typing import TypeVar

import httpx
import openai
import pytest

from helpers.serve_helpers import serve_explorer
from trinity.explorer import serve
from trinity.rollout.openai_api import guarded
from trinity.synchronizer.signals import SyncSignals, TrainerFinished

KEY = "sesame"
MESSAGES = [{"role": "user", "content": "1+1="}]
T = TypeVar("T")


@pytest.fixture(scope="module")
def proxy(tmp_path_factory, tiny_model_dir: Path):
    explorer = serve_explorer(tmp_path_factory.mktemp("serve"), tiny_model_dir, KEY)
    yield serve.ServeProxy(explorer.serve_host)
    explorer.shutdown()


def _client(proxy: serve.ServeProxy) -> httpx.AsyncClient:
    """An HTTP client of the proxy's app behind its guard, carrying the key."""
    transport = httpx.ASGITransport(app=guarded(proxy.app, "127.0.0.1", proxy.key))
    return httpx.AsyncClient(
        transport=transport, base_url="http://127.0.0.1", headers={"Authorization": "Bearer sesame"}
    )


def _on_explorer_loop(proxy: serve.ServeProxy, work: Awaitable[T]) -> T:
    """``work`` on the explorer's loop, where ``Explorer.serve`` runs the proxy."""
    return proxy.host.loop.run_until_complete(work)


def _chat_ids(proxy: serve.ServeProxy, count: int) -> list[str]:
    """``count`` chat completions through the proxy (its engine requires the key: the proxy sends it)."""
    agent = openai.AsyncOpenAI(base_url="http://127.0.0.1/v1", api_key="sesame", http_client=_client(proxy))

    async def chats() -> list[str]:
        return [(await agent.chat.completions.create(model="policy", messages=MESSAGES)).id for _ in range(count)]

    return _on_explorer_loop(proxy, chats())


def _call(proxy: serve.ServeProxy, method: str, path: str, **kwargs) -> httpx.Response:
    async def call() -> httpx.Response:
        async with _client(proxy) as http:
            return await http.request(method, path, **kwargs)

    return _on_explorer_loop(proxy, call())


def test_unscored_responses_beyond_the_limit_expire_oldest_first(proxy, monkeypatch):
    monkeypatch.setattr(serve, "MAX_RECORDED", 2)
    expired = _call(proxy, "GET", "/metrics").json()["expired_responses"]
    oldest, *newest = _chat_ids(proxy, 3)
    metrics = _call(proxy, "GET", "/metrics").json()
    assert (metrics["expired_responses"] - expired, metrics["waiting_responses"]) == (1, 2)
    gone = _call(proxy, "POST", "/feedback", json={"reward": 1.0, "msg_ids": [oldest]})
    assert gone.status_code == 404 and "expired" in gone.json()["error"]["message"]
    assert _call(proxy, "POST", "/feedback", json={"reward": 1.0, "msg_ids": newest}).status_code == 200


def test_unscored_responses_expire_after_their_time(proxy, monkeypatch):
    _chat_ids(proxy, 1)
    monkeypatch.setattr(serve, "RECORDED_TTL_SECONDS", 0.0)
    metrics = _call(proxy, "GET", "/metrics").json()
    assert metrics["waiting_responses"] == 0 and metrics["expired_responses"] >= 1


def test_a_finished_trainer_is_no_error_while_the_proxy_follows_weights(proxy, monkeypatch, caplog):
    """After the trainer's last version the proxy keeps serving it, and logs no failure every poll."""
    sync = proxy.host.engines.sync
    SyncSignals(proxy.host.config).finish(proxy.host.engines.version)  # as a finished trainer says it
    try:
        with pytest.raises(TrainerFinished):  # what every poll now meets
            sync.fetch(proxy.host.engines.version + 1, 0)
        monkeypatch.setattr(proxy, "weights_poll_seconds", 0.01)
        with pytest.raises(TimeoutError):
            _on_explorer_loop(proxy, asyncio.wait_for(proxy._follow_weights(), timeout=0.2))
    finally:
        (sync.signals.root / "finished.json").unlink()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


def test_the_proxy_looks_for_newer_weights_every_half_check_interval(proxy, monkeypatch):
    """``explorer.service_status_check_interval``: Trinity-RFT's proxy checks versions every half of it."""
    monkeypatch.setattr(proxy.host.config.explorer, "service_status_check_interval", 7)
    slept = []
    real_sleep = asyncio.sleep  # the engine endpoint's uvicorn ticks with it on its own thread's loop

    async def sleep(seconds: float) -> None:
        if threading.current_thread() is not threading.main_thread():
            return await real_sleep(seconds)
        slept.append(seconds)
        if len(slept) == 2:
            raise asyncio.CancelledError

    monkeypatch.setattr(serve.asyncio, "sleep", sleep)
    with pytest.raises(asyncio.CancelledError):
        _on_explorer_loop(proxy, serve.ServeProxy(proxy.host)._follow_weights())
    assert slept == [3.5, 3.5]


def test_engines_load_newer_weights_in_waves_leaving_min_running_model_num_serving(
    tmp_path, tiny_model_dir: Path, monkeypatch
):
    """Two engines, ``min_running_model_num: 1``: each loads while the other serves, once its own
    requests are done; the responses after it carry the new version."""
    from transformers import AutoModelForCausalLM

    from trinity.synchronizer.methods import WeightUpdate

    overrides = ("explorer.rollout_model.engine_num=2", "explorer.min_running_model_num=1")
    explorer = serve_explorer(tmp_path, tiny_model_dir, KEY, *overrides)
    try:
        proxy = serve.ServeProxy(explorer.serve_host)
        loads = []  # (engine loading, engines serving meanwhile)
        for i, engine in enumerate(explorer.engines.clients):

            def call(method, *args, i=i, original=engine.call):
                if method == "update_weights":
                    loads.append((i, list(proxy.serving)))
                return original(method, *args)

            monkeypatch.setattr(engine, "call", call)
        weights = AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()
        update = WeightUpdate(version=explorer.engines.version + 1, state_dict=weights)

        async def load_while_engine_0_is_busy():
            proxy.inflight[0] = 1  # a request in progress on engine 0
            loading = asyncio.ensure_future(proxy.load(update))
            await asyncio.sleep(0.3)
            waiting = (list(loads), list(proxy.serving))
            proxy.inflight[0] = 0
            await loading
            return waiting

        assert _on_explorer_loop(proxy, load_while_engine_0_is_busy()) == ([], [1])  # engine 0 waits, out of turn
        assert loads == [(0, [1]), (1, [0])] and proxy.serving == [0, 1]
        assert explorer.engines.version == update.version
        (chat_id,) = _chat_ids(proxy, 1)
        assert proxy.recorded[chat_id][1][0].model_version == update.version
    finally:
        explorer.shutdown()


def test_db_url_records_each_answer_and_its_reward_feedback(proxy, tmp_path, monkeypatch):
    """``explorer.db_url``: the proxy's history, read back with sqlite3 (another reader than the writer)."""
    db = tmp_path / "history.db"
    monkeypatch.setattr(proxy.host.config.explorer, "db_url", f"sqlite:///{db}")
    recording = serve.ServeProxy(proxy.host)
    first, second = _chat_ids(recording, 2)
    assert _call(recording, "POST", "/feedback", json={"reward": 0.5, "msg_ids": [first], "task_id": "t"}).is_success
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT msg_id, model_version, messages, responses, reward, task_id FROM proxy_history")
        rows = {row[0]: row[1:] for row in rows}
    assert set(rows) == {first, second}
    version, messages, responses, reward, task = rows[first]
    assert (version, json.loads(messages), reward, task) == (proxy.host.engines.version, MESSAGES, 0.5, "t")
    assert len(json.loads(responses)) == 1 and rows[second][3:] == (None, None)  # not scored yet


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_a_number_json_cannot_forward_is_a_bad_request(proxy, number):
    """Python's JSON parser reads these; the request to the engine cannot carry them (the fuzz test
    found a 502 for a 1e999 nested in a message)."""
    body = f'{{"model": "policy", "messages": [{{"role": "user", "content": "1+1=", "x": {number}}}]}}'
    response = _call(proxy, "POST", "/v1/chat/completions", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 400, response.text
    assert "is not a finite JSON number" in response.json()["error"]["message"]


# --- bytes, not counts (issue 46) -----------------------------------------------------------

KEPT_NAME = "n" * 64 * 1024
"""A message field the proxy keeps (``name``: the tiny model's chat template does not render it)."""
DROPPED = "p" * 256 * 1024
"""A field no chat message has: forwarded to the engine, never held."""
LARGE = {"model": "policy", "messages": [{"role": "user", "content": "1+1=", "name": KEPT_NAME, "padding": DROPPED}]}


def _rss() -> int:
    """This process's resident memory in bytes (the proxy runs in it), once the free memory that
    glibc's allocator keeps in its arenas is handed back (``malloc_trim``): what is held, not what
    the allocator cached (without the trim, 300 chats left 40 MiB cached and 2 MiB held)."""
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _flood(proxy: serve.ServeProxy, count: int, at_once: int = 10) -> int:
    """``count`` chats of ``LARGE`` through the proxy, ``at_once`` at a time; the most it held after any batch."""

    async def flood() -> int:
        peak = 0
        async with _client(proxy) as http:
            for _ in range(count // at_once):
                answers = await asyncio.gather(*(http.post("/v1/chat/completions", json=LARGE) for _ in range(at_once)))
                assert all(a.status_code == 200 for a in answers), [a.text[:300] for a in answers]
                peak = max(peak, proxy.held_bytes())
        return peak

    return _on_explorer_loop(proxy, flood())


def test_memory_stays_within_the_byte_bound_under_1000_large_requests(tmp_path, tiny_model_dir: Path):
    """``explorer.proxy_max_memory_mb: 2``: 1,000 chats of 320 KiB each (64 KiB kept, 256 KiB in a
    field no message has). What the proxy holds stays within 2 MiB, the oldest responses expire,
    the dropped field is held nowhere, and the process grows by far less than the 320 MB sent."""
    explorer = serve_explorer(tmp_path, tiny_model_dir, KEY, "explorer.proxy_max_memory_mb=2")
    try:
        proxy = serve.ServeProxy(explorer.serve_host)
        assert proxy.max_held_bytes == 2 * 2**20
        _flood(proxy, 20)  # warm: the engine's and the clients' first allocations
        rss = _rss()
        peak = _flood(proxy, 1000)
        grown = _rss() - rss
        metrics = _call(proxy, "GET", "/metrics").json()
        print(
            f"\n1,000 chats of 320 KiB: held at most {peak} bytes (bound {proxy.max_held_bytes}); RSS grew {grown} bytes"
        )
        assert peak <= proxy.max_held_bytes and metrics["held_bytes"] <= metrics["max_held_bytes"] == 2 * 2**20
        assert metrics["requests"] == 1020 and 0 < metrics["waiting_responses"] < 40
        assert metrics["expired_responses"] == 1020 - metrics["waiting_responses"]
        kept = [exp for _, experiences, _ in proxy.recorded.values() for exp in experiences]
        assert all(exp.messages[0] == {"role": "user", "content": "1+1=", "name": KEPT_NAME} for exp in kept)
        assert grown < 16 * 2**20  # unbounded, the 1,000 would hold 64 MiB kept (320 MiB before issue 46)
        newest = list(proxy.recorded)[-1]  # what is kept can be scored
        assert _call(proxy, "POST", "/feedback", json={"reward": 1.0, "msg_ids": [newest]}).status_code == 200
    finally:
        explorer.shutdown()


def test_the_bytes_counted_are_at_least_the_bytes_held(proxy):
    """The proxy's count against tracemalloc's of the Python objects it keeps (tensors are counted
    by their size, which tracemalloc does not see)."""
    _flood(proxy, 10)
    gc.collect()
    tracemalloc.start()
    try:
        before, counted = tracemalloc.get_traced_memory()[0], proxy.held_bytes()
        _flood(proxy, 20)
        gc.collect()
        traced, counted = tracemalloc.get_traced_memory()[0] - before, proxy.held_bytes() - counted
    finally:
        tracemalloc.stop()
    assert counted >= traced > 20 * len(KEPT_NAME), (counted, traced)


def test_scored_experiences_that_fill_the_bound_refuse_chats_until_a_commit(proxy, monkeypatch):
    """Scored experiences cannot expire: while they fill the bound a chat is a 409 asking for a commit."""
    assert _call(proxy, "POST", "/commit").status_code == 200
    _flood(proxy, 2, at_once=1)
    ids = list(proxy.recorded)[-2:]
    assert _call(proxy, "POST", "/feedback", json={"reward": 1.0, "msg_ids": ids}).status_code == 200
    monkeypatch.setattr(proxy, "max_held_bytes", proxy.ready_bytes + 1024)
    refused = _call(proxy, "POST", "/v1/chat/completions", json=LARGE)
    assert refused.status_code == 409 and "/commit them first" in refused.json()["error"]["message"]
    assert _call(proxy, "POST", "/commit").json()["committed"] == 2
    assert _call(proxy, "POST", "/v1/chat/completions", json=LARGE).status_code == 200
    assert proxy.held_bytes() <= proxy.max_held_bytes


def test_messages_over_the_bound_are_a_413_and_ids_over_the_column_a_422(proxy, monkeypatch):
    """``proxy_history``'s msg_id and task_id columns are 256 characters wide: a longer one is
    refused before anything is scored (it failed the database write after scoring in memory)."""
    assert _call(proxy, "POST", "/commit").status_code == 200
    monkeypatch.setattr(proxy, "max_held_bytes", 32 * 1024)
    over = _call(proxy, "POST", "/v1/chat/completions", json=LARGE)
    assert over.status_code == 413 and "explorer.proxy_max_memory_mb" in over.json()["error"]["message"]
    (chat_id,) = _chat_ids(proxy, 1)
    for body, field in (
        ({"reward": 1.0, "msg_ids": [chat_id], "task_id": "t" * 257}, "task_id"),
        ({"reward": 1.0, "msg_ids": ["m" * 257]}, "msg_ids.0"),
    ):
        refused = _call(proxy, "POST", "/feedback", json=body)
        assert refused.status_code == 422 and refused.json()["error"]["message"].startswith(field), refused.text
    assert chat_id in proxy.recorded  # nothing scored
    fits = _call(proxy, "POST", "/feedback", json={"reward": 1.0, "msg_ids": [chat_id], "task_id": "t" * 256})
    assert fits.status_code == 200
