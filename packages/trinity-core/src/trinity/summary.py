"""The summary ``trinity run`` prints at the end: what ran, how reward moved, whether it could learn, where things are."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from trinity.monitor.console import read_jsonl

REWARD_KEY = "rollout/reward/mean"


def reward_trend(metrics_file: Path) -> tuple[float, float] | None:
    """Mean rollout reward over the first and the last tenth of the steps (at least one step each)."""
    if not metrics_file.is_file():
        return None
    rewards = [record[REWARD_KEY] for record in read_jsonl(metrics_file) if REWARD_KEY in record]
    if not rewards:
        return None
    tenth = max(1, len(rewards) // 10)
    return sum(rewards[:tenth]) / tenth, sum(rewards[-tenth:]) / tenth


def print_summary(summaries: list[dict[str, Any]]) -> None:
    for summary in summaries:
        job_dir = Path(summary["job_dir"])
        click.echo(f"\n=== {summary['stage']} ({summary['mode']}) finished in {summary['seconds']:.0f} s")
        for role, result in summary["roles"].items():
            steps = result.get("steps")
            click.echo(f"  {role}: {steps} steps" if steps is not None else f"  {role}: done")
            place = summary.get("placement", {}).get(role)
            if place and place["gpu_ids"]:  # where GPUs were placed (a CPU run's one node goes unsaid)
                click.echo(f"    on node {place['node'] or place['node_id']}, GPUs {','.join(place['gpu_ids'])}")
            if result.get("stopped_early"):  # also logged by the role, but a role's last log lines can miss the console
                click.echo(f"    {result['stopped_early']}")
            trend = reward_trend(job_dir / "monitor" / f"{role}.jsonl")
            if trend:
                click.echo(f"    reward: {trend[0]:.3f} at start -> {trend[1]:.3f} at end ({trend[1] - trend[0]:+.3f})")
            stall = summary.get("nothing_learnable", {}).get(role)
            if stall:
                click.echo(f"    {stall}")
        click.echo(f"  checkpoints: {job_dir}")
        click.echo(f"  metrics:     {job_dir / 'monitor'} (one JSONL file per role)")
        if summary.get("model_path"):
            click.echo(f"  final model: {summary['model_path']}")
