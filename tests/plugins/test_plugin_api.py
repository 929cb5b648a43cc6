"""The public plugin API is the only door into trinity-core, and the lowest layer stays a leaf."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import trinity.plugin_api as api

PACKAGES = Path(__file__).resolve().parents[2] / "packages"
SIBLINGS = ("trinity-workflows", "trinity-monitors", "trinity-vllm", "trinity-verl")


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` of every import in a file, relative ones made absolute."""
    tree = ast.parse(path.read_text(), str(path))
    src = next(parent for parent in path.parents if parent.name == "src")
    package = ".".join(path.relative_to(src).parts[:-1])
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, module] if module else base)
            found.append((node.lineno, module))
    return found


def test_plugin_packages_import_only_the_plugin_api_of_trinity_core():
    wrong = []
    for sibling in SIBLINGS:
        for path in (PACKAGES / sibling / "src").rglob("*.py"):
            for line, module in imported_modules(path):
                if (module == "trinity" or module.startswith("trinity.")) and module != "trinity.plugin_api":
                    wrong.append(f"{path.relative_to(PACKAGES)}:{line}: {module}")
    assert not wrong, "plugins may import only trinity.plugin_api:\n" + "\n".join(wrong)


def test_trinity_common_imports_nothing_above_it():
    common = PACKAGES / "trinity-core" / "src" / "trinity" / "common"
    wrong = [
        f"{path.name}:{line}: {module}"
        for path in common.rglob("*.py")
        for line, module in imported_modules(path)
        if module.startswith("trinity.") and not module.startswith("trinity.common")
    ]
    assert not wrong, wrong


def test_every_exported_name_resolves():
    for name in api.__all__:
        assert getattr(api, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'Explorer'"):
        api.Explorer  # noqa: B018 - the roles are not part of the API


def test_importing_the_api_imports_no_heavy_library():
    code = (
        "import sys, trinity.plugin_api; "
        "print(sorted(m for m in ('torch', 'ray', 'transformers', 'vllm', 'verl') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
