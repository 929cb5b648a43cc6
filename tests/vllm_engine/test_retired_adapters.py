"""When a replaced LoRA adapter's folder may go: no vLLM needed (runs in the main suite too)."""

from __future__ import annotations

from pathlib import Path

from trinity_vllm.server import RetiredAdapters


def folders(root: Path, *names: str) -> list[Path]:
    for name in names:
        (root / name).mkdir()
        (root / name / "adapter_model.safetensors").write_bytes(b"x")
    return [root / name for name in names]


def test_a_replaced_folder_stays_while_a_request_that_started_before_runs(tmp_path: Path) -> None:
    v0, v1, v2 = folders(tmp_path, "v0", "v1", "v2")
    retired = RetiredAdapters()
    early = retired.begin()  # carries v0
    retired.retire(v0)
    later = retired.begin()  # carries v1
    retired.retire(v1)
    assert v0.exists() and v1.exists()
    retired.end(later)  # v1's only request ended, but the request on v0 started before v1's swap too
    assert v0.exists() and v1.exists()
    retired.end(early)
    assert not v0.exists() and not v1.exists() and v2.exists()
    assert retired.retired == [] and not retired.running


def test_with_no_request_running_a_replaced_folder_goes_at_once(tmp_path: Path) -> None:
    (v0,) = folders(tmp_path, "v0")
    retired = RetiredAdapters()
    retired.end(retired.begin())
    retired.retire(v0)
    assert not v0.exists()


def test_a_request_that_started_after_the_swap_does_not_hold_the_old_folder(tmp_path: Path) -> None:
    v0, v1 = folders(tmp_path, "v0", "v1")
    retired = RetiredAdapters()
    retired.retire(v0)
    ticket = retired.begin()
    assert not v0.exists()
    retired.retire(v1)
    assert v1.exists()
    retired.end(ticket)
    assert not v1.exists()
