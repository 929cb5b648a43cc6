"""Recorded figures: ``benchmarks/results/<topic>.jsonl``, one JSON line per measurement.

Each line holds ``date`` (ISO, or null where it was not recorded), ``commit``, ``machine``,
``figure`` (a dotted name), ``value`` (a number, or ``[low, high]``) and ``note`` (how it was
measured). Figures go here, not into the docs' prose, which says how to work.

    python benchmarks/results.py [TOPIC] [--figure PREFIX]   # a Markdown table, oldest first
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

RESULTS = Path(__file__).resolve().with_name("results")
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
            if not (_number(value) or (isinstance(value, list) and len(value) == 2 and all(map(_number, value)))):
                raise ResultError(f"{where}: value is a number or [low, high], not {value!r}")
            rows.append(row)
    if topic and not rows:
        raise ResultError(f"no measurements in {results / topic}.jsonl")
    return sorted(rows, key=lambda row: (row["date"] is None, row["date"] or ""))


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def table(rows: list[dict]) -> str:
    """The measurements as a Markdown table."""
    lines = ["| " + " | ".join(FIELDS) + " |", "|" + "---|" * len(FIELDS)]
    for row in rows:
        value = row["value"]
        cells = {**row, "value": f"{value[0]:,}-{value[1]:,}" if isinstance(value, list) else f"{value:,}"}
        lines.append("| " + " | ".join("" if cells[k] is None else str(cells[k]) for k in FIELDS) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("topic", nargs="?", help="a file of benchmarks/results/ without .jsonl (default: all)")
    parser.add_argument("--figure", default="", help="only figures whose name starts with this")
    args = parser.parse_args()
    try:
        rows = [row for row in read(args.topic) if row["figure"].startswith(args.figure)]
    except ResultError as exc:
        parser.exit(2, f"error: {exc}\n")
    print(table(rows))


if __name__ == "__main__":
    main()
