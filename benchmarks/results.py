"""Recorded figures: ``benchmarks/results/<topic>.jsonl``, one JSON line per measurement.

Each line holds ``date`` (ISO, or null where it was not recorded), ``commit`` (or null),
``machine``, ``figure`` (a dotted name), ``value`` (a number, ``[low, high]`` or
``[low, median, high]``) and ``note`` (how it was measured). Figures go here, not into the docs'
prose, which says how to work. docs/performance.md is generated from them and from the template
``results/performance.md.in``, which holds the prose: ``{{figure}}`` there stands for the latest
measurement of a figure (``{{figure:.3f}}`` formats it, ``{{figure:date}}``, ``:machine`` or
``:commit`` give that field), and a line ``{{history figure="column" ...}}`` for a table of every
measurement of those figures, newest first.

    python benchmarks/results.py [TOPIC] [--figure PREFIX]   # a Markdown table, oldest first
    python benchmarks/results.py --docs [--check]            # write (or check) docs/performance.md
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import shlex
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().with_name("results")
TEMPLATE = RESULTS / "performance.md.in"
PAGE = RESULTS.parents[1] / "docs" / "performance.md"
REGENERATE = "python benchmarks/results.py --docs"
PLACEHOLDER = re.compile(r"\{\{([^{}]+)\}\}")
FIELDS = ("date", "commit", "machine", "figure", "value", "note")


class ResultError(ValueError):
    """A line of a results file that is not a measurement; the message names the file and line."""


def read(topic: str | None = None, results: Path = RESULTS) -> list[dict]:
    """Every measurement of ``<topic>.jsonl`` (all topics when None), oldest first (undated last)."""
    rows = []
    for path in sorted(results.glob(f"{topic or '*'}.jsonl")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            where = f"{path.name}:{number}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ResultError(f"{where}: not JSON ({exc})") from None
            if not isinstance(row, dict) or set(row) != set(FIELDS):
                raise ResultError(f"{where}: a measurement has exactly the keys {', '.join(FIELDS)}")
            value = row["value"]
            if not (_number(value) or (isinstance(value, list) and len(value) in (2, 3) and all(map(_number, value)))):
                raise ResultError(f"{where}: value is a number or [low, high] or [low, median, high], not {value!r}")
            rows.append(row)
    if topic and not rows:
        raise ResultError(f"no measurements in {results / topic}.jsonl")
    return sorted(rows, key=lambda row: (row["date"] is None, row["date"] or ""))


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def formatted(value: float | list, spec: str = ",") -> str:
    """``4,981``, ``1-2`` or ``4,981 (3,776-5,235)`` for a number, ``[low, high]`` or ``[low, median, high]``."""
    if not isinstance(value, list):
        return format(value, spec)
    if spec == ",":  # one precision for all: 1.430 (1.265-1.430), not 1.311 (1.265-1.43)
        spec = f",.{max(len(repr(number).partition('.')[2]) for number in value)}f"
    low, *median, high = (format(number, spec) for number in value)
    return f"{median[0]} ({low}-{high})" if median else f"{low}-{high}"


def table(rows: list[dict]) -> str:
    """The measurements as a Markdown table."""
    lines = ["| " + " | ".join(FIELDS) + " |", "|" + "---|" * len(FIELDS)]
    for row in rows:
        cells = {**row, "value": formatted(row["value"])}
        lines.append("| " + " | ".join("" if cells[k] is None else str(cells[k]) for k in FIELDS) + " |")
    return "\n".join(lines)


def render(template: str, rows: list[dict]) -> str:
    """The template with its ``{{...}}`` filled from the measurements (see the module's docstring)."""
    by_figure: dict[str, list[dict]] = {}
    for row in rows:
        by_figure.setdefault(row["figure"], []).append(row)
    lines = []
    for number, line in enumerate(template.splitlines(), 1):
        where = f"{TEMPLATE.name}:{number}"
        if line.startswith("{{history "):
            arguments = line.strip().removeprefix("{{history ").removesuffix("}}")
            lines.append(_history(arguments, by_figure, rows, where))
        else:
            lines.append(PLACEHOLDER.sub(functools.partial(_fill, by_figure=by_figure, where=where), line))
    return "\n".join(lines) + "\n"


def _measurements(figure: str, by_figure: dict[str, list[dict]], where: str) -> list[dict]:
    """A figure's measurements, newest last (undated first: they are the oldest)."""
    if figure not in by_figure:
        raise ResultError(f"{where}: no measurement of {figure!r} in {RESULTS.name}/")
    return sorted(by_figure[figure], key=lambda row: row["date"] or "")


def _fill(placeholder: re.Match, by_figure: dict[str, list[dict]], where: str) -> str:
    figure, _, spec = placeholder.group(1).partition(":")
    latest = _measurements(figure, by_figure, where)[-1]
    if spec in ("date", "machine", "commit"):
        return str(latest[spec])
    try:
        return formatted(latest["value"], spec or ",")
    except ValueError as exc:
        raise ResultError(f"{where}: {{{{{figure}:{spec}}}}}: {exc}") from None


def _history(arguments: str, by_figure: dict[str, list[dict]], rows: list[dict], where: str) -> str:
    """A Markdown table of every measurement of the named figures (of ``rows``), one row per occasion,
    newest first: by date, and within a day by place in the results files.

    An occasion is a date, machine, commit and note: the figures measured together share them.
    """
    columns = dict(argument.partition("=")[::2] for argument in shlex.split(arguments))
    if not all(columns.values()):
        raise ResultError(f'{where}: a history names its columns: {{{{history figure="column" ...}}}}')
    for figure in columns:
        _measurements(figure, by_figure, where)  # names a figure that has no measurement: an error
    # a stable sort: a day's rows stay as the files hold them; undated ones are the oldest
    measured = sorted((row for row in rows if row["figure"] in columns), key=lambda row: row["date"] or "")
    occasions: dict[tuple, dict[str, dict]] = {}
    for row in measured:
        occasions.setdefault((row["date"], row["commit"], row["machine"], row["note"]), {})[row["figure"]] = row
    lines = [
        "| date, commit | machine | " + " | ".join(columns.values()) + " | note |",
        "|" + "---|" * (len(columns) + 3),
    ]
    for index, ((date, commit, machine, note), figures) in enumerate(reversed(occasions.items())):
        cells = [formatted(figures[figure]["value"]) if figure in figures else "" for figure in columns]
        if index == 0:
            cells = [f"**{cell}**" if cell else "" for cell in cells]
        when = ", ".join(str(part) for part in (date or "undated", commit) if part)
        lines.append(f"| {when} | {machine} | " + " | ".join(cells) + f" | {note} |")
    return "\n".join(lines)


def write_page(check: bool) -> int:
    """Write docs/performance.md from the template and the results; with ``check``, only say whether it is in step."""
    page = render(TEMPLATE.read_text(), read())
    if not check:
        PAGE.write_text(page)
        return 0
    if PAGE.read_text() == page:
        return 0
    print(f"{PAGE} is not what {TEMPLATE.name} and the results give; regenerate it: {REGENERATE}", file=sys.stderr)
    return 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("topic", nargs="?", help="a file of benchmarks/results/ without .jsonl (default: all)")
    parser.add_argument("--figure", default="", help="only figures whose name starts with this")
    parser.add_argument("--docs", action="store_true", help="write docs/performance.md from the template")
    parser.add_argument("--check", action="store_true", help="with --docs: exit 1 if the page is out of step")
    args = parser.parse_args()
    if args.check and not args.docs:
        parser.error("--check goes with --docs")
    if args.docs and (args.topic or args.figure):
        parser.error("--docs writes the whole page: it takes no TOPIC or --figure")
    try:
        if args.docs:
            sys.exit(write_page(args.check))
        rows = [row for row in read(args.topic) if row["figure"].startswith(args.figure)]
    except ResultError as exc:
        parser.exit(2, f"error: {exc}\n")
    print(table(rows))


if __name__ == "__main__":
    main()
