"""A real run leaves its resolved config, its summary and an HTML report, and ends naming it."""

from __future__ import annotations

from pathlib import Path

from e2e_helpers import trinity_run, write_experiment

from trinity.common.files import read_json
from trinity.config import load_config


def test_run_ends_with_the_report_of_its_plots(tmp_path, tiny_model_dir, arithmetic_data):
    config = write_experiment(
        tmp_path,
        tiny_model_dir,
        arithmetic_data,
        "algorithm.repeat_times=2",
        "buffer.batch_size=4",
        "buffer.total_steps=3",
    )
    result = trinity_run(config)
    assert result.returncode == 0, result.stderr[-3000:]
    job = tmp_path / "ckpt" / "quickstart" / "arithmetic"
    report = job / "report.html"
    assert result.stdout.strip().splitlines()[-1] == f"report: {report}"
    text = report.read_text()
    assert 'src="plots/reward.png"' in text and 'src="plots/loss.png"' in text
    assert (job / "plots" / "reward.png").stat().st_size > 1000
    assert "explorer steps</th><td>3" in text and "trainer steps</th><td>3" in text
    # The resolved config the run used, loadable again; the summary the report read.
    resolved = load_config(job / "config.yaml")
    assert resolved.buffer.total_steps == 3 and Path(resolved.model.model_path) == tiny_model_dir
    assert read_json(job / "meta" / "summary.json")["mode"] == "both"
