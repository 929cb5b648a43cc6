"""Keep the house honest: the core's layers and the size of its classes, every package's module docstrings,
and a test run that leaves the checkout clean."""

from __future__ import annotations

import ast
import graphlib
import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement

from helpers.house import ARCHITECTURE, TIERS, import_graph, imported_modules, redrawn, source_files, unit

pytest_plugins = ("pytester",)

CORE = Path(__file__).resolve().parents[1] / "packages" / "trinity-core" / "src" / "trinity"

MAX_CLASS_LINES, MAX_METHODS, MAX_DOCSTRING_LINES = 250, 25, 10
MAX_LAUNCHER_FUNCTION_LINES = 50


def core_files() -> list[Path]:
    return sorted(CORE.rglob("*.py"))


def test_the_core_s_subpackages_import_only_downward():
    tier = {name: i for i, names in enumerate(TIERS) for name in names}
    wrong, unplaced = [], set()
    for path in core_files():
        rel = path.relative_to(CORE.parent)
        own = unit(".".join(rel.with_suffix("").parts))
        if own == "__init__":  # trinity/__init__.py: the version only
            assert not [m for _, m in imported_modules(path) if m.startswith("trinity")], path
            continue
        if own not in tier:
            unplaced.add(own)
            continue
        for line, module in imported_modules(path):
            other = unit(module) if module.startswith("trinity.") else None
            if other is None or other == own:
                continue
            if other not in tier:
                unplaced.add(other)
            elif tier[other] >= tier[own]:
                wrong.append(f"{rel}:{line}: {own} (tier {tier[own]}) imports {module} (tier {tier[other]})")
    assert not unplaced, f"place these in TIERS: {sorted(unplaced)}"
    assert not wrong, "imports that do not point down TIERS:\n" + "\n".join(wrong)


def test_no_module_imports_itself_through_others():
    """No circle of imports between the modules of all packages (a -> b -> a, or longer), counting
    imports in functions and under ``TYPE_CHECKING``: the shared piece belongs in a module below both."""
    graph = import_graph(source_files())
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        pytest.fail("a circle of imports: " + " -> ".join(exc.args[1]), pytrace=False)


def test_the_architecture_page_draws_the_layers_and_imports_of_the_code():
    """``docs/architecture.md``'s picture is ``TIERS`` and the imports between them as they are."""
    page = ARCHITECTURE.read_text()
    assert redrawn(page) == page, (
        "docs/architecture.md's picture has drifted: redraw it with `python tests/helpers/house.py`"
    )


def test_no_core_class_is_over_250_lines_or_25_methods():
    big = []
    for path in core_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                lines = node.end_lineno - node.lineno + 1
                methods = sum(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) for n in node.body)
                if lines > MAX_CLASS_LINES or methods > MAX_METHODS:
                    big.append(f"{path.relative_to(CORE)}: {node.name}: {lines} lines, {methods} methods")
    assert not big, f"classes over {MAX_CLASS_LINES} lines or {MAX_METHODS} methods (split them):\n" + "\n".join(big)


def test_every_function_of_the_launcher_is_at_most_50_lines():
    """``launcher.py`` reads as the stage runner's steps (placement, start, watch, summary), each a
    function of its own; the role actors live in ``roles.py``."""
    path = CORE / "launcher.py"
    long = [
        f"{node.name}: {node.end_lineno - node.lineno + 1} lines"
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > MAX_LAUNCHER_FUNCTION_LINES
    ]
    assert not long, f"launcher.py functions over {MAX_LAUNCHER_FUNCTION_LINES} lines (split them):\n" + "\n".join(long)


def test_every_module_docstring_of_every_package_is_at_most_10_lines():
    packages = CORE.parents[2]
    sources = sorted(packages.glob("*/src/**/*.py"))
    assert {path.relative_to(packages).parts[0] for path in sources} == {p.parent.name for p in packages.glob("*/src")}
    long = []
    for path in sources:
        docstring = ast.get_docstring(ast.parse(path.read_text(), str(path))) or ""
        if len(docstring.splitlines()) > MAX_DOCSTRING_LINES:
            long.append(f"{path.relative_to(packages)}: {len(docstring.splitlines())} lines")
    assert not long, "module docstrings over 10 lines (what, when, why; the rest in docs/):\n" + "\n".join(long)


def test_the_all_extra_installs_every_extra():
    extras = tomllib.loads((CORE.parents[1] / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    (everything,) = [Requirement(req) for req in extras.pop("all")]
    assert everything.name == "trinity-core" and everything.extras == set(extras)


def test_a_run_that_leaves_an_artefact_in_the_checkout_fails(pytester: pytest.Pytester):
    """The clean-checkout check of ``tests/helpers/house.py`` in a git repository of its own: an artefact in
    the checkout fails the session, one under tmp_path and a source file written meanwhile do not, and
    outside a git checkout nothing is compared."""
    pytester.makeini("[pytest]\n")
    pytester.makeconftest("from helpers.house import checkout_left_clean  # noqa: F401\n")
    (pytester.path / ".gitignore").write_text("__pycache__/\n.pytest_cache/\n")
    pytester.makepyfile(
        test_writes="""
        def test_under_tmp_path(tmp_path):
            (tmp_path / "weights.json").write_text("{}")

        def test_edits_source(pytestconfig):
            (pytestconfig.rootpath / "module.py").write_text("# written while the suite runs\\n")

        def test_in_the_checkout(pytestconfig):
            (pytestconfig.rootpath / "sync" / "version_1").mkdir(parents=True)
            (pytestconfig.rootpath / "sync" / "latest.json").write_text("{}")
        """
    )
    pytester.runpytest("-k", "checkout").assert_outcomes(passed=1)  # not a git checkout: nothing to compare
    shutil.rmtree(pytester.path / "sync")
    subprocess.run(["git", "init", "-q", str(pytester.path)], check=True)
    clean = pytester.runpytest("-k", "tmp_path or source")
    clean.assert_outcomes(passed=2)
    dirty = pytester.runpytest("-k", "checkout")
    dirty.assert_outcomes(passed=1, errors=1)
    dirty.stdout.fnmatch_lines(["*the test run changed `git status`*", "?? sync/latest.json"])


@pytest.mark.parametrize(
    ("message", "refused"),
    [
        ("Short subject\n\nThe details, in a body\nof any length " + "x" * 100 + "\n", None),
        ("Subject only\n", None),
        ("# a comment line, as in git's editor, " + "x" * 80 + "\nSubject\n", None),
        ("S" * 72 + "\n", None),
        ("S" * 73 + "\n\nbody\n", "the subject is 73 characters, at most 72"),
        ("Subject\nbody right under it\n", "a blank line goes between the subject and the body"),
    ],
)
def test_the_commit_msg_hook_refuses_a_long_subject_or_a_body_without_a_blank_line(tmp_path, message, refused):
    """``.githooks/commit-msg`` as git runs it (``core.hooksPath``) on a commit in a repository of its own."""
    hooks = Path(__file__).resolve().parents[1] / ".githooks"
    git = ["git", "-C", str(tmp_path), "-c", f"core.hooksPath={hooks}", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    commit = subprocess.run(
        [*git, "commit", "-q", "--allow-empty", "--cleanup=strip", "-m", message], capture_output=True, text=True
    )
    logged = subprocess.run([*git, "log", "--format=%s"], capture_output=True, text=True).stdout
    if refused:
        assert commit.returncode != 0 and refused in commit.stderr and not logged, commit
    else:
        assert commit.returncode == 0 and logged, commit


def test_no_pickled_file_is_tracked():
    """Fixtures and data the repository holds are read without pickle (safetensors, JSON)."""
    root = Path(__file__).resolve().parents[1]
    tracked = subprocess.run(
        ["git", "-C", str(root), "ls-files", "*.pt", "*.pth", "*.pkl", "*.pickle", "*.bin"],
        capture_output=True,
        text=True,
    )
    if tracked.returncode:
        pytest.skip(f"not a git checkout: {tracked.stderr.strip()}")
    assert not tracked.stdout.split(), tracked.stdout


def test_every_recorded_figure_reads_and_a_malformed_line_is_named(tmp_path):
    """``benchmarks/results/*.jsonl`` as ``benchmarks/results.py`` reads them."""
    spec = importlib.util.spec_from_file_location("results", CORE.parents[3] / "benchmarks" / "results.py")
    results = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(results)
    assert {row["figure"] for row in results.read("ci")} >= {"ci.total_s", "ci.main_s", "ci.engines_s"}
    good = '{"date": "2026-12-03", "commit": "abc", "machine": "m", "figure": "f", "value": [1, 2], "note": ""}'
    (tmp_path / "x.jsonl").write_text(good + "\n" + good.replace("[1, 2]", '"fast"') + "\n")
    with pytest.raises(results.ResultError, match="x.jsonl:2: value is a number or"):
        results.read("x", tmp_path)
    (tmp_path / "x.jsonl").write_text(good + "\n")
    assert "| 2026-12-03 | abc | m | f | 1-2 |" in results.table(results.read("x", tmp_path))


def test_only_role_processes_finds_ray_actors_by_their_process_title():
    """A test that picks Ray actors from ``/proc`` by title alone would take those of the engine
    suites CI runs beside the main one (a verl trainer was SIGKILLed so): it goes through
    ``role_processes.role_pids``, which also asks for the test's own tag."""
    tests = Path(__file__).resolve().parent
    by_title = [
        path.relative_to(tests)
        for path in tests.rglob("*.py")
        if "ray::" in path.read_text() and path.name not in {"role_processes.py", "test_house.py"}
    ]
    assert not by_title, by_title
