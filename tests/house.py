"""What the house tests read: a source file's imports, and the checkout's ``git status``.

``checkout_left_clean`` (autouse in ``tests/conftest.py``) fails the session when a test run
leaves a new entry in ``git status``: artefacts belong under ``tmp_path``.
"""

from __future__ import annotations

import ast
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

EDITED_BY_PEOPLE = (".py", ".md")
"""Suffixes the clean-checkout check leaves out: people edit code and docs in a shared checkout while a
suite runs, and tests write data (weights, JSON, databases, logs), not code or prose."""


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` of every import in a file under a ``src`` folder, relative ones made absolute."""
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


def git_status(root: Path) -> set[str] | None:
    """The ``git status --porcelain`` entries of the checkout holding ``root``, less the suffixes of
    ``EDITED_BY_PEOPLE``; None outside a git checkout (or without git)."""
    try:
        result = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=all"],
            capture_output=True,
            text=True,
            timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if result.returncode != 0:
        return None
    return {line for line in result.stdout.splitlines() if not line.rstrip('"').endswith(EDITED_BY_PEOPLE)}


@pytest.fixture(scope="session", autouse=True)
def checkout_left_clean(request: pytest.FixtureRequest) -> Iterator[None]:
    """Records ``git status`` before the first test and fails the session (an error at the last test's
    teardown) if the run added entries; does nothing outside a git checkout."""
    root = request.config.rootpath
    before = git_status(root)
    yield
    after = git_status(root) if before is not None else None
    new = sorted((after or set()) - (before or set()))
    if new:
        pytest.fail(
            f"the test run changed `git status` in {root} (write artefacts under tmp_path):\n" + "\n".join(new),
            pytrace=False,
        )
