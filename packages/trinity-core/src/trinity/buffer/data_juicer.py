"""Data-Juicer recipes on rows: what the ``data_juicer`` experience operator and the task
pipeline run.

py-data-juicer is optional (``pip install "trinity-core[data-juicer]"``): without it a recipe
fails at its start with an error naming its config key and the install command. A recipe is
Data-Juicer's own: a list of operators (``[{op_name: {args}}]``) run with ``num_process``
workers, or a recipe file (``config_path``, which wins, as in Trinity-RFT). Its filters drop
rows, its mappers rewrite them, and the statistics its filters compute land in each row's
``__dj__stats__``. The operators load once per recipe (loading Data-Juicer takes seconds).

Recipes run in the process that needs them, or, with ``service.data_juicer``, in a Data-Juicer
server: trinity's own (``python -m trinity.buffer.data_juicer --port P``: JSON rows over HTTP,
not Trinity-RFT's session protocol), at ``server_url`` or started for the run (``auto_start``).
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Sequence
from typing import Any

from trinity.common.errors import PicklableError
from trinity.config.schema import DataJuicerServiceConfig

STATS_KEY = "__dj__stats__"
"""The column of Data-Juicer's per-row statistics (``data_juicer.utils.constant.Fields.stats``)."""

INSTALL_HINT = 'pip install "trinity-core[data-juicer]" (or pip install py-data-juicer)'


class DataJuicerError(PicklableError, RuntimeError):
    """A recipe cannot run: Data-Juicer missing, a bad recipe, an unreachable server."""

    def __init__(self, key: str, reason: str):
        self.key, self.reason = key, reason
        super().__init__(f"{key}: {reason}")


def require_data_juicer(key: str) -> None:
    """Raise a ``DataJuicerError`` naming ``key`` unless py-data-juicer is installed."""
    if importlib.util.find_spec("data_juicer") is None:
        raise DataJuicerError(key, f"Data-Juicer is not installed: {INSTALL_HINT}")


def recipe(
    key: str,
    operators: Sequence[dict[str, Any]] | None = None,
    config_path: str | None = None,
    num_process: int = 1,
    text_keys: str | list[str] = "text",
) -> dict[str, Any]:
    """The recipe as Data-Juicer's config, in JSON: the recipe file's contents (read here, so that
    a server elsewhere needs no copy of it), else the operators."""
    if config_path:
        if not os.path.isfile(config_path):
            raise DataJuicerError(f"{key}.config_path", f"no Data-Juicer recipe at {config_path!r}")
        import yaml

        with open(config_path) as f:
            return yaml.safe_load(f)
    if not operators:
        raise DataJuicerError(key, "a Data-Juicer recipe needs operators or config_path")
    return {"process": [dict(op) for op in operators], "np": num_process, "text_keys": text_keys}


class RecipeRunner:
    """A loaded Data-Juicer recipe, run in this process; ``run`` applies it to rows."""

    def __init__(self, key: str, config: dict[str, Any]):
        require_data_juicer(key)
        from data_juicer.config import get_init_configs
        from data_juicer.ops import load_ops

        try:
            self.ops = load_ops(get_init_configs(config).process)
        except Exception as exc:  # Data-Juicer reports unknown ops and bad args in its own types
            raise DataJuicerError(key, f"Data-Juicer rejects the recipe ({type(exc).__name__}: {exc})") from exc

    def run(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The rows the recipe keeps, as it leaves them (statistics under ``STATS_KEY``)."""
        if not rows:
            return []
        from data_juicer.core.data import NestedDataset
        from datasets import Dataset

        return NestedDataset(Dataset.from_list(rows)).process(self.ops).to_list()

    def close(self) -> None:
        """Nothing to stop in this process."""


SERVICE_KEY = "service.data_juicer"


class RecipeClient:
    """A recipe run by a Data-Juicer server (``service.data_juicer``): the one at ``server_url``,
    or with ``auto_start`` one started here (``python -m trinity.buffer.data_juicer``) on
    ``port`` (unset: a free one) and stopped by ``close``. Rows travel as JSON."""

    START_TIMEOUT = 120.0

    def __init__(self, key: str, config: dict[str, Any], service: DataJuicerServiceConfig):
        self.key, self.config, self.process = key, config, None
        if service.auto_start:
            require_data_juicer(f"{SERVICE_KEY}.auto_start")
            self.url = self._start(service.port or _free_port())
        elif service.server_url:
            self.url = service.server_url.rstrip("/")
            try:
                _call(f"{self.url}/health", timeout=5)
            except OSError as exc:
                raise DataJuicerError(
                    f"{SERVICE_KEY}.server_url", f"no Data-Juicer server answers at {self.url} ({exc})"
                ) from exc
        else:
            raise DataJuicerError(SERVICE_KEY, "set server_url, or auto_start: true")
        self.run([])  # the server loads the recipe now: a bad one fails at the start

    def _start(self, port: int) -> str:
        import subprocess
        import sys
        import tempfile
        import time

        self.log = tempfile.TemporaryFile()
        command = [
            sys.executable,
            "-m",
            "trinity.buffer.data_juicer",
            "--port",
            str(port),
            "--parent",
            str(os.getpid()),
        ]
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT)
        url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + self.START_TIMEOUT
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                _call(f"{url}/health", timeout=5)
                return url
            except OSError:
                time.sleep(0.2)
        self.close()
        self.log.seek(0)
        output = self.log.read().decode(errors="replace")[-1500:]
        raise DataJuicerError(
            f"{SERVICE_KEY}.auto_start", f"the Data-Juicer server did not start on port {port}:\n{output}"
        )

    def run(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        reply = _call(f"{self.url}/process", {"recipe": self.config, "rows": rows}, self.key)
        return reply["rows"]

    def close(self) -> None:
        """Stop the server this client started."""
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=30)
            self.process = None


def open_recipe(key: str, config: dict[str, Any], service: DataJuicerServiceConfig | None):
    """A runner of the recipe: through the service when one is configured, else in this process."""
    return RecipeRunner(key, config) if service is None else RecipeClient(key, config, service)


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _call(
    url: str, payload: dict[str, Any] | None = None, key: str = SERVICE_KEY, timeout: float = 3600
) -> dict[str, Any]:
    """GET (no payload) or POST JSON; a server's error reply raises ``DataJuicerError`` naming ``key``."""
    import urllib.error
    import urllib.request

    data = None if payload is None else json.dumps(payload, default=str).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise DataJuicerError(key, json.loads(exc.read() or b"{}").get("error", str(exc))) from exc


def serve(host: str, port: int, parent: int | None = None) -> None:
    """The Data-Juicer server: ``GET /health``; ``POST /process`` with ``{"recipe", "rows"}``
    answers ``{"rows"}`` (recipes load once and stay loaded). It ends with its ``parent``
    process, so that a run killed without closing its client leaves no server behind."""
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    runners: dict[str, RecipeRunner] = {}

    class Handler(BaseHTTPRequestHandler):
        def _reply(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body, default=str).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self._reply(200, {"status": "ok"}) if self.path == "/health" else self._reply(404, {"error": self.path})

        def do_POST(self) -> None:  # noqa: N802
            if self.path != "/process":
                return self._reply(404, {"error": self.path})
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            name = json.dumps(request["recipe"], sort_keys=True)
            try:
                if name not in runners:
                    runners[name] = RecipeRunner("recipe", request["recipe"])
                self._reply(200, {"rows": runners[name].run(request["rows"])})
            except Exception as exc:  # the client raises it, naming its config key
                self._reply(
                    400, {"error": exc.reason if isinstance(exc, DataJuicerError) else f"{type(exc).__name__}: {exc}"}
                )

        def log_message(self, *args: Any) -> None:
            """Quiet: one line per request would flood the run's log."""

    server = ThreadingHTTPServer((host, port), Handler)

    def watch_parent() -> None:
        while parent is None or _alive(parent):
            time.sleep(1.0)
        server.shutdown()

    threading.Thread(target=watch_parent, daemon=True).start()
    server.serve_forever()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="trinity's Data-Juicer server")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--parent", type=int, default=None, help="stop when this process ends")
    arguments = parser.parse_args()
    serve(arguments.host, arguments.port, arguments.parent)
