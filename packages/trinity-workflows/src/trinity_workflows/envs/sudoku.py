"""``sudoku_workflow``: fill a sudoku a few cells per step (Trinity-RFT's rules).

The puzzle is the row's ``puzzle`` and ``solution`` (square lists of ints, 0 for empty, of
side 4 or 9, or their JSON text); a row without them gets a generated 9 x 9 one (seeded by
the row's ``seed``, else its index). Each step the model sees the board and answers with
up to ``max_moves_per_step`` moves, one ``row col value`` line each (0-based). Every step is
one experience (``eid.step``) with its own reward: -1 for a reply that is not moves, fills
a filled cell or breaks a rule (the episode ends), 1 for the move that solves the puzzle,
0 otherwise. At most ``max_steps`` steps.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import replace
from typing import Any, ClassVar

from trinity.plugin_api import Experience, Field, PluginArgs
from trinity_workflows.base import CatalogueWorkflow

Board = list[list[int]]

PROMPT = """Solve this {size}x{size} sudoku. 0 marks an empty cell. Every row, column and \
{block}x{block} box must hold each of 1 to {size} exactly once; you may only fill empty cells.

Give between 1 and {max_moves} moves, one per line, as "row col value" with rows and columns \
counted from 0, and nothing else. For example:
0 2 {example}

Step {step} of {max_steps}. Board:
{board}
"""


class SudokuGame:
    """A board, its solution and the rules."""

    def __init__(self, puzzle: Board, solution: Board):
        self.board, self.solution = [list(row) for row in puzzle], [list(row) for row in solution]
        self.size = len(self.board)
        self.block = math.isqrt(self.size)
        if self.block * self.block != self.size or any(len(r) != self.size for r in self.board + self.solution):
            raise ValueError(f"a sudoku must be square with a square side (4, 9...), got {self.size} rows")

    @classmethod
    def generate(cls, size: int, seed: int, holes: int | None = None) -> SudokuGame:
        """A random solved board (randomised backtracking) with ``holes`` cells emptied
        (default half of them)."""
        rng = random.Random(seed)
        game = cls([[0] * size for _ in range(size)], [[0] * size for _ in range(size)])
        game._fill(rng)
        solution = [row[:] for row in game.board]
        cells = rng.sample(range(size * size), size * size // 2 if holes is None else holes)
        for cell in cells:
            game.board[cell // size][cell % size] = 0
        return cls(game.board, solution)

    def _fill(self, rng: random.Random) -> bool:
        empty = next(((r, c) for r in range(self.size) for c in range(self.size) if not self.board[r][c]), None)
        if empty is None:
            return True
        r, c = empty
        for value in rng.sample(range(1, self.size + 1), self.size):
            self.board[r][c] = value
            if self.valid() and self._fill(rng):
                return True
        self.board[r][c] = 0
        return False

    def valid(self) -> bool:
        """No value twice in a row, column or box (empty cells aside)."""
        b, n = self.block, self.size
        groups = [*self.board, *zip(*self.board, strict=True)]
        groups += [
            [self.board[r][c] for r in range(br, br + b) for c in range(bc, bc + b)]
            for br in range(0, n, b)
            for bc in range(0, n, b)
        ]
        return all(len(filled := [v for v in g if v]) == len(set(filled)) for g in groups)

    @property
    def solved(self) -> bool:
        return self.board == self.solution

    def render(self) -> str:
        return "\n".join(" ".join(map(str, row)) for row in self.board)

    def parse_moves(self, reply: str, most: int) -> list[tuple[int, int, int]] | None:
        """The reply's ``row col value`` lines, or None when any line is not one or they are
        none or more than ``most``."""
        moves = []
        for line in filter(None, (line.strip() for line in reply.strip().splitlines())):
            parts = line.split()
            if len(parts) != 3 or not all(p.isdigit() for p in parts):
                return None
            r, c, v = map(int, parts)
            if not (r < self.size and c < self.size and 1 <= v <= self.size):
                return None
            moves.append((r, c, v))
        return moves if 0 < len(moves) <= most else None

    def play(self, moves: list[tuple[int, int, int]] | None) -> float:
        """Apply the moves: -1 if they are invalid (the game is lost), 1 if they solve it, else 0."""
        if moves is None:
            return -1.0
        for r, c, v in moves:
            if self.board[r][c]:
                return -1.0
            self.board[r][c] = v
        if not self.valid():
            return -1.0
        return 1.0 if self.solved else 0.0


class SudokuArgs(PluginArgs):
    """``workflow_args`` of ``sudoku_workflow``."""

    max_steps: int = Field(20, ge=1, description="most steps (model replies) per episode")
    max_moves_per_step: int = Field(5, ge=1, description="most moves in one reply")


def _board(value: Any) -> Board:
    return json.loads(value) if isinstance(value, str) else value


class SudokuWorkflow(CatalogueWorkflow):
    """One experience per step, each with its step's reward (see the module doc)."""

    Args: ClassVar[type[PluginArgs]] = SudokuArgs
    can_repeat = False
    needs_reward_fn = False
    reads_prompt = False

    def game(self) -> SudokuGame:
        raw = self.task.raw
        if "puzzle" in raw and "solution" in raw:
            return SudokuGame(_board(raw["puzzle"]), _board(raw["solution"]))
        return SudokuGame.generate(9, int(raw.get("seed", self.task.index)))

    async def rollout(self) -> list[Experience]:
        args = SudokuArgs.model_validate(self.task.workflow_args)
        game, experiences = self.game(), []
        for step in range(args.max_steps):
            prompt = PROMPT.format(
                size=game.size,
                block=game.block,
                max_moves=args.max_moves_per_step,
                example=min(4, game.size),
                step=step + 1,
                max_steps=args.max_steps,
                board=game.render(),
            )
            (reply,) = await self.model.chat_async([{"role": "user", "content": prompt}], n=1)
            reward = game.play(game.parse_moves(reply.info["response_text"], args.max_moves_per_step))
            reply.eid = replace(reply.eid, step=step)
            reply.reward = reward
            reply.metrics.update(sudoku_solved=float(game.solved), sudoku_step=float(step))
            experiences.append(reply)
            if reward != 0.0:
                break
        return experiences
