"""config/ in parts: the checker is config's own, and the older names and the keys without effect
are handled in one place (``trinity.config.compat``). Reads sources and small trees only: well under a second."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from pydantic import BaseModel, TypeAdapter

from trinity.config import compat
from trinity.config.load import children
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
