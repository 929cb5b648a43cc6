"""config/ in parts: the checker is config's own, and the older names are rewritten in one place
(``trinity.config.compat``). Reads sources and small trees only: well under a second."""

from __future__ import annotations

import ast
from pathlib import Path

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
