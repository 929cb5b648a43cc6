"""The summary ``trinity run`` prints at the end: what ran, how reward moved, whether it could learn, where things are."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from trinity.monitor.console import read_jsonl
from trinity.monitor.learnable import describe_trend, reward_trend


def print_summary(summaries: list[dict[str, Any]]) -> None:
    for summary in summaries:
        job_dir = Path(summary["job_dir"])
        ended = f"stopped by {summary['stopped']}" if summary.get("stopped") else "finished"
        click.echo(f"\n=== {summary['stage']} ({summary['mode']}) {ended} in {summary['seconds']:.0f} s")
        for role, result in summary["roles"].items():
            steps = result.get("steps")
            click.echo(f"  {role}: {steps} steps" if steps is not None else f"  {role}: done")
            place = summary.get("placement", {}).get(role)
            if place and place["gpu_ids"]:  # where GPUs were placed (a CPU run's one node goes unsaid)
                click.echo(f"    on node {place['node'] or place['node_id']}, GPUs {','.join(place['gpu_ids'])}")
            if result.get("stopped_early"):  # also logged by the role, but a role's last log lines can miss the console
                click.echo(f"    {result['stopped_early']}")
            metrics = job_dir / "monitor" / f"{role}.jsonl"
            trend = reward_trend(read_jsonl(metrics)) if metrics.is_file() else None
            if trend:
                click.echo(f"    reward: {describe_trend(trend)}")
            stall = summary.get("nothing_learnable", {}).get(role)
            if stall:
                click.echo(f"    {stall}")
        click.echo(f"  checkpoints: {job_dir}")
        click.echo(f"  metrics:     {job_dir / 'monitor'} (one JSONL file per role)")
        if summary.get("model_path"):
            click.echo(f"  final model: {summary['model_path']}")
