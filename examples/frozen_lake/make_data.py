"""Write the FrozenLake tasks: one row per map (``size``, ``p``, ``seed``), 3 x 3 lakes.

python examples/frozen_lake/make_data.py OUT_DIR [--tasks 16]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--tasks", type=int, default=16)
    opts = parser.parse_args()
    opts.out.mkdir(parents=True, exist_ok=True)
    rows = [{"size": 3, "p": 0.8, "seed": seed} for seed in range(opts.tasks)]
    (opts.out / "tasks.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))


if __name__ == "__main__":
    main()
