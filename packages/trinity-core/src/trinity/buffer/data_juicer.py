"""Data-Juicer recipes on rows: what the ``data_juicer`` experience operator and the task pipeline run.

A recipe is Data-Juicer's own (operators ``[{op_name: {args}}]`` run with ``num_process`` workers,
or a ``config_path`` file, which wins): its filters drop rows, its mappers rewrite them, and its
filters' statistics land in each row's ``__dj__stats__``; the operators load once per recipe.
Recipes run in the process that needs them, or in trinity's Data-Juicer server
(``service.data_juicer``; ``python -m trinity.buffer.data_juicer --port P``: JSON rows over HTTP),
which takes a token, bounds requests and runs only the operators and arguments of its allowlist
(``data_juicer_allowlist``) unless ``--allow-code-ops`` (``docs/data.md``, ``docs/security.md``). Needs the ``data-juicer`` extra.
"""

# No ``from __future__ import annotations``: FastAPI reads ``create_app``'s local models from its
# endpoints' annotations.
import contextlib
import importlib.util
import io
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Annotated, Any

from trinity.buffer import data_juicer_allowlist as allowlist
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

        said = io.StringIO()
        try:
            with contextlib.redirect_stderr(said):
                self.ops = load_ops(get_init_configs(config).process)
        except SystemExit:  # its config parser (jsonargparse) exits on a recipe it cannot read, saying why
            why = " ".join(said.getvalue().partition("error: ")[2].split())[:500] or "its config parser exited"
            raise DataJuicerError(key, f"Data-Juicer rejects the recipe ({why})") from None
        except Exception as exc:  # Data-Juicer reports unknown ops and bad args in its own types
            raise DataJuicerError(key, f"Data-Juicer rejects the recipe ({type(exc).__name__}: {exc})") from exc
        _one_process_in_this_one(self.ops)

    def run(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The rows the recipe keeps, as it leaves them (statistics under ``STATS_KEY``)."""
        if not rows:
            return []
        from data_juicer.core.data import NestedDataset
        from datasets import Dataset

        # open_monitor: Data-Juicer's resource monitor forks a sampler process per call, which
        # only logs; it was two thirds of a small batch's time.
        return NestedDataset(Dataset.from_list(rows)).process(self.ops, open_monitor=False).to_list()

    def close(self) -> None:
        """Nothing to stop in this process."""


def _one_process_in_this_one(ops: list[Any]) -> None:
    """Run in this process the operators Data-Juicer gives one process: ``datasets`` forks a pool
    for any ``num_proc`` of 1 or more, which cost a 128-row filter 0.5 s against 0.015 s here."""
    for op in ops:
        if op.runtime_np() == 1:
            op.auto_op_parallelism, op.num_proc = False, None


SERVICE_KEY = "service.data_juicer"
TOKEN_ENV = "TRINITY_DATA_JUICER_TOKEN"
"""The server's token: it requires it when set; a client sends it to a server at ``server_url``."""

SERVER_KEYS = ("allow_code_ops", "max_request_mb", "max_rows")
"""Keys of ``service.data_juicer`` that set up the auto-started server (its command-line flags)."""


class RecipeClient:
    """A recipe run by a Data-Juicer server (``service.data_juicer``): the one at ``server_url``
    (sent ``$TRINITY_DATA_JUICER_TOKEN`` when set), or with ``auto_start`` one started here on
    ``port`` (unset: a free one) with a fresh token, and stopped by ``close``. Rows travel as JSON."""

    START_TIMEOUT = 120.0

    def __init__(self, key: str, config: dict[str, Any], service: DataJuicerServiceConfig):
        self.key, self.config, self.process = key, config, None
        if service.auto_start:
            import secrets

            require_data_juicer(f"{SERVICE_KEY}.auto_start")
            self.token: str | None = secrets.token_urlsafe(32)
            self.url = self._start(service.port or _free_port(), service)
        elif service.server_url:
            for name in SERVER_KEYS:
                if getattr(service, name) != DataJuicerServiceConfig.model_fields[name].default:
                    raise DataJuicerError(
                        f"{SERVICE_KEY}.{name}",
                        "sets up the server trinity starts (auto_start: true); the server at server_url "
                        f"has its own --{name.replace('_', '-')}",
                    )
            self.url, self.token = service.server_url.rstrip("/"), os.environ.get(TOKEN_ENV)
            try:
                _call(f"{self.url}/health", timeout=5)
            except OSError as exc:
                raise DataJuicerError(
                    f"{SERVICE_KEY}.server_url", f"no Data-Juicer server answers at {self.url} ({exc})"
                ) from exc
        else:
            raise DataJuicerError(SERVICE_KEY, "set server_url, or auto_start: true")
        self.run([])  # the server loads the recipe now: a bad one fails at the start

    def _start(self, port: int, service: DataJuicerServiceConfig) -> str:
        """Start a server on ``port``; its token goes through the environment, out of ``ps``'s sight."""
        import subprocess
        import sys
        import tempfile
        import time

        self.log = tempfile.TemporaryFile()
        command = [sys.executable, "-m", "trinity.buffer.data_juicer", "--port", str(port)]
        command += ["--parent", str(os.getpid()), "--max-request-mb", str(service.max_request_mb)]
        command += ["--max-rows", str(service.max_rows)] + (["--allow-code-ops"] if service.allow_code_ops else [])
        environment = {**os.environ, TOKEN_ENV: self.token}
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT, env=environment)
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
        reply = _call(f"{self.url}/process", {"recipe": self.config, "rows": rows}, self.key, token=self.token)
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


_HINTS = {
    401: f"the client sends ${TOKEN_ENV} as its token",
    413: f"the server's --max-request-mb; {SERVICE_KEY}.max_request_mb when trinity starts it",
}


def _call(
    url: str,
    payload: dict[str, Any] | None = None,
    key: str = SERVICE_KEY,
    timeout: float = 3600,
    token: str | None = None,
) -> dict[str, Any]:
    """GET (no payload) or POST JSON, with ``token`` as ``Authorization: Bearer``; a server's error
    reply raises ``DataJuicerError`` naming ``key``."""
    import urllib.error
    import urllib.request

    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {token}"} if token else {})
    data = None if payload is None else json.dumps(payload, default=str).encode()
    request = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        text = exc.read().decode(errors="replace")
        try:
            message = json.loads(text)["error"]["message"]
        except (ValueError, KeyError, TypeError):  # not the server's error shape: a proxy's page
            message = f"HTTP {exc.code}: {text[:500] or exc.reason}"
        hint = f" ({_HINTS[exc.code]})" if exc.code in _HINTS else ""
        raise DataJuicerError(key, message + hint) from exc


# --- the server ------------------------------------------------------------------------------

MAX_RECIPES = 8
"""Loaded recipes the server keeps (least recently used first out): each may hold models."""

RECIPE_FILE_KEYS = {
    "project_name": "a recipe file's name for its job; unused",
    "dataset_path": "a recipe file's input; unused: the rows are sent",
    "export_path": "a recipe file's output; unused: the rows come back",
}
"""Keys of a standalone recipe file that the server takes and leaves out of the recipe it runs."""

_HINTS_422 = {
    ("too_long", "rows"): " (this server's --max-rows)",
    ("extra_forbidden", "recipe"): " (the server takes the operators and the keys that shape a row; "
    "a recipe that sets up a Data-Juicer job runs in process: unset service.data_juicer)",
}
"""What to add to a validation error (its type, its top-level field)."""


def create_app(
    host: str = "127.0.0.1",
    token: str | None = None,
    allow_code_ops: bool = False,
    max_request_mb: int = 64,
    max_rows: int = 100_000,
):
    """The server's ASGI app, behind ``RequestGuard``: ``GET /health`` (no token); ``POST /process``
    with ``{"recipe", "rows"}`` answers ``{"rows"}``. Recipes load once and stay loaded once they
    ran (the last ``MAX_RECIPES``, in ``app.state.runners``); one request runs at a time. Errors
    are ``{"error": {"message", ...}}``."""
    from fastapi import FastAPI
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from pydantic import BaseModel, ConfigDict, Field
    from starlette.exceptions import HTTPException

    from trinity.common.http_guard import LOOPBACK_HOSTS, RequestGuard, error_body, is_loopback

    class Reply(JSONResponse):
        def render(self, content: Any) -> bytes:
            return json.dumps(content, default=str).encode()  # Data-Juicer's statistics may be NaN

    def error(status: int, message: str, param: str | None = None) -> Reply:
        return Reply(error_body(status, message, param), status)

    class Recipe(BaseModel):
        """A Data-Juicer recipe as the server takes it: the operators and the keys that shape
        what they see of a row; keys that set up a Data-Juicer job or its process are refused."""

        model_config = ConfigDict(extra="forbid")
        process: list[Annotated[dict[str, dict[str, Any] | None], Field(min_length=1, max_length=1)]] = Field(
            description="operators in order, each {op_name: {args}}"
        )
        np: int | None = Field(None, ge=1, description="worker processes")
        text_keys: str | list[str] | None = Field(None, description="the fields holding text")
        image_key: str | None = None
        image_bytes_key: str | None = None
        audio_key: str | None = None
        video_key: str | None = None
        image_special_token: str | None = None
        audio_special_token: str | None = None
        video_special_token: str | None = None
        eoc_special_token: str | None = None
        turbo: bool | None = None
        skip_op_error: bool | None = None
        project_name: str | None = Field(None, description=RECIPE_FILE_KEYS["project_name"])
        dataset_path: str | None = Field(None, description=RECIPE_FILE_KEYS["dataset_path"])
        export_path: str | None = Field(None, description=RECIPE_FILE_KEYS["export_path"])
        custom_operator_paths: list[str] | None = Field(
            None, description="Python files of operators to import; refused without --allow-code-ops"
        )

    class Process(BaseModel):
        model_config = ConfigDict(extra="forbid")
        recipe: Recipe
        rows: list[dict[str, Any]] = Field(max_length=max_rows, description="the rows, each a JSON object")

    class Rows(BaseModel):
        rows: list[dict[str, Any]] = Field(description="the rows the recipe keeps, statistics in __dj__stats__")

    runners: OrderedDict[str, RecipeRunner] = OrderedDict()
    lock = threading.Lock()
    app = FastAPI(title="trinity Data-Juicer service", docs_url=None, redoc_url=None)
    app.state.runners = runners

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Any, exc: RequestValidationError) -> Reply:
        problems = exc.errors()
        first = problems[0]
        if first["type"] == "json_invalid":
            return error(400, f"the body is not JSON: {first['ctx']['error']} at character {first['loc'][-1]}")
        lines = []
        for problem in problems[:5]:
            where = ".".join(str(part) for part in problem["loc"][1:]) or "body"
            hint = _HINTS_422.get((problem["type"], where.split(".")[0]), "")
            lines.append(f"{where}: {problem['msg']}{hint}")
        more = f"; and {len(problems) - 5} more" if len(problems) > 5 else ""
        return error(422, "; ".join(lines) + more, ".".join(str(part) for part in first["loc"][1:]) or None)

    @app.exception_handler(HTTPException)
    async def refused(request: Any, exc: HTTPException) -> Reply:
        return error(exc.status_code, str(exc.detail))

    @app.get("/health")
    def health() -> dict[str, Any]:
        """The server answers; ``recipes``: how many are loaded (at most ``max_recipes``)."""
        return {"status": "ok", "recipes": len(runners), "max_recipes": MAX_RECIPES}

    @app.post("/process", response_model=Rows)
    def process(request: Process) -> Reply:
        """Run ``recipe`` on ``rows``: the rows it keeps, as it leaves them."""
        config = request.recipe.model_dump(exclude_unset=True, exclude=set(RECIPE_FILE_KEYS))
        refused = None if allow_code_ops else allowlist.refusal(config)
        if refused:
            return error(
                400,
                f"{refused}; this server runs the operators and arguments of its allowlist "
                "(docs/security.md), and any other only when started with --allow-code-ops, which runs code",
                "recipe",
            )
        name = json.dumps(config, sort_keys=True)
        with lock:
            try:
                runner = runners[name] if name in runners else RecipeRunner("recipe", config)
                kept = runner.run(request.rows)
            except DataJuicerError as exc:  # the client raises it, naming its config key
                return error(400, exc.reason, "recipe")
            except Exception as exc:  # an operator failing on these rows
                return error(400, f"Data-Juicer failed on the rows ({type(exc).__name__}: {exc})", "rows")
            runners[name] = runner  # kept once it ran: a refused request leaves the cache as it was
            runners.move_to_end(name)
            if len(runners) > MAX_RECIPES:
                runners.popitem(last=False)[1].close()
            return Reply({"rows": kept})

    hosts = LOOPBACK_HOSTS | {host} if is_loopback(host) else None
    return RequestGuard(app, token=token, max_body_bytes=max_request_mb * 2**20, hosts=hosts)


def serve(host: str, port: int, parent: int | None = None, token: str | None = None, **limits: Any) -> None:
    """Run the server (``create_app``; ``limits``: its other arguments) until its ``parent``
    process ends, so that a run killed without closing its client leaves no server behind.
    Without a token it binds to loopback only."""
    import sys
    import time

    from trinity.common.http_guard import door_server, is_loopback

    if not token and not is_loopback(host):
        raise SystemExit(
            f"the Data-Juicer server refuses to listen on {host} without a token: set {TOKEN_ENV}, "
            "or listen on 127.0.0.1"
        )
    if not token:
        print(f"no ${TOKEN_ENV}: every user of this machine may send recipes", file=sys.stderr, flush=True)
    app = create_app(host, token, **limits)
    server = door_server(app, host=host, port=port, log_level="warning", lifespan="off")

    def watch_parent() -> None:
        while parent is None or _alive(parent):
            time.sleep(1.0)
        server.should_exit = True

    threading.Thread(target=watch_parent, daemon=True).start()
    server.run()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _positive(text: str) -> int:
    """A command-line count: a whole number, at least 1."""
    import argparse

    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return int(text)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(
        description=f"trinity's Data-Juicer server; its token comes from ${TOKEN_ENV} (required off loopback)"
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--parent", type=int, default=None, help="stop when this process ends")
    parser.add_argument(
        "--allow-code-ops",
        action="store_true",
        help="run any operator and argument, not only the allowlist's: runs code",
    )
    parser.add_argument("--max-request-mb", type=_positive, default=64, help="largest request body, in MiB")
    parser.add_argument("--max-rows", type=_positive, default=100_000, help="most rows per request")
    arguments = parser.parse_args()
    serve(
        arguments.host,
        arguments.port,
        arguments.parent,
        os.environ.get(TOKEN_ENV),
        allow_code_ops=arguments.allow_code_ops,
        max_request_mb=arguments.max_request_mb,
        max_rows=arguments.max_rows,
    )
