"""The schema as documents: JSON Schema (``trinity config schema``) and the Markdown reference of
every key (``trinity config docs``, kept in ``docs/config.md``); both read the models of
``trinity.config.schema`` (and the Markdown ``trinity.config.compat``'s tables) and nothing else, so
they cannot drift from what is validated.
"""

from __future__ import annotations

import json
import types
import typing
from typing import Annotated, Any, Literal, Union

import annotated_types
from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema

from trinity.config.base import EFFECT
from trinity.config.compat import NO_EFFECT_KEYS, NoEffect, renamed_keys
from trinity.config.load import children
from trinity.config.schema import Config


class _WithFactoryDefaults(GenerateJsonSchema):
    """Pydantic's JSON Schema, with the defaults that factories make (``[]``, ``{}``, sections)."""

    def get_default_value(self, schema: Any) -> Any:
        if "default_factory" in schema and not schema.get("default_factory_takes_data"):
            return schema["default_factory"]()
        return super().get_default_value(schema)


def json_schema() -> dict[str, Any]:
    """The JSON Schema of a whole config file (draft 2020-12)."""
    schema = Config.model_json_schema(schema_generator=_WithFactoryDefaults)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "trinity experiment config"
    return schema


def _strip(annotation: Any) -> tuple[Any, list[Any]]:
    """The annotation without Annotated / None, and the constraints Annotated carried."""
    constraints: list[Any] = []
    while True:
        origin = typing.get_origin(annotation)
        if origin is Annotated:
            annotation, *extra = typing.get_args(annotation)
            constraints += extra
        elif origin in (Union, types.UnionType):
            options = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(options) != 1:
                return annotation, constraints
            annotation = options[0]
        else:
            return annotation, constraints


def _type_name(annotation: Any) -> str:
    tp, _ = _strip(annotation)
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "str"
    if origin is list:
        return f"list of {_type_name(typing.get_args(tp)[0])}"
    if origin is dict:
        return f"mapping of {_type_name(typing.get_args(tp)[1])}" if children(tp) else "mapping"
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return f"[{tp.__name__}](#{tp.__name__.lower()})"
    if origin in (Union, types.UnionType):  # a value of several types (``float | str``): no "|" in a table cell
        return " or ".join(_type_name(arg) for arg in typing.get_args(tp) if arg is not type(None))
    return getattr(tp, "__name__", str(tp)).replace("Any", "any")


_BOUNDS = {
    annotated_types.Gt: (">", "gt"),
    annotated_types.Ge: (">=", "ge"),
    annotated_types.Lt: ("<", "lt"),
    annotated_types.Le: ("<=", "le"),
}


def _allowed(field: Any) -> str:
    tp, constraints = _strip(field.annotation)
    if typing.get_origin(tp) is Literal:
        return ", ".join(str(v) for v in typing.get_args(tp))
    parts, lengths = [], {}
    for item in [*constraints, *field.metadata]:
        for kind, (symbol, attribute) in _BOUNDS.items():
            if isinstance(item, kind):
                parts.append(f"{symbol} {getattr(item, attribute)}")
        for kind, attribute in ((annotated_types.MinLen, "min_length"), (annotated_types.MaxLen, "max_length")):
            if isinstance(item, kind):
                lengths[attribute] = getattr(item, attribute)
        if hasattr(item, "metadata"):  # a FieldInfo inside Annotated (e.g. Probability)
            parts.append(_allowed(item))
    if lengths:
        low, high = lengths.get("min_length"), lengths.get("max_length")
        parts.append(f"{low} items" if low == high else f"{low or 0} to {high if high is not None else 'any'} items")
    return ", ".join(p for p in parts if p)


def _default(field: Any) -> str:
    value = field.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        return "(section)"
    return f"`{json.dumps(value)}`"


def _description(field: Any) -> str:
    effect = (field.json_schema_extra or {}).get(EFFECT)
    prefix = "*Derived.* " if effect == "derived" else ""
    return prefix + (field.description or "").replace("|", "\\|")


def inert_keys(found: dict[type[BaseModel], list[str]] | None = None) -> dict[str, NoEffect]:
    """``{dotted key: its default and reason}`` of every key trinity accepts without effect
    (``compat.NO_EFFECT_KEYS``), at the first place its section appears."""
    if found is None:
        found = {}
        _models(Config, "", found)
    keys = {}
    for model, paths in found.items():
        for name, inert in NO_EFFECT_KEYS.get(model.__name__, {}).items():
            keys[".".join(p for p in (paths[0], name) if p)] = inert
    return keys


def _models(model: type[BaseModel], path: str, found: dict[type[BaseModel], list[str]]) -> None:
    """Every model of the schema with the dotted paths where it appears, in order of first use."""
    if model in found:
        found[model].append(path)
        return
    found[model] = [path]
    for name, field in model.model_fields.items():
        inner = children(field.annotation)
        if inner:
            kind, sub = inner
            suffix = {"one": "", "list": "[]", "dict": ".<name>"}[kind]
            _models(sub, f"{path}.{name}{suffix}" if path else f"{name}{suffix}", found)


def markdown(plugin_inert: dict[str, str] | None = None) -> str:
    """The reference of every key: one table per section, in the order of a config file;
    ``plugin_inert``: the installed plugins' arguments with no effect (``{key: reason}``)."""
    found: dict[type[BaseModel], list[str]] = {}
    _models(Config, "", found)
    lines = [
        "# Configuration reference",
        "",
        "Generated from `trinity/config/schema/` and `trinity/config/compat.py` by `trinity config docs`; a",
        "test keeps it in step. Keys are Trinity-RFT's. **No effect**: accepted, taken out before validation,",
        "warns when set off Trinity-RFT's default (an error under `trinity config check --strict`); why is",
        "listed below. *Derived*: filled by trinity; a value in the file is replaced.",
        "",
        "A config is read in three passes: typed (an unknown key or a bad value named), derived",
        "(`trinity/config/derive.py` fills the unset and *Derived* values in Trinity-RFT's order and warns of",
        "each value it changes, such as a job renamed `<name>_<timestamp>` because its folder is not empty",
        "and `continue_from_checkpoint` is false), then checked (`trinity/config/check.py` reads the derived",
        "config only and reports every problem under its dotted key).",
        "",
        "Stricter than Trinity-RFT, which runs these and wastes the run: a group algorithm (grpo, dapo,",
        "opmd, ...) with `algorithm.repeat_times: 1` (every advantage would be 0), and a",
        "`min_response_tokens` over `max_response_tokens` (Trinity-RFT lowers it). Each is an error",
        "naming the key; GPU arithmetic errors name the keys to change.",
        "",
        "Warnings at `trinity config check`, errors at `trinity run` (Trinity-RFT's templates check; they do not",
        "run): a taskset without `path`, an auxiliary model's `max_prompt_tokens + max_response_tokens` over its",
        "`max_model_len`, Tinker (`model.tinker.*`, `engine_type` / `trainer_type: tinker`), which needs the",
        "hosted Tinker service, and, where the checking machine has a CUDA device, a trainer whose estimated",
        "peak memory (Trinity-RFT's formulas) is over 80% of a GPU, unless `ignore_validator_suggestions: true`.",
        "`trinity config check --strict` refuses them too.",
        "",
    ]
    inert = inert_keys(found)
    lines += [f"## Keys with no effect ({len(inert)})", "", "| key | why it cannot act here |", "|---|---|"]
    lines += [f"| `{key}` | {entry.reason} |" for key, entry in inert.items()]
    lines.append("")
    if plugin_inert:
        lines += [f"## Plugin arguments with no effect ({len(plugin_inert)})", "", "| key | why it cannot act here |"]
        lines += ["|---|---|", *(f"| `{key}` | {reason} |" for key, reason in plugin_inert.items()), ""]
    for model, paths in found.items():
        where = ", ".join(f"`{p}`" for p in paths if p) or "the top level"
        lines += [f"## {model.__name__}", "", f"{(model.__doc__ or '').strip()} At {where}.", ""]
        lines += ["| key | type | default | allowed | description |", "|---|---|---|---|---|"]
        for name, field in model.model_fields.items():
            row = [f"`{name}`", _type_name(field.annotation), _default(field), _allowed(field), _description(field)]
            lines.append("| " + " | ".join(row) + " |")
        renamed = renamed_keys(model)
        if renamed:
            moves = ", ".join(f"`{old}` → `{new}`" for old, new in renamed.items())
            lines += ["", f"Older names, moved with a warning: {moves}."]
        without_effect = NO_EFFECT_KEYS.get(model.__name__)
        if without_effect:
            lines += ["", f"Accepted without effect (above): {', '.join(f'`{key}`' for key in without_effect)}."]
        lines.append("")
    return "\n".join(lines)
