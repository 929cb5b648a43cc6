"""Write the FrozenLake data: the tasks (one 3 x 3 map per row: ``size``, ``p``, ``seed``) and a
warm-up set that imitates the shortest path on other maps, in the workflow's own prompts.

    python examples/frozen_lake/make_data.py OUT_DIR [--tasks 16] [--warmup-maps 32]

``sft.jsonl`` has one row per expert move: the episode so far (system prompt, observations,
earlier moves) and the move, answered as the workflow asks (```` ```Right``` ````).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from trinity_workflows.envs.frozen_lake import SYSTEM_PROMPT, FrozenLakeEpisode, generate_map, shortest_moves

SIZE, FROZEN, MOVES = 3, 0.8, 3  # the map size, frozen-tile probability and moves of frozen_lake.yaml


def expert_rows(seed: int) -> list[dict]:
    """The shortest walk on the map of ``seed``, one SFT row per move."""
    desc = generate_map(SIZE, FROZEN, seed, MOVES)
    episode = FrozenLakeEpisode(desc, is_slippery=False, max_moves=MOVES, seed=seed)
    messages, rows = [{"role": "system", "content": SYSTEM_PROMPT}], []
    observation = episode.reset()
    for move in shortest_moves(desc):
        messages = [*messages, {"role": "user", "content": observation}, {"role": "assistant", "content": f"```{move}```"}]
        rows.append({"messages": messages})
        observation, _, _ = episode.step(f"```{move}```")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--warmup-maps", type=int, default=32)
    opts = parser.parse_args()
    opts.out.mkdir(parents=True, exist_ok=True)
    tasks = [{"size": SIZE, "p": FROZEN, "seed": seed} for seed in range(opts.tasks)]
    (opts.out / "tasks.jsonl").write_text("".join(json.dumps(row) + "\n" for row in tasks))
    warmup = [row for seed in range(1000, 1000 + opts.warmup_maps) for row in expert_rows(seed)]
    (opts.out / "sft.jsonl").write_text("".join(json.dumps(row) + "\n" for row in warmup))


if __name__ == "__main__":
    main()
