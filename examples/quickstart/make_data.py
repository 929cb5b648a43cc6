"""Write the quickstart's synthetic arithmetic data: tasks for GRPO and pairs for the SFT warm-up.

Every sum a+b of two digits is a task ("3+4=" -> "7"). The SFT warm-up sees each problem
once per epoch with its answer, which teaches the answer format and part of the facts;
GRPO then raises accuracy from the rewards alone.

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
    problems = [{"question": f"{a}+{b}=", "answer": str(a + b)} for a in range(10) for b in range(10)]
    random.Random(0).shuffle(problems)
    write_jsonl(out / "tasks" / "train.jsonl", problems)
    write_jsonl(out / "tasks" / "test.jsonl", problems[:32])
    write_jsonl(out / "sft" / "train.jsonl", problems)
    print(f"wrote {len(problems)} arithmetic tasks and SFT pairs under {out}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).parent / "data"))
