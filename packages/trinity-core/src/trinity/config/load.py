"""Read a YAML config (OmegaConf) and turn it into the typed ``Config``, collecting every error.

OmegaConf gives ``${oc.env:VAR,default}`` and ``${section.key}`` interpolation and
command-line dotlist overrides. The dataclass building is ours, so that an unknown key
names its full dotted path and the nearest valid key, and a wrong type names path,
expected type and value; all errors are reported together, not only the first.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from trinity.common.errors import PicklableError
from trinity.config.schema import Config


@dataclass(frozen=True)
class ConfigIssue:
    """One problem in a config, located by its dotted path."""

    path: str
    message: str

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
    """Collects issues while the loader and the check pass keep going."""

    def __init__(self) -> None:
        self.issues: list[ConfigIssue] = []

    def add(self, path: str, message: str) -> None:
        """Record an issue; the first one at a path wins (no cascades of one cause)."""
        if not path or all(issue.path != path for issue in self.issues):
            self.issues.append(ConfigIssue(path, message))

    def raise_if_any(self, source: str = "") -> None:
        if self.issues:
            raise ConfigError(self.issues, source)


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


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
        raw = OmegaConf.merge(raw, OmegaConf.from_dotlist(list(overrides)))
    return raw


def resolve_tree(raw: DictConfig, issues: IssueCollector, keep_unresolved: tuple[str, ...] = ()) -> dict:
    """Resolve every interpolation, recording each one that fails under its own key.

    Subtrees at ``keep_unresolved`` paths are returned as written: their
    interpolations refer to another schema (``trainer.trainer_config`` to verl's).
    """

    def walk(node: Any, path: str) -> Any:
        if path in keep_unresolved:
            if isinstance(node, (DictConfig, ListConfig)):
                return OmegaConf.to_container(node, resolve=False)
            return node._value()
        if isinstance(node, DictConfig):
            out = {}
            for key in node.keys():
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
            if path in keep_unresolved:
                return container._get_node(key)
            return container[key]
        except OmegaConfBaseException as exc:
            issues.add(path, f"cannot resolve {container._get_node(key)._value()!r}: {_short(exc)}")
            return _FAILED

    return walk(raw, "")


_FAILED = object()


def _short(exc: Exception) -> str:
    return str(exc).splitlines()[0]


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return " or ".join(_type_name(a) for a in args)
    if origin is list:
        return f"list of {_type_name(typing.get_args(tp)[0])}"
    if origin is dict:
        return "mapping"
    return getattr(tp, "__name__", str(tp))


def build(cls: type, data: Any, path: str, issues: IssueCollector) -> Any:
    """Build dataclass ``cls`` from plain ``data``; bad keys and values become issues."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        issues.add(path, f"expected a mapping of {cls.__name__} fields, got {type(data).__name__} {data!r}")
        return cls()
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in data.items():
        key_path = _join(path, key)
        if key not in hints:
            close = difflib.get_close_matches(str(key), names, n=1, cutoff=0.5)
            hint = f"; did you mean '{_join(path, close[0])}'?" if close else f"; valid keys: {', '.join(names)}"
            issues.add(key_path, f"unknown key{hint}")
            continue
        converted = convert(hints[key], value, key_path, issues)
        if converted is not INVALID:  # a bad value keeps the default, so later checks stay safe
            kwargs[key] = converted
    return cls(**kwargs)


INVALID = object()
"""What ``convert`` returns for a value of the wrong type (after recording the issue)."""


def convert(tp: Any, value: Any, path: str, issues: IssueCollector) -> Any:
    """``value`` as type ``tp``, or INVALID (with the issue recorded) when it is not."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        options = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        return convert(options[0], value, path, issues)
    if dataclasses.is_dataclass(tp):
        return build(tp, value, path, issues)
    if origin is list:
        (item_type,) = typing.get_args(tp)
        if not isinstance(value, list):
            issues.add(path, f"expected {_type_name(tp)}, got {type(value).__name__} {value!r}")
            return INVALID
        items = [convert(item_type, item, f"{path}[{i}]", issues) for i, item in enumerate(value)]
        return INVALID if any(item is INVALID for item in items) else items
    if origin is dict:
        _, value_type = typing.get_args(tp)
        if not isinstance(value, dict):
            issues.add(path, f"expected a mapping, got {type(value).__name__} {value!r}")
            return INVALID
        items = {k: convert(value_type, v, _join(path, k), issues) for k, v in value.items()}
        return INVALID if any(item is INVALID for item in items.values()) else items
    return _convert_scalar(tp, value, path, issues)


def _convert_scalar(tp: type, value: Any, path: str, issues: IssueCollector) -> Any:
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads 1e-6 as a string
            try:
                return float(value)
            except ValueError:
                pass
    elif tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
    issues.add(path, f"expected {_type_name(tp)}, got {type(value).__name__} {value!r}")
    return INVALID


def parse_config(raw: DictConfig, issues: IssueCollector) -> Config:
    """Resolve and type a raw tree (the step before ``check_config``)."""
    tree = resolve_tree(raw, issues, keep_unresolved=("trainer.trainer_config",))
    return build(Config, tree, "", issues)
