"""The whole CPU quickstart (SFT warm-up, then 200 GRPO steps) timed at this checkout and at
another commit, side by side: runs interleaved, each tree on the same model and data.

    python benchmarks/bench_quickstart.py COMMIT [--repeats N] [--workdir DIR]

A change that slows the main job shows here as a ratio above 1 (this checkout over COMMIT);
absolute times on a shared machine move 2x from hour to hour, ratios measured in one window do
not. The other commit runs from a git worktree under a temporary folder, its sources put ahead
of the installed (editable) packages on ``PYTHONPATH``: its plugins are the ones this checkout's
entry points name, so a commit whose plugin modules were renamed since cannot be compared.
Each run prints its wall time and the reward line of its summary; with ``--workdir`` the runs'
job folders stay there (``this0/quickstart/...``: ``trinity view`` draws their curves).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from figures import spread  # benchmarks/, the running script's folder
from omegaconf import OmegaConf

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = Path("examples") / "quickstart"


def sources(tree: Path) -> str:
    return os.pathsep.join(str(src) for src in sorted((tree / "packages").glob("*/src")))


def run_quickstart(tree: Path, model: Path, data: Path, out: Path) -> tuple[float, str]:
    """Seconds of ``trinity run`` on ``tree``'s quickstart config, and its GRPO reward line."""
    env = {
        **os.environ,
        "PYTHONPATH": sources(tree),
        "TRINITY_CHECKPOINT_ROOT_DIR": str(out),
        "TRINITY_MODEL_PATH": str(model),
    }
    config = OmegaConf.load(tree / QUICKSTART / "quickstart.yaml")  # the data paths set in the file:
    config.buffer.explorer_input.taskset.path = str(data / "tasks.jsonl")  # older commits merge no
    config.stages[0].buffer.trainer_input.experience_buffer.path = str(data / "sft.jsonl")  # stages.N overrides
    out.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(config, out / "quickstart.yaml")
    started = time.monotonic()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "trinity.cli",
            "run",
            "--config",
            str(out / "quickstart.yaml"),
        ],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
    )
    seconds = time.monotonic() - started
    if result.returncode:
        raise SystemExit(f"quickstart failed in {tree}:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}")
    rewards = re.findall(r"reward: .*", result.stdout)
    return seconds, rewards[-1] if rewards else "(no reward line)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("commit", help="the commit to compare this checkout with, e.g. 9c1b172")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--workdir", type=Path, help="keep the runs here (default: a temporary folder)")
    args = parser.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    with tempfile.TemporaryDirectory() as tmp:
        root = args.workdir.resolve() if args.workdir else Path(tmp)
        other = root / "other"
        subprocess.run(["git", "worktree", "add", "--detach", str(other), args.commit], cwd=REPO, check=True)
        try:
            from trinity.testing.tiny_model import build_tiny_model

            model = build_tiny_model(root / "model")
            subprocess.run([sys.executable, str(REPO / QUICKSTART / "make_data.py"), str(root / "data")], check=True)
            times: dict[str, list[float]] = {"this": [], args.commit: []}
            for repeat in range(args.repeats):
                for label, tree in (("this", REPO), (args.commit, other)):
                    seconds, reward = run_quickstart(tree, model, root / "data", root / f"{label}{repeat}")
                    times[label].append(seconds)
                    print(f"quickstart at {label}: {seconds:.1f} s, {reward}", flush=True)
            ratios = [a / b for a, b in zip(times["this"], times[args.commit], strict=True)]
            print(
                f"quickstart: this checkout {spread(times['this'], '.1f')} s, {args.commit} "
                f"{spread(times[args.commit], '.1f')} s; ratio {spread(ratios, '.3f')} over {args.repeats} pairs"
            )
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(other)], cwd=REPO, check=False)


if __name__ == "__main__":
    main()
