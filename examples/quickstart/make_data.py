"""Write the quickstart's synthetic arithmetic data: tasks for GRPO and pairs for the SFT warm-up.

The tasks are the 25 sums a+b of digits 0-4 ("3+4=" -> "7"); the SFT pairs are the same
25 with their answers. The warm-up is kept short on purpose: it teaches the answer format
and leaves the model unsure (about 0.72 of its samples right), so GRPO, from rewards
alone, has varied groups to learn from and sharpens every answer.

    python examples/quickstart/make_data.py OUT_DIR
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as file:
        for row in rows:
            file.write(json.dumps(row) + "\n")


def main(out_dir: str) -> None:
    out = Path(out_dir)
    problems = [{"question": f"{a}+{b}=", "answer": str(a + b)} for a in range(5) for b in range(5)]
    random.Random(0).shuffle(problems)
    write_jsonl(out / "tasks.jsonl", problems)
    write_jsonl(out / "sft.jsonl", problems)
    print(f"wrote {len(problems)} arithmetic tasks and SFT pairs under {out}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).parent / "data"))
