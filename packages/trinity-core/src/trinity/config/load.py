"""Read a YAML config (OmegaConf) and validate it into the typed ``Config``, collecting every issue.

OmegaConf gives ``${oc.env:VAR,default}`` and ``${section.key}`` interpolation and
command-line dotlist overrides; pydantic (the models of ``trinity.config.schema``) types,
coerces and ranges the values. Its errors become issues that name the dotted key, the bad
value and what is allowed (the nearest valid key for an unknown one); a bad value falls back
to its default so that the checks after it still run and report their own issues at once.
"""

from __future__ import annotations

import copy
import difflib
import logging
import re
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Union

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from pydantic import BaseModel, ValidationError

from trinity.common.errors import PicklableError, first_line
from trinity.config import compat
from trinity.config.base import EFFECT, ConfigModel, default_of, inert_message, inert_reason
from trinity.config.schema import Config
from trinity.config.secrets import mask_text

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ConfigIssue:
    """One problem in a config, located by its dotted path."""

    path: str
    message: str

    def __post_init__(self) -> None:  # a value quoted in a message is printed and logged: masked
        object.__setattr__(self, "message", mask_text(self.message))

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class ConfigError(PicklableError, ValueError):
    """A config that cannot run; carries every issue found."""

    def __init__(self, issues: list[ConfigIssue], source: str = ""):
        self.issues = issues
        self.source = source
        where = f" in {source}" if source else ""
        lines = [f"{len(issues)} error{'s' if len(issues) != 1 else ''}{where}:"]
        lines += [f"  {issue}" for issue in issues]
        super().__init__("\n".join(lines))


class IssueCollector:
    """Collects errors and warnings while the loader, the derivation and the check keep going.

    ``inert`` warnings (keys accepted but not acted on) become errors under ``--strict``;
    ``at_run`` ones (stricter than Trinity-RFT, or a feature that cannot run here) are warnings
    at ``trinity config check``, so Trinity-RFT's templates still check, and errors at ``trinity run``.
    """

    def __init__(self) -> None:
        self.issues: list[ConfigIssue] = []
        self.warnings: list[ConfigIssue] = []
        self.inert: list[ConfigIssue] = []
        self.at_run: list[ConfigIssue] = []

    def add(self, path: str, message: str) -> None:
        """Record an error; the first one at a path wins (no cascades of one cause)."""
        if not path or all(issue.path != path for issue in self.issues):
            self.issues.append(ConfigIssue(path, message))

    def warn(self, path: str, message: str) -> None:
        """Record a warning (printed once by ``emit_warnings``)."""
        issue = ConfigIssue(path, message)
        if issue not in self.warnings:
            self.warnings.append(issue)

    def no_effect(self, path: str, message: str) -> None:
        """Record a key that is accepted but has no effect yet."""
        issue = ConfigIssue(path, message)
        if issue not in self.inert:
            self.inert.append(issue)

    def refuse_at_run(self, path: str, message: str) -> None:
        """Record what a run cannot do: a warning when the config is checked, an error when it runs."""
        issue = ConfigIssue(path, message)
        if issue not in self.at_run:
            self.at_run.append(issue)

    def merge(self, other: IssueCollector, note: str = "") -> None:
        """Take ``other``'s issues (a stage's), the errors' messages followed by ``note``."""
        for issue in other.issues:
            self.add(issue.path, f"{issue.message}{note}")
        for issue in other.warnings:
            self.warn(issue.path, issue.message)
        for issue in other.inert:
            self.no_effect(issue.path, issue.message)
        for issue in other.at_run:
            self.refuse_at_run(issue.path, f"{issue.message}{note}")

    def raise_if_any(self, source: str = "", strict: bool = False, run: bool = False) -> None:
        """Raise every error; ``run``: also what only a run refuses; ``strict``: also inert keys and those."""
        issues = self.issues + (self.at_run if run or strict else []) + (self.inert if strict else [])
        if issues:
            raise ConfigError(issues, source)

    def emit_warnings(self) -> None:
        for issue in self.at_run:
            logger.warning("%s (trinity run refuses it)", issue)
        for issue in self.inert + self.warnings:
            logger.warning("%s", issue)


def _join(path: str, key: Any) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


def dotted(loc: tuple[Any, ...], prefix: str = "") -> str:
    """``("buffer", "tasksets", 0, "path")`` -> ``buffer.tasksets[0].path``."""
    path = prefix
    for key in loc:
        path = _join(path, key)
    return path


def read_yaml(path: str | Path, overrides: list[str] | None = None) -> DictConfig:
    """The raw OmegaConf tree of a file plus dotlist overrides (nothing resolved yet)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError([ConfigIssue("", f"config file not found: {path}")])
    try:
        raw = OmegaConf.load(path)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError([ConfigIssue("", f"not valid YAML{where}: {problem}")], str(path)) from None
    if not isinstance(raw, DictConfig):
        raise ConfigError([ConfigIssue("", "the top level must be a mapping of sections")], str(path))
    if overrides:
        bad = [item for item in overrides if "=" not in item]
        if bad:
            raise ConfigError([ConfigIssue("", f"override '{item}' is not key=value") for item in bad], str(path))
        issues = [issue for item in overrides if (issue := _apply_override(raw, item))]
        if issues:
            raise ConfigError(issues, str(path))
    return raw


def _apply_override(raw: DictConfig, item: str) -> ConfigIssue | None:
    """Set one ``key=value`` (YAML value; list items by index: ``stages.0.mode=train``)."""
    key, text = (part.strip() for part in item.split("=", 1))
    try:
        value = OmegaConf.to_container(OmegaConf.from_dotlist([f"value={text}"]), resolve=False)["value"]
        OmegaConf.update(raw, key, value, merge=True, force_add=True)
    except (OmegaConfBaseException, TypeError, ValueError, IndexError) as exc:
        return ConfigIssue(key, f"cannot apply the override '{item}': {first_line(exc)}")
    return None


def resolve_tree(raw: DictConfig, issues: IssueCollector, keep_unresolved: tuple[str, ...] = ()) -> dict:
    """Resolve every interpolation, recording each one that fails under its own key.

    In subtrees at ``keep_unresolved`` paths, an interpolation this tree cannot resolve is
    kept as written: it refers to another schema (``trainer.trainer_config`` to verl's, where
    ``${actor_rollout_ref...}`` resolves later); one into this tree resolves now, as in
    Trinity-RFT (``${trainer.trainer_config.critic.ppo_max_token_len_per_gpu}``).
    """

    def lenient(container: Any, key: Any) -> Any:
        try:
            child = container[key]
        except OmegaConfBaseException:
            return container._get_node(key)._value()
        if isinstance(child, DictConfig):
            return {k: lenient(child, k) for k in child.keys()}
        if isinstance(child, ListConfig):
            return [lenient(child, i) for i in range(len(child))]
        return child

    def walk(node: Any, path: str) -> Any:
        if isinstance(node, DictConfig):
            out = {}
            for key in node.keys():
                if _join(path, key) in keep_unresolved:
                    out[key] = lenient(node, key)
                    continue
                child = _get(node, key, _join(path, key))
                if child is not _FAILED:
                    out[key] = walk(child, _join(path, key))
            return out
        if isinstance(node, ListConfig):
            items = [_get(node, i, f"{path}[{i}]") for i in range(len(node))]
            return [walk(item, f"{path}[{i}]") for i, item in enumerate(items) if item is not _FAILED]
        return node

    def _get(container: Any, key: Any, path: str) -> Any:
        try:
            return container[key]
        except OmegaConfBaseException as exc:
            issues.add(path, f"cannot resolve {container._get_node(key)._value()!r}: {first_line(exc)}")
            return _FAILED

    return walk(raw, "")


_FAILED = object()


# --- walking the schema --------------------------------------------------------------------


def _unwrap(annotation: Any) -> Any:
    """The annotation without ``Annotated`` and ``None`` options."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            options = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(options) != 1:
                return annotation
            annotation = options[0]
        else:
            return annotation


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def children(annotation: Any) -> tuple[str, type[BaseModel]] | None:
    """``("one" | "list" | "dict", model)`` when a field holds models, else None."""
    tp = _unwrap(annotation)
    if _is_model(tp):
        return "one", tp
    origin = typing.get_origin(tp)
    if origin is list and _is_model(_unwrap(typing.get_args(tp)[0])):
        return "list", _unwrap(typing.get_args(tp)[0])
    if origin is dict and _is_model(_unwrap(typing.get_args(tp)[1])):
        return "dict", _unwrap(typing.get_args(tp)[1])
    return None


def model_at(cls: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model class that holds the mapping at ``loc`` (relative to ``cls``), or None."""
    current: type[BaseModel] | None = cls
    pending: str | None = None  # "list"/"dict": the next loc element is an index or a key
    for key in loc:
        if current is None:
            return None
        if pending:
            pending = None
            continue
        field = current.model_fields.get(key) if isinstance(key, str) else None
        inner = children(field.annotation) if field else None
        if inner is None:
            return None
        kind, current = inner
        pending = kind if kind != "one" else None
    return None if pending else current


def _rewrite_older_names(cls: type[BaseModel], data: Any, path: str, issues: IssueCollector) -> Any:
    """``data`` with Trinity-RFT's older keys and values rewritten and its keys without effect taken
    out (``trinity.config.compat``) in every section it holds, each said under its dotted key."""
    if not isinstance(data, dict):
        return data
    data, rewrites, no_effect = compat.rewrite(cls, data, path)
    for key, message in rewrites:
        issues.warn(key, message)
    for key, message in no_effect:
        issues.no_effect(key, message)
    for name, field in cls.model_fields.items():
        inner = children(field.annotation)
        if inner is None or name not in data:
            continue
        kind, model = inner
        value, key_path = data[name], _join(path, name)
        if kind == "one":
            data[name] = _rewrite_older_names(model, value, key_path, issues)
        elif kind == "list" and isinstance(value, list):
            data[name] = [_rewrite_older_names(model, v, _join(key_path, i), issues) for i, v in enumerate(value)]
        elif kind == "dict" and isinstance(value, dict):
            data[name] = {k: _rewrite_older_names(model, v, _join(key_path, k), issues) for k, v in value.items()}
    return data


# --- pydantic errors as issues -------------------------------------------------------------

_EXPECTED = {"int": "int", "float": "float", "bool": "bool", "string": "str", "list": "list", "dict": "a mapping"}
_EXPECTED["model"] = _EXPECTED["dict"]
_BOUNDS = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}


def _value(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def describe_error(error: dict[str, Any], cls: type[BaseModel], loc: tuple[Any, ...], prefix: str = "") -> str:
    """One pydantic error as trinity's message (the key, ``prefix`` + ``loc``, is printed beside it)."""
    kind, value, ctx = error["type"], error.get("input"), error.get("ctx") or {}
    if kind == "extra_forbidden":
        owner = model_at(cls, loc[:-1])
        names = list(owner.model_fields) if owner else []
        close = difflib.get_close_matches(str(loc[-1]), names, n=1, cutoff=0.5)
        if close:
            return f"unknown key; did you mean '{dotted((*loc[:-1], close[0]), prefix)}'?"
        return f"unknown key; valid keys: {', '.join(names)}" if names else "unknown key"
    if kind == "literal_error":
        allowed = re.findall(r"'([^']*)'", ctx.get("expected", ""))
        close = difflib.get_close_matches(str(value), allowed, n=1, cutoff=0.6)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        return f"{_value(value)} is not one of {', '.join(allowed)}{hint}"
    if kind in _BOUNDS:
        bound = next(iter(ctx.values()))
        return f"must be {_BOUNDS[kind]} {bound}, got {_value(value)}"
    if kind in ("too_short", "too_long"):
        return f"expected {ctx.get('min_length', ctx.get('max_length'))} items, got {ctx.get('actual_length')}"
    if kind == "missing":
        owner = model_at(cls, loc[:-1])
        field = owner.model_fields.get(str(loc[-1])) if owner else None
        return f"required: {field.description}" if field and field.description else "required"
    prefix = kind.split("_")[0]
    if prefix in _EXPECTED and kind.endswith(("_type", "_parsing", "_from_float", "_attributes_type")):
        return f"expected {_EXPECTED[prefix]}, got {type(value).__name__} {_value(value)}"
    return error["msg"].removeprefix("Value error, ")


def _drop(tree: Any, loc: tuple[Any, ...]) -> None:
    """Remove the value at ``loc`` (a bad value falls back to its default); list items become None."""
    node = tree
    for key in loc[:-1]:
        try:
            node = node[key]
        except (KeyError, IndexError, TypeError):
            return
    last = loc[-1]
    if isinstance(node, dict):
        node.pop(last, None)
    elif isinstance(node, list) and isinstance(last, int) and last < len(node):
        node[last] = _DROPPED


_DROPPED = object()


def _without_dropped(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _without_dropped(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_without_dropped(v) for v in node if v is not _DROPPED]
    return node


def validate_section(cls: type[ConfigModel], data: Any, path: str, issues: IssueCollector) -> Any:
    """``cls`` built from plain ``data``; every bad key or value becomes an issue under ``path``.

    Offending values are removed and the rest validated again, so a config with errors still
    yields a model (with defaults in their place) for the checks that follow. A required key
    that is missing has no default: that model leaves it unset.
    """
    tree = _rewrite_older_names(cls, copy.deepcopy(data) if data is not None else {}, path, issues)
    if not isinstance(tree, dict):
        issues.add(path, f"expected a mapping, got {type(tree).__name__} {_value(tree)}")
        return _partial(cls, {})
    for _ in range(8):  # each round removes what the previous one reported
        try:
            return cls.model_validate(tree)
        except ValidationError as exc:
            errors = exc.errors()
            for error in errors:
                loc = tuple(error["loc"])
                issues.add(dotted(loc, path), describe_error(error, cls, loc, path))
                if not loc:
                    return _partial(cls, {})
                drop = loc[:-1] if error["type"] == "missing" else loc  # a missing key: its parent's value
                if drop:
                    _drop(tree, drop)
            tree = _without_dropped(tree)
            if all(error["type"] == "missing" and len(error["loc"]) == 1 for error in errors):
                break  # only required keys of cls itself are left: nothing to drop
    return _partial(cls, tree)


def _partial(cls: type[ConfigModel], tree: dict[str, Any]) -> Any:
    """``cls`` with its defaults, or, when it has required keys, unvalidated from what is left of ``tree``."""
    try:
        return cls()
    except ValidationError:
        return cls.model_construct(**{key: value for key, value in tree.items() if key in cls.model_fields})


def report_effects(model: BaseModel, path: str, issues: IssueCollector) -> None:
    """Warn about every key set in the file that trinity does not act on (``inert``) or derives."""
    for name in model.model_fields_set:
        field = type(model).model_fields[name]
        value, key_path = getattr(model, name), _join(path, name)
        effect = (field.json_schema_extra or {}).get(EFFECT) if isinstance(field.json_schema_extra, dict) else None
        if effect == "inert" and value != default_of(field):
            issues.no_effect(key_path, inert_message(inert_reason(field)))
        elif effect == "derived" and value != default_of(field):
            issues.warn(key_path, "is derived by trinity: the value in the file is replaced")
        if isinstance(value, BaseModel):
            report_effects(value, key_path, issues)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, BaseModel):
                    report_effects(item, _join(key_path, i), issues)
        elif isinstance(value, dict):
            for key, item in value.items():
                if isinstance(item, BaseModel):
                    report_effects(item, _join(key_path, key), issues)


def parse_config(raw: DictConfig, issues: IssueCollector) -> Config:
    """Resolve and type a raw tree (the step before ``derive_and_check``)."""
    tree = resolve_tree(raw, issues, keep_unresolved=("trainer.trainer_config",))
    config = validate_section(Config, tree, "", issues)
    report_effects(config, "", issues)
    return config
