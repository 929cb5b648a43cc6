"""``monitor.enable_ray_timeline``: the Ray timeline of a run, for chrome://tracing or Perfetto."""

from __future__ import annotations

from pathlib import Path


def export_ray_timeline(job_dir: str | Path) -> Path:
    """Write the connected Ray cluster's task timeline to ``<job_dir>/monitor/timeline.json``.

    Called by the launcher when the run ends (Ray must still be initialised), so the
    file covers every task and actor call of the run.
    """
    import ray

    path = Path(job_dir) / "monitor" / "timeline.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    ray.timeline(filename=str(path))
    return path
