"""What the house tests read: a source file's imports, the graph of the packages' modules, the
core's layers (``TIERS``), and the checkout's ``git status``.

``python tests/helpers/house.py`` draws the layers and their imports into ``docs/architecture.md``
(``test_house.py`` fails when the picture there has drifted from the code).

``checkout_left_clean`` (autouse in ``tests/conftest.py``) fails the session when a test run
leaves a new entry in ``git status``: artefacts belong under ``tmp_path``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = REPO / "packages"
ARCHITECTURE = REPO / "docs" / "architecture.md"

TIERS: tuple[tuple[str, ...], ...] = (
    ("common", "testing"),  # docs/architecture.md, "Layers": leaves
    ("plugins",),  # "Layers": hook specs and the registry need only common
    ("config",),  # "Layers": its checker resolves plugin names, so it sits above plugins
    ("plugin_api",),  # "Plugins": the door of plugin packages; nothing in the core imports it
    ("model", "monitor", "buffer", "job_dir"),  # "Folders and modules"; model: what both engine sides share
    ("algorithm", "runtime", "report", "progress"),  # algorithm reads buffer, monitor
    ("rollout", "training"),  # "The loop": the two sides of the model; training's losses come from algorithm
    ("synchronizer", "placement", "studio"),  # "The loop"; the studio follows runs through report
    ("explorer", "trainer"),  # "The loop": the roles; neither imports the other
    ("roles",),  # "The loop": the Ray actors that run explorer and trainer
    ("launcher",),  # "The loop": runs the stages
    ("cli",),  # "Folders and modules": the command line over all of it
)
"""The core's subpackages and top-level modules, lowest first: a module imports only from tiers below
its own (never a peer of its tier). A new subpackage or module must be placed here."""

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


def module_name(path: Path) -> str:
    """``.../src/trinity/rollout/client.py`` -> ``trinity.rollout.client``; a package's ``__init__.py`` -> the package."""
    src = next(parent for parent in path.parents if parent.name == "src")
    parts = path.relative_to(src).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(paths: list[Path]) -> dict[str, set[str]]:
    """The modules of ``paths`` and, for each, the modules among them it imports (anywhere in the
    file: at the top, in a function, under ``TYPE_CHECKING``). ``from package import name`` points
    at the submodule ``name`` where there is one, else at the package."""
    files = {module_name(path): path for path in paths}
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(node, module, path)
                targets |= {f"{base}.{alias.name}" if f"{base}.{alias.name}" in files else base for alias in node.names}
        graph[module] = {found for target in targets if (found := _nearest(target, files)) and found != module}
    return graph


def _absolute(node: ast.ImportFrom, module: str, path: Path) -> str:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    if not node.level:
        return node.module or ""
    base = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


def _nearest(target: str, files: Mapping[str, Path]) -> str | None:
    """``target`` or the nearest package above it among ``files`` (``a.b.name`` -> ``a.b``)."""
    while target and target not in files:
        target = target.rpartition(".")[0]
    return target or None


def source_files() -> list[Path]:
    """Every module of every package under ``packages/*/src``."""
    return sorted(PACKAGES.glob("*/src/**/*.py"))


def unit(module: str) -> str:
    """What the layers place: ``trinity.rollout.client`` -> ``rollout``, ``trinity.cli`` -> ``cli``;
    a plugin package's module -> the package (``trinity_vllm``); ``trinity`` itself -> ``""``."""
    top, _, rest = module.partition(".")
    return rest.partition(".")[0] if top == "trinity" else top


def unit_graph() -> dict[str, set[str]]:
    """The imports between units, less those a path through other units implies (the transitive
    reduction: the picture's arrows)."""
    graph: dict[str, set[str]] = {}
    for module, targets in import_graph(source_files()).items():
        if unit(module):
            graph.setdefault(unit(module), set()).update(unit(t) for t in targets if unit(t) not in ("", unit(module)))

    def reached(start: str, skip: str) -> set[str]:
        seen, todo = set(), [t for t in graph[start] if t != skip]
        while todo:
            if (node := todo.pop()) not in seen:
                seen.add(node)
                todo += graph.get(node, ())
        return seen

    return {source: {t for t in targets if t not in reached(source, t)} for source, targets in graph.items()}


DRAWN = (
    "<!-- drawn by `python tests/helpers/house.py` from TIERS and the imports; test_house.py checks it -->",
    "<!-- end of the drawing -->",
)


def drawing() -> str:
    """The Mermaid picture of the layers, highest first, and an arrow for each import between units."""
    graph = unit_graph()
    lines = ["```mermaid", "flowchart TD"]
    plugin_packages = sorted(name for name in graph if name not in {u for tier in TIERS for u in tier})
    lines += ['  subgraph packages["plugin packages"]', *(f"    {name}" for name in plugin_packages), "  end"]
    for number, names in reversed(list(enumerate(TIERS))):
        lines += [f'  subgraph tier{number}["{number}"]', *(f"    {name}" for name in names), "  end"]
    lines += [f"  {source} --> {target}" for source in sorted(graph) for target in sorted(graph[source])]
    return "\n".join([DRAWN[0], *lines, "```", DRAWN[1]])


def redrawn(page: str) -> str:
    """``page`` with its drawing (between the ``DRAWN`` markers) drawn again from the code."""
    before, found, rest = page.partition(DRAWN[0])
    if not found or DRAWN[1] not in rest:
        raise ValueError(f"{ARCHITECTURE} has no drawing between {DRAWN[0]!r} and {DRAWN[1]!r}")
    return before + drawing() + rest.partition(DRAWN[1])[2]


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


if __name__ == "__main__":
    page = ARCHITECTURE.read_text()
    ARCHITECTURE.write_text(redrawn(page))
    print(f"{ARCHITECTURE}: {'unchanged' if redrawn(page) == page else 'drawn again'}", file=sys.stderr)
