"""The studio's HTTP side: the JSON Schema, checking a config tree, loading and saving YAML.

The browser keeps the user's config as a plain tree (only the keys they set or loaded, so a
loaded file keeps every key it had) and sends it here on each edit. A leaf the form could not
type itself (a YAML textarea) arrives as ``{"__yaml__": text}`` and is parsed here.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import yaml
from fastapi import FastAPI, HTTPException
from fastapi.middleware.trustedhost import TrustedHostMiddleware
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException
from pydantic import BaseModel

from trinity.common.errors import first_line
from trinity.config import Config, check_tree
from trinity.config.load import IssueCollector, children
from trinity.config.reference import json_schema
from trinity.plugins import Kind
from trinity.plugins.manager import get_registry

STATIC = Path(__file__).parent / "static"
YAML_LEAF = "__yaml__"

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
}


class TreeRequest(BaseModel):
    config: dict[str, Any]


class SaveRequest(TreeRequest):
    path: str


class LoadRequest(BaseModel):
    text: str


def parse_leaves(node: Any, path: str, issues: IssueCollector) -> Any:
    """The tree with every ``{"__yaml__": text}`` leaf parsed (a YAML error is an issue at its key)."""
    if isinstance(node, dict):
        if set(node) == {YAML_LEAF}:
            try:
                return yaml.safe_load(node[YAML_LEAF])
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


def check(tree: dict[str, Any]) -> dict[str, Any]:
    """Every error and warning of ``tree`` by dotted key, the GPU split and the YAML to save."""
    issues = IssueCollector()
    parsed = parse_leaves(tree, "", issues)
    if issues.issues:  # a leaf is not YAML: nothing further can be read
        config, more = Config(), issues
    else:
        config, more = check_tree(parsed)

    def listed(found: list) -> list[dict[str, str]]:
        return [{"path": i.path, "message": i.message} for i in found]

    return {
        "errors": listed(more.issues),
        "warnings": listed(more.inert + more.warnings),
        "gpu": gpu_split(config),
        "yaml": to_yaml_text(parsed),
    }


def read_tree(text: str) -> dict[str, Any]:
    """A YAML file's tree as written: interpolations kept, OmegaConf's reading of numbers."""
    try:
        raw = OmegaConf.create(text or "{}")
    except (yaml.YAMLError, OmegaConfBaseException) as exc:
        raise HTTPException(400, f"not valid YAML: {first_line(exc)}") from None
    tree = OmegaConf.to_container(raw, resolve=False)
    if not isinstance(tree, dict):
        raise HTTPException(400, "not a config: the top level must be a mapping of sections")
    return tree


def create_app(config_path: Path | None = None) -> FastAPI:
    """The studio; ``config_path`` is the file it opens with (and saves to by default)."""
    app = FastAPI(title="trinity studio", docs_url=None, redoc_url=None)
    # It writes files: only pages served by itself may ask. Another site's page can send no JSON
    # here (browsers ask first, and nothing answers), and a name that points elsewhere is refused.
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=["127.0.0.1", "localhost"])
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/")
    def index() -> FileResponse:
        return FileResponse(STATIC / "index.html")

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
            return {"config": {}, "path": str(config_path or Path("config.yaml").resolve())}
        return {"config": read_tree(config_path.read_text()), "path": str(config_path)}

    @app.post("/api/check")
    def check_config(request: TreeRequest) -> dict[str, Any]:
        return check(request.config)

    @app.post("/api/load")
    def load(request: LoadRequest) -> dict[str, Any]:
        return {"config": read_tree(request.text)}

    @app.post("/api/save")
    def save(request: SaveRequest) -> dict[str, Any]:
        result = check(request.config)
        path = Path(request.path).expanduser().resolve()
        if path.is_dir() or not request.path.strip():
            raise HTTPException(400, f"save to a file, not a folder: {request.path!r}")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(result["yaml"])
        except OSError as exc:
            raise HTTPException(400, f"cannot write {path}: {exc.strerror}") from None
        quoted = shlex.quote(str(path))
        return {**result, "path": str(path), "quoted": quoted, "command": f"trinity run --config {quoted}"}

    return app


def serve(config_path: Path | None, port: int) -> None:
    """Serve the studio on 127.0.0.1 (a local tool: it writes files where the page asks) until interrupted."""
    import uvicorn

    uvicorn.run(create_app(config_path), host="127.0.0.1", port=port, log_level="warning")
