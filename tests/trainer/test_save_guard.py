"""``trainer.save_strategy``: how saves of concurrent trainers (two processes here) are serialised."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from trinity.config.schema import Config
from trinity.trainer.save_and_resume import save_guard

HOLD_SECONDS = 1.5
HOLDER = textwrap.dedent(
    """
    import sys, time
    from trinity.config.schema import Config
    from trinity.trainer.save_and_resume import save_guard

    config = Config()
    config.checkpoint_root_dir, config.trainer.save_strategy, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    with save_guard(config):
        print("saving", flush=True)
        time.sleep(seconds)
    """
)


def saving_config(root: Path, strategy: str) -> Config:
    config = Config()
    config.checkpoint_root_dir = str(root)
    config.trainer.save_strategy = strategy
    return config


@pytest.mark.parametrize(
    ("strategy", "waits"),
    [("single_thread", True), ("single_process", True), ("single_node", True), ("unrestricted", False)],
)
def test_a_save_waits_for_another_process_s_save_unless_unrestricted(tmp_path, strategy, waits) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path), strategy, str(HOLD_SECONDS)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "saving"
        started = time.monotonic()
        with save_guard(saving_config(tmp_path, strategy)):
            waited = time.monotonic() - started
    finally:
        holder.wait(timeout=60)
    assert holder.returncode == 0
    assert (waited > HOLD_SECONDS / 2) == waits, f"{strategy}: waited {waited:.2f} s"
