"""``frozen_lake_workflow``: walk gymnasium's FrozenLake from the start to the goal.

The map is ``workflow_args.desc`` or one generated from the row's ``size``, ``p`` and ``seed`` with
a path of at most ``env_max_steps`` moves. The model sees the grid and answers with its move in a
code span (```` ```Up``` ````); a reply without a valid move leaves the player in place. The reward
is 1 at the goal, else 0; with ``workflow_args.reward_fn_type`` a reward function grades the whole
conversation instead (the environment's reward kept as ``env_reward``). Needs gymnasium:
``pip install "trinity-workflows[envs]"``.
"""

from __future__ import annotations

import asyncio
import re
from collections import deque
from typing import Any, ClassVar

import numpy as np
from pydantic import field_validator

from trinity.plugin_api import Field, Kind, PluginArgs, resolve
from trinity_workflows.base import call_reward, require
from trinity_workflows.conversation import MultiTurnWorkflow
from trinity_workflows.envs.base import EnvironmentWorkflow, EpisodeRecord

INSTALL = 'pip install "trinity-workflows[envs]" (gymnasium)'
MOVES = {"left": 0, "down": 1, "right": 2, "up": 3}
"""Move names to gymnasium's FrozenLake actions."""
NUMBERED_MOVES = {"1": "left", "2": "down", "3": "right", "4": "up"}
"""Trinity-RFT's numbering of the moves, also accepted."""
TILES = {b"S": "_", b"F": "_", b"H": "O", b"G": "G"}

SYSTEM_PROMPT = """You are an agent on a frozen lake, drawn as a grid:
P is you, _ is frozen ice you can stand on, O is a hole, G is the goal.
Reach G without falling into a hole, in as few moves as you can.
Each turn you make one move: Up, Down, Left or Right.
Think briefly, then write your move last, inside triple backticks, for example ```Right```."""

_MOVE = re.compile(r"```(.*?)```", re.DOTALL)


def parse_move(reply: str) -> int | None:
    """The gymnasium action of the reply's last code span (a move name or 1-4), or None."""
    spans = _MOVE.findall(reply)
    if not spans:
        return None
    word = spans[-1].strip().lower()
    return MOVES.get(NUMBERED_MOVES.get(word, word))


def shortest_moves(desc: list[str]) -> list[str] | None:
    """The fewest moves (``"Up"``...) from ``S`` to ``G`` avoiding holes, or None when the goal
    cannot be reached: the expert a warm-up dataset imitates."""
    size = len(desc)
    start = next((r, c) for r in range(size) for c in range(size) if desc[r][c] == "S")
    came_from: dict[tuple[int, int], tuple[tuple[int, int], str] | None] = {start: None}
    queue = deque([start])
    while queue:
        r, c = cell = queue.popleft()
        if desc[r][c] == "G":
            moves = []
            while came_from[cell] is not None:
                cell, move = came_from[cell]
                moves.append(move)
            return moves[::-1]
        for (nr, nc), move in (((r + 1, c), "Down"), ((r - 1, c), "Up"), ((r, c + 1), "Right"), ((r, c - 1), "Left")):
            if 0 <= nr < size and 0 <= nc < size and desc[nr][nc] != "H" and (nr, nc) not in came_from:
                came_from[(nr, nc)] = ((r, c), move)
                queue.append((nr, nc))
    return None


def generate_map(size: int, p: float, seed: int, max_steps: int) -> list[str]:
    """A random ``size`` x ``size`` map (tiles frozen with probability ``p``) whose goal is
    at most ``max_steps`` moves from its start; the same seed gives the same map."""
    if size < 2:
        raise ValueError(f"a frozen lake needs size >= 2 (got {size})")
    rng = np.random.default_rng(seed)
    while True:
        board = rng.choice(["F", "H"], (size, size), p=[min(p, 1.0), 1 - min(p, 1.0)]).tolist()
        start, goal = rng.choice(size * size, 2, replace=False)
        board[start // size][start % size], board[goal // size][goal % size] = "S", "G"
        desc = ["".join(row) for row in board]
        moves = shortest_moves(desc)
        if moves is not None and len(moves) <= max_steps:
            return desc


class FrozenLakeArgs(PluginArgs):
    """``workflow_args`` of ``frozen_lake_workflow`` (Trinity-RFT's names)."""

    env_max_steps: int = Field(8, ge=1, description="a generated map's goal is at most this many moves away")
    agent_max_steps: int = Field(10, ge=1, description="most moves per episode")
    desc: list[str] | None = Field(None, description="the map, rows of S F H G; default: generated from the row")
    is_slippery: bool = Field(False, description="moves may slip sideways (gymnasium's is_slippery)")
    reward_fn_type: str | None = Field(
        None,
        description="a reward function that grades the whole episode instead of the environment (Trinity-RFT's "
        "OpenJudge example: trajectory_accuracy_grader_reward), given the conversation as messages",
    )
    reward_fn_args: dict[str, Any] = Field({}, description="the arguments of reward_fn_type")

    @field_validator("reward_fn_type")
    @classmethod
    def _installed(cls, name: str | None) -> str | None:
        if name is not None:
            try:
                resolve(Kind.REWARD_FN, name)
            except LookupError as exc:  # an unknown name: the message lists the installed ones
                raise ValueError(str(exc)) from None
        return name


class FrozenLakeEpisode:
    """gymnasium's FrozenLakeEnv on one map, observed as text."""

    def __init__(self, desc: list[str], is_slippery: bool, max_moves: int, seed: int):
        lake = require("gymnasium.envs.toy_text.frozen_lake", INSTALL)
        self.env = lake.FrozenLakeEnv(desc=desc, is_slippery=is_slippery)
        self.max_moves, self.seed = max_moves, seed
        self.moves = 0

    def render(self) -> str:
        row, col = divmod(int(self.env.s), self.env.ncol)
        grid = [[TILES[tile] for tile in line] for line in self.env.desc]
        tile = self.env.desc[row][col]
        grid[row][col] = {b"H": "X", b"G": "√"}.get(tile, "P")
        return "\n".join(" ".join(line) for line in grid)

    def observation(self, moved: bool) -> str:
        text = f"Observation after {self.moves} moves:\n{self.render()}\n"
        if not moved:
            text += "Your last reply did not move you: end it with one move in triple backticks, e.g. ```Up```.\n"
        return text + f"You have not reached G yet. Moves left: {self.max_moves - self.moves}. Your next move?"

    def reset(self) -> str:
        self.env.reset(seed=self.seed)
        self.moves = 0
        return self.observation(moved=True)

    def step(self, action: str) -> tuple[str, float, bool]:
        move = parse_move(action)
        self.moves += 1
        if move is None:
            return self.observation(moved=False), 0.0, False
        before = int(self.env.s)
        _, reward, done, _, _ = self.env.step(move)
        return self.observation(moved=int(self.env.s) != before), float(reward), bool(done)

    def close(self) -> None:
        self.env.close()


class FrozenLakeWorkflow(EnvironmentWorkflow, MultiTurnWorkflow):
    """One episode of FrozenLake as one multi-turn experience (reward 1 at the goal, else 0)."""

    Args: ClassVar[type[PluginArgs]] = FrozenLakeArgs
    reads_prompt = False
    env_system_prompt = SYSTEM_PROMPT

    @property
    def step_limit(self) -> int:
        return self.args.agent_max_steps

    def parse_action(self, reply: str) -> str:
        return reply  # the episode reads the move out of the whole reply

    def format_observation(self, observation: str) -> str:
        return observation

    async def episode_components(self, record: EpisodeRecord) -> dict[str, float]:
        """The environment's reward, or with ``reward_fn_type`` that function's grade of the episode's
        conversation (its last reply as the response; no truth)."""
        args = self.args
        if args.reward_fn_type is None:
            return await super().episode_components(record)
        grader = resolve(Kind.REWARD_FN, args.reward_fn_type, "workflow_args.reward_fn_type")
        last = record.turns[-1]
        return await asyncio.to_thread(
            call_reward, grader, args.reward_fn_args, last.info["response_text"], None, messages=last.messages
        )

    def open_episode(self) -> FrozenLakeEpisode:
        args, raw = self.args, self.task.raw
        seed = int(raw.get("seed", 42))
        desc = args.desc or generate_map(int(raw.get("size", 4)), float(raw.get("p", 0.8)), seed, args.env_max_steps)
        return FrozenLakeEpisode(desc, args.is_slippery, args.agent_max_steps, seed)
