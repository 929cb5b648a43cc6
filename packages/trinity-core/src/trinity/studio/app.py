"""The studio's HTTP side: the JSON Schema, checking a config tree, loading and saving YAML, runs.

The browser keeps the user's config as a plain tree (only the keys they set or loaded, so a
loaded file keeps every key it had) and sends it here on each edit. A leaf the form could not
type itself (a YAML textarea) arrives as ``{"__yaml__": text}`` and is parsed here.

A door on the user's machine (``docs/security.md``): every route needs the launch's token
(``RequestGuard``), YAML is read within ``YAML_LIMITS``, saves write trinity configs only inside
its root (``save``), a check runs no code and reads nothing the page did not send, and a run is
``trinity run`` of a checked config saved in the root (``runs``); nothing else is executed.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import os
import shlex
from pathlib import Path
from typing import Any

import yaml
from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from fastapi.staticfiles import StaticFiles
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException
from pydantic import BaseModel

from trinity.common.errors import first_line
from trinity.common.http_guard import LOOPBACK_HOSTS, RequestGuard, door_server, refuse_exhaustion
from trinity.config import Config, check_tree
from trinity.config.load import IssueCollector, children
from trinity.config.reference import json_schema
from trinity.plugins import Kind
from trinity.plugins.manager import get_registry
from trinity.studio.runs import StudioRuns

STATIC = Path(__file__).parent / "static"
YAML_LEAF = "__yaml__"
SAVED_SUFFIXES = (".yaml", ".yml")
MAX_BODY_BYTES = 2**20
"""The largest request the studio takes: a config is kilobytes; a check of a megabyte takes about
a second (YAML is read and written in Python), of 7 MiB up to 24 s."""
AT_RUN_TIME = "(resolved at run time)"
"""What the check sees in place of a value only the run may resolve (an interpolation, a dotted path)."""

# Keys naming a file or folder that the check would read or list: the studio leaves them to the run.
FILE_KEYS = frozenset({"trainer_config_path", "chat_template_path", "task_dir"})


class StudioError(ValueError):
    """A studio that cannot start as asked (its file is outside its root)."""


# The fields beginner mode shows, grouped as a new user thinks of a run.
BEGINNER = {
    "Experiment": ["project", "name", "mode", "checkpoint_root_dir"],
    "Model": ["model.model_path", "model.max_prompt_tokens", "model.max_response_tokens"],
    "Data": [
        "buffer.explorer_input.taskset.path",
        "buffer.explorer_input.taskset.format.prompt_key",
        "buffer.explorer_input.taskset.format.response_key",
        "buffer.explorer_input.default_workflow_type",
        "buffer.explorer_input.default_reward_fn_type",
    ],
    "Algorithm": [
        "algorithm.algorithm_type",
        "algorithm.repeat_times",
        "algorithm.optimizer.lr",
        "buffer.batch_size",
        "buffer.total_epochs",
    ],
    "GPUs": [
        "cluster.node_num",
        "cluster.gpu_per_node",
        "explorer.rollout_model.engine_type",
        "explorer.rollout_model.engine_num",
        "explorer.rollout_model.tensor_parallel_size",
        "trainer.trainer_type",
        "synchronizer.sync_interval",
    ],
}

# A field of this name holds the name of a plugin of this kind: the form offers the installed ones.
PLUGIN_FIELDS = {
    "algorithm_type": Kind.ALGORITHM_TYPE,
    "default_workflow_type": Kind.WORKFLOW,
    "default_eval_workflow_type": Kind.WORKFLOW,
    "workflow_type": Kind.WORKFLOW,
    "default_reward_fn_type": Kind.REWARD_FN,
    "reward_fn_type": Kind.REWARD_FN,
    "advantage_fn": Kind.ADVANTAGE_FN,
    "policy_loss_fn": Kind.POLICY_LOSS_FN,
    "kl_loss_fn": Kind.KL_FN,
    "kl_penalty_fn": Kind.KL_FN,
    "entropy_loss_fn": Kind.ENTROPY_LOSS_FN,
    "sample_strategy": Kind.SAMPLE_STRATEGY,
    "engine_type": Kind.ROLLOUT_ENGINE,
    "trainer_type": Kind.TRAINER_ENGINE,
    "monitor_type": Kind.MONITOR,
    "storage_type": Kind.BUFFER_STORAGE,
    "selector_type": Kind.TASK_SELECTOR,
    "sync_method": Kind.SYNC_METHOD,
    "priority_fn": Kind.PRIORITY_FN,
}


class TreeRequest(BaseModel):
    config: dict[str, Any]


class SaveRequest(TreeRequest):
    path: str
    overwrite: bool = False
    """Replace an existing file (the page asks the user first)."""
    save_anyway: bool = False
    """Save a config that has errors (the page asks the user first; the reply says it has them)."""


class LoadRequest(BaseModel):
    text: str


class RunRequest(BaseModel):
    path: str
    """The saved config to run (as for a save: a relative path is from the root)."""


YAML_LIMITS = {"aliases": 100, "depth": 32, "nodes": 100_000}
"""What one YAML text may hold: aliases (``*name``), collections inside one another, and nodes once
every alias is expanded. A config has a few aliases, ~8 levels and ~1,000 nodes; a "billion laughs"
text of 270 bytes expands to billions of nodes, and a deep one recurses out of the composer."""
_YAML_EVENTS = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class YamlTooLarge(ValueError):
    """A YAML text beyond ``YAML_LIMITS``."""


def within_yaml_limits(text: str) -> None:
    """Raise ``YamlTooLarge`` naming the limit when ``text`` goes beyond ``YAML_LIMITS``, read off its
    parse events (no tree is built, nothing recurses); a YAML error goes up as it is."""
    aliases, nodes, sizes = 0, 0, {}
    open_: list[list[Any]] = []  # [anchor, expanded size] of each collection open now
    for event in yaml.parse(text, Loader=_YAML_EVENTS):
        if isinstance(event, (yaml.ScalarEvent, yaml.AliasEvent, yaml.CollectionStartEvent)):
            if isinstance(event, yaml.AliasEvent):
                aliases += 1
                if aliases > YAML_LIMITS["aliases"]:
                    raise YamlTooLarge(f"more than {YAML_LIMITS['aliases']} aliases (*name), the studio's limit")
                size = sizes.get(event.anchor, 1)
            else:
                size = 1
                if isinstance(event, yaml.ScalarEvent) and event.anchor:
                    sizes[event.anchor] = 1
            nodes += size
            if nodes > YAML_LIMITS["nodes"]:
                raise YamlTooLarge(
                    f"more than {YAML_LIMITS['nodes']} nodes with its aliases expanded, the studio's limit"
                )
            if open_:
                open_[-1][1] += size
            if isinstance(event, yaml.CollectionStartEvent):
                open_.append([event.anchor, 0])
                if len(open_) > YAML_LIMITS["depth"]:
                    raise YamlTooLarge(f"collections nested deeper than {YAML_LIMITS['depth']}, the studio's limit")
        elif isinstance(event, yaml.CollectionEndEvent):
            anchor, size = open_.pop()
            if anchor:
                sizes[anchor] = size + 1
            if open_:
                open_[-1][1] += size


def safe_yaml(text: str) -> Any:
    """``yaml.safe_load`` of a text within ``YAML_LIMITS``."""
    within_yaml_limits(text)
    return yaml.safe_load(text)


def parse_leaves(node: Any, path: str, issues: IssueCollector) -> Any:
    """The tree with every ``{"__yaml__": text}`` leaf parsed (a YAML error is an issue at its key;
    one beyond ``YAML_LIMITS`` is a 400 naming the key and the limit)."""
    if isinstance(node, dict):
        if set(node) == {YAML_LEAF}:
            if not isinstance(node[YAML_LEAF], str):
                issues.add(path, f"a YAML field holds text, not {type(node[YAML_LEAF]).__name__}")
                return None
            try:
                return safe_yaml(node[YAML_LEAF])
            except YamlTooLarge as exc:
                raise HTTPException(400, f"{path or 'config'}: not loaded: {exc}") from None
            except yaml.YAMLError as exc:
                issues.add(path, f"not valid YAML: {getattr(exc, 'problem', None) or exc}")
                return None
        return {k: parse_leaves(v, f"{path}.{k}" if path else k, issues) for k, v in node.items()}
    if isinstance(node, list):
        return [parse_leaves(v, f"{path}[{i}]", issues) for i, v in enumerate(node)]
    return node


def in_schema_order(model: type[BaseModel], tree: Any) -> Any:
    """``tree`` with the keys of each section in the schema's order (unknown keys last)."""
    if not isinstance(tree, dict):
        return tree
    fields = model.model_fields
    ordered = {k: tree[k] for k in fields if k in tree} | {k: v for k, v in tree.items() if k not in fields}
    for name, value in ordered.items():
        inner = children(fields[name].annotation) if name in fields else None
        if inner is None:
            continue
        kind, sub = inner
        if kind == "one":
            ordered[name] = in_schema_order(sub, value)
        elif kind == "list" and isinstance(value, list):
            ordered[name] = [in_schema_order(sub, v) for v in value]
        elif kind == "dict" and isinstance(value, dict):
            ordered[name] = {k: in_schema_order(sub, v) for k, v in value.items()}
    return ordered


def to_yaml_text(tree: dict[str, Any]) -> str:
    """The YAML file the studio saves: the user's keys only, sections in schema order."""
    return yaml.safe_dump(in_schema_order(Config, tree), sort_keys=False, allow_unicode=True)


def gpu_split(config: Config) -> dict[str, Any]:
    """The GPU arithmetic of the checked config: explorer engines first, the rest to the trainer."""
    cluster, rollout = config.cluster, config.explorer.rollout_model
    return {
        "node_num": cluster.node_num,
        "gpu_per_node": cluster.gpu_per_node,
        "total": cluster.total_gpu_num,
        "engine_num": rollout.engine_num,
        "gpu_per_engine": rollout.gpu_per_engine,
        "rollout": cluster.rollout_gpu_num,
        "auxiliary": cluster.auxiliary_model_gpu_num,
        "trainer": cluster.trainer_gpu_num,
    }


def plugin_kind(section: str, key: Any) -> Kind | None:
    """The kind of plugin the key ``key`` of ``section`` names (an experience operator's ``name`` too)."""
    if key == "name" and section.rpartition(".")[2].startswith("operators["):
        return Kind.EXPERIENCE_OPERATOR
    return PLUGIN_FIELDS.get(key)


def calls_a_resolver(text: str) -> bool:
    """Whether an interpolation in ``text`` may call a resolver (``${oc.env:VAR}``): a ``:`` after
    a ``${``. A plain reference (``${model.model_path}``) reads only the tree."""
    _, found, after = text.partition("${")
    return bool(found) and ":" in after


def left_to_the_run(tree: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The tree the studio checks, and the keys it leaves to the run (dotted key -> why).

    A check in the studio's process must not run code or read what the page did not send: a
    dotted plugin path would be imported, a resolver (``${oc.env:VAR}``) would read the studio's
    environment and a file key would be read or listed. Such a value is checked as ``AT_RUN_TIME``
    (a file key is left out); ``check`` drops the issues these keys cause.
    """
    registry = get_registry()
    notes: dict[str, str] = {}

    def walk(node: Any, path: str, kind: Kind | None) -> Any:
        if isinstance(node, dict):
            kept = {}
            for key, value in node.items():
                at = f"{path}.{key}" if path else str(key)
                if key in FILE_KEYS and value is not None:
                    notes[at] = (
                        f"not checked here: {key} is read when the run starts (the studio reads no file a config names)"
                    )
                else:
                    kept[key] = walk(value, at, plugin_kind(path, key))
            return kept
        if isinstance(node, list):
            return [walk(value, f"{path}[{i}]", kind) for i, value in enumerate(node)]
        if isinstance(node, str) and calls_a_resolver(node):
            notes[path] = (
                f"not checked here: {node!r} is resolved at run time (the studio reads no environment variable)"
            )
            return AT_RUN_TIME
        if isinstance(node, str) and kind is not None and "." in node and node not in registry.names(kind):
            notes[path] = (
                f"not checked here: {node!r} is a dotted path, imported at run time (the studio imports no code)"
            )
            return AT_RUN_TIME
        return node

    return walk(tree, "", None), notes


def owed_to_the_run(path: str, message: str, notes: dict[str, str]) -> bool:
    """Whether an issue at ``path`` comes from a key left to the run: at or below it, about its
    placeholder where the config copied it (``explorer_input.default_workflow_type`` to each
    taskset's), or a required key beside a file key left out (``taskset.path`` beside ``taskset.task_dir``)."""
    if AT_RUN_TIME in message:
        return True
    for left in notes:
        if path == left or path.startswith((f"{left}.", f"{left}[")):
            return True
        section, _, key = left.rpartition(".")
        if key in FILE_KEYS and message.startswith("required") and path.rpartition(".")[0] == section:
            return True
    return False


def check(tree: dict[str, Any]) -> dict[str, Any]:
    """Every error and warning of ``tree`` by dotted key, the GPU split and the YAML to save.

    Keys only the run can check (``left_to_the_run``) are warnings that say so.
    """
    issues = IssueCollector()
    parsed = parse_leaves(tree, "", issues)
    notes: dict[str, str] = {}
    if issues.issues:  # a leaf is not YAML: nothing further can be read
        config, more = Config(), issues
    else:
        checked, notes = left_to_the_run(parsed)
        config, more = check_tree(checked)

    def listed(found: list) -> list[dict[str, str]]:
        return [{"path": i.path, "message": i.message} for i in found if not owed_to_the_run(i.path, i.message, notes)]

    return {
        "errors": listed(more.issues),
        "warnings": [{"path": p, "message": m} for p, m in notes.items()]
        + listed(more.at_run + more.inert + more.warnings),
        "gpu": gpu_split(config),
        "yaml": to_yaml_text(parsed),
    }


def read_tree(text: str) -> dict[str, Any]:
    """A YAML file's tree as written: interpolations kept, OmegaConf's reading of numbers, and
    ``.nan`` or ``.inf`` (which JSON cannot carry to the page) as YAML leaves."""
    try:
        within_yaml_limits(text)
        raw = OmegaConf.create(text or "{}")
    except YamlTooLarge as exc:
        raise HTTPException(400, f"not loaded: {exc}") from None
    except (yaml.YAMLError, OmegaConfBaseException) as exc:
        raise HTTPException(400, f"not valid YAML: {first_line(exc)}") from None
    except AssertionError:  # OmegaConf's answer to a lone scalar ("1", "false")
        raw = None
    tree = OmegaConf.to_container(raw, resolve=False) if raw is not None else None
    if not isinstance(tree, dict):
        raise HTTPException(400, "not a config: the top level must be a mapping of sections")
    return _finite(tree)


def _finite(node: Any) -> Any:
    """``node`` with every NaN or infinity as a YAML leaf (``{"__yaml__": ".inf"}``)."""
    if isinstance(node, dict):
        return {k: _finite(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_finite(v) for v in node]
    if isinstance(node, float) and not math.isfinite(node):
        return {YAML_LEAF: ".nan" if math.isnan(node) else ".inf" if node > 0 else "-.inf"}
    return node


def save_target(root: Path, given: str) -> Path:
    """The file a save to ``given`` writes (a relative path is from ``root``), symlinks followed:
    a .yaml or .yml file inside ``root`` and in no dot-folder of it, not a dot-file itself (those
    are other tools' configs: ``.github/workflows/ci.yml``, ``.pre-commit-config.yaml``), else a
    4xx that names the path and the rule."""
    if not given.strip():
        raise HTTPException(400, f"give the file to save to: a .yaml file inside {root}")
    try:
        target = (root / Path(given).expanduser()).resolve()
    except (OSError, ValueError, RuntimeError) as exc:  # a NUL byte, a symlink loop, an unknown ~user
        raise HTTPException(400, f"cannot save to {given!r}: {first_line(exc)}") from None
    if not target.is_relative_to(root):
        raise HTTPException(
            403,
            f"{given!r} is {target}, outside {root}: the studio saves only inside the folder it was "
            "started in (or the one given to trinity studio --root)",
        )
    try:
        folder = target.is_dir()
    except OSError as exc:  # a name too long
        raise HTTPException(400, f"cannot save to {given!r}: {first_line(exc)}") from None
    if folder:
        raise HTTPException(400, f"save to a file, not a folder: {given!r}")
    if target.suffix.lower() not in SAVED_SUFFIXES:
        raise HTTPException(400, f"{given!r}: the studio saves {' or '.join(SAVED_SUFFIXES)} files only")
    hidden = [part for part in target.relative_to(root).parts if part.startswith(".")]
    if hidden:
        raise HTTPException(
            403, f"{given!r} is {target}: the studio writes no dot-file and nothing in a dot-folder ({hidden[0]})"
        )
    return target


def not_a_config(target: Path) -> str | None:
    """Why the existing file ``target`` is not a trinity config, which a save must not replace:
    YAML that is not a mapping, or a mapping most of whose top-level keys are no section or field
    of trinity's (a CI workflow's ``on`` and ``jobs``); None for a config, an empty file or none."""
    try:
        if not target.is_file():
            return None
        text = target.read_text(encoding="utf-8")
        tree = safe_yaml(text)
    except (OSError, UnicodeDecodeError, yaml.YAMLError, YamlTooLarge) as exc:
        return f"it is not YAML the studio reads ({first_line(exc)})"
    if tree is None:
        return None
    if not isinstance(tree, dict):
        return f"its YAML is a {type(tree).__name__}, not a mapping of sections"
    foreign = [str(k) for k in tree if k not in Config.model_fields]
    if len(foreign) * 2 > len(tree):
        return f"most of its top-level keys are not trinity's ({', '.join(foreign[:5])})"
    return None


def write_config(target: Path, text: str, overwrite: bool) -> None:
    """Write ``text`` to ``target`` (making its folders), never through a symlink, and over an
    existing file only when ``overwrite`` (``O_EXCL``: no window between the look and the write)."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise HTTPException(400, f"cannot make the folder {target.parent}: {exc.strerror or exc}") from None
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0) | (0 if overwrite else os.O_EXCL)
    try:
        with os.fdopen(os.open(target, flags, 0o666), "w", encoding="utf-8") as file:
            file.write(text)
    except FileExistsError:
        raise HTTPException(409, f'{target} exists: confirm to replace it ("overwrite": true)') from None
    except OSError as exc:
        raise HTTPException(400, f"cannot write {target}: {exc.strerror or exc}") from None


def cookie_name(token: str) -> str:
    """The launch's cookie, named after its token: cookies ignore the port, so two studios on one
    host each keep their own."""
    return "trinity-studio-" + hashlib.sha256(token.encode()).hexdigest()[:12]


def create_app(config_path: Path | None = None, *, root: Path, token: str) -> FastAPI:
    """The studio of one launch: it answers to ``token`` only, saves inside ``root`` and opens
    ``config_path`` (a file inside ``root``: where Save writes by default)."""
    if not token:
        raise StudioError("the studio needs a token: give a non-empty one")
    root = root.resolve()
    if config_path is not None:
        config_path = config_path.resolve()
        if not config_path.is_relative_to(root):
            raise StudioError(
                f"{config_path} is outside {root}, the folder the studio saves in: "
                "start it in the file's folder or pass --root"
            )
    cookie = cookie_name(token)
    runs = StudioRuns(root)
    app = FastAPI(title="trinity studio", docs_url=None, redoc_url=None)
    # Every route but the page needs the token (the page takes it from ?token= or the cookie);
    # another site's page gets 403, a text/plain or form body 415, a name that is not loopback 403.
    app.add_middleware(
        RequestGuard,
        token=token,
        cookie=cookie,
        hosts=LOOPBACK_HOSTS,
        open_paths=("/",),
        max_body_bytes=MAX_BODY_BYTES,
    )
    refuse_exhaustion(app)  # a RecursionError or MemoryError in a handler: a 400
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.exception_handler(RequestValidationError)
    async def malformed(request: Request, exc: RequestValidationError) -> JSONResponse:
        """A body of the wrong shape: 422 naming the field. The value is not echoed (FastAPI's
        own reply does, and fails on a NaN, which JSON cannot carry)."""
        first = exc.errors()[0]
        where = "body" if first["type"] == "json_invalid" else ".".join(str(p) for p in first["loc"][1:]) or "body"
        return JSONResponse(status_code=422, content={"detail": f"{where}: {first['msg']}"})

    @app.get("/", response_model=None)
    def index(request: Request) -> Response:
        """The page, for the printed address (``?token=``) or the cookie it sets: HttpOnly (no
        script reads it) and SameSite=Strict (no other site's request carries it)."""
        given = request.query_params.get("token") or request.cookies.get(cookie, "")
        if not hmac.compare_digest(given.encode(), token.encode()):
            return PlainTextResponse("trinity studio: open the address it printed, with its ?token=", status_code=401)
        page = FileResponse(STATIC / "index.html")
        page.set_cookie(cookie, token, httponly=True, samesite="strict")
        return page

    @app.get("/api/schema")
    def schema() -> dict[str, Any]:
        registry = get_registry()
        return {
            "schema": json_schema(),
            "beginner": BEGINNER,
            "choices": {field: registry.names(kind) for field, kind in PLUGIN_FIELDS.items()},
        }

    @app.get("/api/initial")
    def initial() -> dict[str, Any]:
        if config_path is None or not config_path.is_file():
            return {"config": {}, "path": str(config_path or root / "config.yaml")}
        return {"config": read_tree(config_path.read_text()), "path": str(config_path)}

    @app.post("/api/check")
    def check_config(request: TreeRequest) -> dict[str, Any]:
        return check(request.config)

    @app.post("/api/load")
    def load(request: LoadRequest) -> dict[str, Any]:
        return {"config": read_tree(request.text)}

    @app.post("/api/save", response_model=None)
    def save(request: SaveRequest) -> dict[str, Any] | JSONResponse:
        """Write the config: refused (4xx naming the rule) for a path ``save_target`` refuses, an
        existing file unless ``overwrite`` (409) or when it is not a trinity config (409), and a
        config with errors unless ``save_anyway`` (422 with the errors); the reply says whether
        the saved config has errors (``saved_with_errors``)."""
        target = save_target(root, request.path)
        if target.exists() and not request.overwrite:
            raise HTTPException(409, f'{target} exists: confirm to replace it ("overwrite": true)')
        foreign = not_a_config(target)
        if foreign:
            raise HTTPException(409, f"{target} is not replaced: {foreign}; the studio writes trinity configs only")
        result = check(request.config)
        errors = result["errors"]
        if errors and not request.save_anyway:
            detail = f'not saved: {has_errors(errors)}; to save it as it is, ask to save anyway ("save_anyway": true)'
            return JSONResponse(status_code=422, content={"detail": detail, "errors": errors})
        write_config(target, result["yaml"], request.overwrite)
        quoted = shlex.quote(str(target))
        saved = {**result, "path": str(target), "quoted": quoted, "command": f"trinity run --config {quoted}"}
        saved["saved_with_errors"] = bool(errors)
        if errors:
            saved["note"] = f"saved as asked, with {len(errors)} error(s): trinity run refuses it until they are fixed"
        return saved

    @app.get("/api/runs")
    def list_runs() -> dict[str, Any]:
        return {"runs": [runs.listing(record) for record in runs.records()]}

    @app.post("/api/runs", status_code=201, response_model=None)
    def start_run(request: RunRequest) -> dict[str, Any] | JSONResponse:
        """Start ``trinity run`` of a saved config: a file ``save_target`` accepts (inside the root),
        that exists (404) and checks without errors (422 naming them); 409 while it runs already."""
        target = save_target(root, request.path)
        if not target.is_file():
            raise HTTPException(404, f"{target} does not exist: save the config first")
        errors = check(read_tree(target.read_text(encoding="utf-8", errors="replace")))["errors"]
        if errors:
            detail = f"not started: {target} {has_errors(errors).removeprefix('the config ')}; fix them and save"
            return JSONResponse(status_code=422, content={"detail": detail, "errors": errors})
        return runs.start(target)

    @app.get("/api/runs/{run_id}")
    def show_run(run_id: str) -> dict[str, Any]:
        return runs.detail(run_id)

    @app.post("/api/runs/{run_id}/stop")
    def stop_run(run_id: str) -> dict[str, Any]:
        return runs.stop(run_id)

    return app


def has_errors(errors: list[dict[str, str]]) -> str:
    """``the config has 2 error(s) (buffer.batch_size: ...; ...)``: the first three named."""
    listed = "; ".join(f"{e['path'] or 'config'}: {e['message']}" for e in errors[:3])
    return f"the config has {len(errors)} error(s) ({listed}{'; ...' if len(errors) > 3 else ''})"


def serve(app: FastAPI, port: int) -> None:
    """Serve the studio on 127.0.0.1 until interrupted, with no access log (the page's first
    request carries the token)."""
    door_server(app, host="127.0.0.1", port=port, log_level="warning", access_log=False).run()
