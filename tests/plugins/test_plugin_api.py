"""The public plugin API is the only door into trinity-core (the core's own layers: tests/test_house.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import trinity.plugin_api as api
from helpers.house import imported_modules

PACKAGES = Path(__file__).resolve().parents[2] / "packages"
SIBLINGS = ("trinity-workflows", "trinity-monitors", "trinity-vllm", "trinity-verl")


def test_plugin_packages_import_only_the_plugin_api_of_trinity_core():
    wrong = []
    for sibling in SIBLINGS:
        for path in (PACKAGES / sibling / "src").rglob("*.py"):
            for line, module in imported_modules(path):
                if (module == "trinity" or module.startswith("trinity.")) and module != "trinity.plugin_api":
                    wrong.append(f"{path.relative_to(PACKAGES)}:{line}: {module}")
    assert not wrong, "plugins may import only trinity.plugin_api:\n" + "\n".join(wrong)


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
