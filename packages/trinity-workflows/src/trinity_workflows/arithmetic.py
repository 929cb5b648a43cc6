"""Evaluating model-written arithmetic without ``eval``: the countdown reward and the calculator tool.

Only numbers, ``+ - * /`` and parentheses are accepted (powers are not: ``9**9**9``
would hang the worker). Anything else is a ``ValueError``.
"""

from __future__ import annotations

import ast
import operator

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def evaluate(expression: str, integers_only: bool = False) -> tuple[float, list[float]]:
    """The value of ``expression`` and the numbers it is written with, left to right.

    ``integers_only``: integer literals and no unary minus (the countdown puzzle's rules).
    Raises ``ValueError`` for anything else, ``ZeroDivisionError`` for a division by 0.
    """
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except (SyntaxError, RecursionError) as exc:
        raise ValueError(f"not an arithmetic expression: {expression!r}") from exc
    numbers: list[float] = []

    def walk(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and type(node.value) in ((int,) if integers_only else (int, float)):
            numbers.append(node.value)
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            return _BINARY[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and not integers_only:
            return -walk(node.operand)
        raise ValueError(f"not allowed in arithmetic: {ast.unparse(node)[:60]!r}")

    try:
        return walk(tree.body), numbers
    except RecursionError as exc:
        raise ValueError("arithmetic expression nested too deeply") from exc
