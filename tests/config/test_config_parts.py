"""config/ in parts: the checker is config's own, and the older names and the keys without effect
are handled in one place (``trinity.config.compat``). Reads sources and small trees only: well under a second."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest
from config_helpers import issues_of, write
from pydantic import BaseModel, TypeAdapter

from trinity.config import compat, load_config
from trinity.config.base import inert_message
from trinity.config.load import children
from trinity.config.reference import inert_keys
from trinity.config.schema import Config

PACKAGES = Path(__file__).resolve().parents[2] / "packages"
CONFIG = PACKAGES / "trinity-core" / "src" / "trinity" / "config"


def _imported_modules(source: Path) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            modules |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
        elif isinstance(node, ast.Import):
            modules |= {alias.name for alias in node.names}
    return modules


def test_nothing_outside_config_imports_the_checker():
    """Other packages ask ``trinity.config.rules`` (or ``trinity.config``), never ``trinity.config.check``."""
    importers = [
        str(source.relative_to(PACKAGES))
        for source in sorted(PACKAGES.glob("*/src/**/*.py"))
        if CONFIG not in source.parents and "trinity.config.check" in _imported_modules(source)
    ]
    assert importers == []


def _sections(model: type[BaseModel], found: dict[str, type[BaseModel]]) -> dict[str, type[BaseModel]]:
    """Every section model reachable from ``model``, by class name."""
    if model.__name__ not in found:
        found[model.__name__] = model
        for field in model.model_fields.values():
            if inner := children(field.annotation):
                _sections(inner[1], found)
    return found


def _field_at(model: type[BaseModel], dotted: str) -> Any:
    *parents, leaf = dotted.split(".")
    for part in parents:
        model = children(model.model_fields[part].annotation)[1]
    return model.model_fields.get(leaf)


def test_every_older_name_points_from_a_free_key_to_a_current_one():
    """Each rewrite of ``trinity.config.compat`` names a section of the schema, an older key that is no
    longer a field (else it would never be rewritten) and a current key or value that exists."""
    sections = _sections(Config, {})
    for section, keys in compat.RENAMED_KEYS.items():
        model = sections[section]
        for old, new in keys.items():
            assert old not in model.model_fields, f"{section}.{old}"
            assert _field_at(model, new) is not None, f"{section}.{new}"
    for section, values in compat.RENAMED_VALUES.items():
        for key, names in values.items():
            field = sections[section].model_fields[key]
            for current in names.values():
                assert TypeAdapter(field.annotation).validate_python(current) == current, f"{section}.{key}"


def test_every_key_without_effect_is_one_the_schema_does_not_declare():
    """Each entry of ``compat.NO_EFFECT_KEYS`` names a section of the schema and a key it does not declare:
    one it declared would be taken out before validation, and never reach the code that reads it."""
    sections = _sections(Config, {})
    for section, keys in compat.NO_EFFECT_KEYS.items():
        model = sections[section]
        for dotted in keys:
            assert dotted.split(".")[0] not in model.model_fields, f"{section}.{dotted}"


OFF_DEFAULT = {int: "5", str: "other", bool: "true", dict: "{a: {path: x.jsonl}}", type(None): "8"}
"""A value off a key's default, as an override writes it, by the default's type."""


@pytest.mark.parametrize(("key", "inert"), sorted(inert_keys().items()))
def test_each_key_without_effect_warns_off_its_default_and_strict_refuses_it(tmp_path, key, inert):
    path = write(tmp_path, "monitor: {monitor_type: console}\n")
    off = f"{key}={OFF_DEFAULT[type(inert.default)]}"
    assert issues_of(path, [off], strict=True) == {key: inert_message(inert.reason)}
    default = json.dumps(inert.default)  # YAML reads JSON's null, false, {}, "cod"
    load_config(path, [f"{key}={default}"], strict=True)  # at the default: nothing to say, so --strict passes


def test_a_section_without_effect_written_empty_is_taken_out(tmp_path):
    path = write(tmp_path, "monitor: {monitor_type: console}\ncod:\n")
    assert load_config(path, strict=True).model_dump(mode="json").keys().isdisjoint({"cod"})
