"""``trinity view`` and ``trinity log`` on job folders written by the console monitor."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from click.testing import CliRunner

from trinity.cli import main
from trinity.monitor.console import ConsoleMonitor
from trinity.report import HEADLINE, find_jobs, throughput, write_report


def write_job(folder: Path, steps: int = 30) -> Path:
    """A job folder as a run leaves it: metrics of both roles through the console monitor, a log."""
    for role in ("explorer", "trainer"):
        monitor = ConsoleMonitor("p", "n", role, folder)
        for step in range(1, steps + 1):
            if role == "explorer":
                metrics = {"rollout/reward/mean": step / steps, "rollout/response_length/mean": 5.0}
                metrics |= {"rollout/staleness/mean": 1.0, "rollout/experience_count": 16}
            else:
                metrics = {"actor/pg_loss": 1.0 / step, "actor/kl_loss": 0.01 * step, "actor/entropy": 2.0}
                metrics |= {"experience_count": 16, "staleness_mean": 1.0}
            monitor.log(metrics, step)
        monitor.close()
    (folder / "log").mkdir(parents=True, exist_ok=True)
    (folder / "log" / "trainer.log").write_text("".join(f"line {i}\n" for i in range(50)))
    (folder / "config.yaml").write_text("project: p\nname: n\n")
    return folder


def test_view_writes_a_report_with_every_plot_the_metrics_allow(tmp_path):
    job = write_job(tmp_path / "job")
    result = CliRunner().invoke(main, ["view", str(job)])
    assert result.exit_code == 0, result.output
    report = job / "report.html"
    assert result.output.strip().splitlines()[-1] == f"report: {report}"
    text = report.read_text()
    for plot in ("reward", "loss", "kl", "entropy", "response_length", "staleness", "throughput"):
        png = job / "plots" / f"{plot}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", plot
        assert f'src="plots/{plot}.png"' in text
    assert "explorer reward</th><td>0.033 before any update -&gt; 0.967 at end (+0.933)" in text
    assert "project: p" in text  # the config


def test_a_stages_folder_gets_one_report_with_a_section_per_stage(tmp_path):
    write_job(tmp_path / "sft", steps=5)
    time.sleep(0.05)
    write_job(tmp_path / "grpo", steps=5)
    assert [job.name for job in find_jobs(tmp_path)] == ["sft", "grpo"]
    text = write_report(tmp_path).read_text()
    assert text.index("<h2>sft</h2>") < text.index("<h2>grpo</h2>")
    assert (tmp_path / "plots" / "grpo_reward.png").is_file() and (tmp_path / "plots" / "sft_loss.png").is_file()


def test_a_torn_last_line_is_skipped_and_missing_plots_are_named(tmp_path):
    job = tmp_path / "job"
    ConsoleMonitor("p", "n", "trainer", job).log({"actor/sft_loss": 1.0}, 1)
    with open(job / "monitor" / "trainer.jsonl", "a") as file:
        file.write('{"step": 2, "actor/sft')
    text = write_report(job).read_text()
    assert "Not logged by this run: reward, kl, entropy, response length, staleness, throughput." in text


def test_throughput_is_experiences_per_second_between_steps():
    records = [{"step": 1, "timestamp": 10.0}, {"step": 2, "timestamp": 12.0, "experience_count": 16}]
    (series,) = throughput("trainer", records)
    assert (series.key, series.steps, series.values) == ("experiences/s", [2], [8.0])


def test_view_and_log_refuse_a_folder_without_a_run(tmp_path):
    for command in ("view", "log"):
        result = CliRunner().invoke(main, [command, str(tmp_path)])
        assert result.exit_code == 2
        assert "no run here" in result.output


def test_log_shows_the_tail_of_each_log_and_the_headline_metrics(tmp_path):
    job = write_job(tmp_path / "job", steps=5)
    result = CliRunner().invoke(main, ["log", "-n", "2", str(job)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[:2] == ["trainer | line 48", "trainer | line 49"]
    assert "[explorer] step 5: rollout/reward/mean 1, rollout/response_length/mean 5, rollout/staleness/mean 1" in lines
    assert "[trainer] step 5: actor/pg_loss 0.2, actor/kl_loss 0.05, actor/entropy 2, staleness_mean 1" in lines
    assert not HEADLINE.match("rollout/experience_count")


def test_log_follow_prints_lines_as_the_run_writes_them(tmp_path):
    job = write_job(tmp_path / "job", steps=1)
    follower = subprocess.Popen(
        [sys.executable, "-m", "trinity.cli", "log", "--follow", "-n", "0", str(job)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(3)  # started and read to the end
        monitor = ConsoleMonitor("p", "n", "trainer", job)
        monitor.log({"actor/pg_loss": 0.5}, 2)
        monitor.close()
        with open(job / "log" / "trainer.log", "a") as file:
            file.write("a new line\n")
        seen = [follower.stdout.readline().strip() for _ in range(2)]
    finally:
        follower.terminate()
        follower.wait(timeout=10)
    assert sorted(seen) == ["[trainer] step 2: actor/pg_loss 0.5", "trainer | a new line"]


def test_view_open_hands_the_report_to_the_browser(tmp_path):
    job = write_job(tmp_path / "job", steps=3)
    opened = tmp_path / "opened.txt"
    browser = f"{sys.executable} -c \"import sys; open('{opened}', 'w').write(sys.argv[1])\" %s"
    subprocess.run(
        [sys.executable, "-m", "trinity.cli", "view", "--open", str(job)],
        env={**os.environ, "BROWSER": browser},
        check=True,
        capture_output=True,
    )
    deadline = time.monotonic() + 30
    while not opened.is_file() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert opened.read_text() == (job / "report.html").as_uri()
