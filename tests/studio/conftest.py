"""A live studio server per test and a real headless Chromium (Debian's) driven by Playwright."""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
import uvicorn

from helpers.ports import free_port
from trinity.studio.app import create_app
from trinity.studio.runs import StudioRuns

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


TOKEN = "browser-test-token"


@pytest.fixture
def studio(tmp_path) -> Iterator[Callable[[Path | None], str]]:
    """Start the studio on a free port, saving in ``tmp_path`` (opening the given file); returns
    the address it would print, token included."""
    servers: list[tuple[uvicorn.Server, threading.Thread]] = []

    def start(config_path: Path | None = None) -> str:
        port = free_port()
        app = create_app(config_path, root=tmp_path, token=TOKEN)
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline, "the studio did not start in 30 s"
            time.sleep(0.05)
        servers.append((server, thread))
        return f"http://127.0.0.1:{port}/?token={TOKEN}"

    yield start
    for server, thread in servers:
        server.should_exit = True
        thread.join(timeout=10)
    stop_runs_left(tmp_path)


def stop_runs_left(root: Path) -> None:
    """Stop what a failed test left running of the runs it started (they outlive the studio):
    Ctrl-C, then SIGKILL to the run's process group after 60 s."""
    runs = StudioRuns(root)
    for record in runs.records():
        if runs.alive(record):
            os.killpg(record.pid, signal.SIGINT)
            try:
                psutil.Process(record.pid).wait(timeout=60)
            except psutil.TimeoutExpired:
                os.killpg(record.pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium; skips with the reason where Playwright or the browser is missing.

    Module-scoped: Playwright's sync API keeps an event loop running in the main thread while
    it is open, and every later test that calls ``asyncio.run`` would fail."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (requirements-dev.txt)")
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"no Chromium at {CHROMIUM}: install Debian's chromium (tests/apt-packages.txt)")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    page = context.new_page()
    yield page
    context.close()
