import json
import time

import pytest

from trinity.monitor.timeline import export_ray_timeline


@pytest.fixture
def local_ray(monkeypatch):
    """A local Ray, or the one another test already started (then left running)."""
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        yield ray
        return
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    ray.init(num_cpus=1, include_dashboard=False)
    yield ray
    ray.shutdown()


def test_ray_timeline_is_exported_to_the_monitor_dir(tmp_path, local_ray):
    @local_ray.remote
    def square(x: int) -> int:
        return x * x

    assert local_ray.get([square.remote(i) for i in range(3)]) == [0, 1, 4]
    deadline = time.monotonic() + 10  # Ray reports task events to its GCS about once a second
    while True:
        path = export_ray_timeline(tmp_path)
        names = [event.get("name", "") for event in json.loads(path.read_text())]
        if any("square" in name for name in names) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert path == tmp_path / "monitor" / "timeline.json"
    assert any("square" in name for name in names), names
