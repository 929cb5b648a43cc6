"""The function tables of ``docs/algorithms.md``, written from the installed registry.

Each row: a name, its arguments' defaults and the first whole sentence of its class docstring.
``python -m trinity.algorithm.catalogue [--check] [PAGE]`` rewrites the tables between the page's
markers (or exits 1 when they are out of step); a test keeps the page in step.
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
from pathlib import Path

from trinity.plugins import Kind, get_registry, resolve

BEGIN = "<!-- function tables: written by `python -m trinity.algorithm.catalogue`; edit the docstrings -->"
END = "<!-- end of the function tables -->"
KINDS = (
    (Kind.ADVANTAGE_FN, "advantage functions (`algorithm.advantage_fn`)"),
    (Kind.POLICY_LOSS_FN, "policy loss functions (`algorithm.policy_loss_fn`)"),
    (Kind.KL_FN, "KL functions (`algorithm.kl_loss_fn`, `algorithm.kl_penalty_fn`)"),
    (Kind.ENTROPY_LOSS_FN, "entropy loss functions (`algorithm.entropy_loss_fn`)"),
    (Kind.SAMPLE_STRATEGY, "sample strategies (`algorithm.sample_strategy`)"),
)
ABBREVIATIONS = ("al", "cf", "e.g", "i.e", "vs", "Sec", "eq", "Fig")
"""Words whose full stop ends no sentence."""


def first_sentence(doc: str) -> str:
    """The first paragraph's first sentence, whole: it ends at a full stop outside parentheses and
    code that follows no abbreviation, or with the paragraph."""
    paragraph = doc.strip().split("\n\n")[0]
    text = re.sub(r"-\n\s*", "-", paragraph)  # a word hyphenated at a line break stays one word
    text = " ".join(text.split())
    depth, code = 0, False
    for i, char in enumerate(text):
        if char == "`":
            code = not code
        elif not code and char in "([":
            depth += 1
        elif not code and char in ")]":
            depth -= 1
        elif char == "." and not code and depth == 0 and text[i + 1 : i + 2] in ("", " "):
            if re.split(r"[\s(]", text[:i])[-1] not in ABBREVIATIONS:
                return text[:i]
    return text.rstrip(".")


def _cell(text: str) -> str:
    """Markdown table cell text: single backticks, pipes escaped."""
    return text.replace("``", "`").replace("|", "\\|")


def _args(defaults: dict) -> str:
    shown = [f"`{key}` {value}" for key, value in defaults.items() if key != "loss_agg_mode"]
    return _cell(", ".join(shown)) if shown else "-"


def tables() -> str:
    """The markdown of every function table, one per kind, rows by name."""
    lines = [BEGIN, ""]
    for kind, heading in KINDS:
        lines += [f"### {heading}", "", "| name | args (defaults) | what it is |", "|---|---|---|"]
        for name in sorted(get_registry().names(kind)):
            fn = resolve(kind, name)
            lines.append(f"| `{name}` | {_args(fn.default_args())} | {_cell(first_sentence(inspect.getdoc(fn)))} |")
        lines.append("")
    return "\n".join([*lines, END])


def updated(page: str) -> str:
    """``page`` with the text between its markers replaced by ``tables()``."""
    if BEGIN not in page or END not in page:
        raise ValueError(f"the page has no function-table markers: add the lines\n{BEGIN}\n{END}")
    head, rest = page.split(BEGIN, 1)
    return head + tables() + rest.split(END, 1)[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("page", nargs="?", default="docs/algorithms.md")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when the page is out of step")
    args = parser.parse_args(argv)
    page = Path(args.page)
    text = page.read_text()
    new = updated(text)
    if args.check:
        if new != text:
            print(f"{page}'s function tables are out of step: run `python -m trinity.algorithm.catalogue`")
            return 1
        return 0
    page.write_text(new)
    print(f"wrote the function tables of {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
