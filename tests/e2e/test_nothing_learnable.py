"""Runs that can learn nothing say so: a warning naming the cause and the key at the first step,
the metrics that show it, and the summary's ``nothing learnable`` line (``trinity.monitor.learnable``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from e2e_helpers import trinity_run, write_experiment

from trinity.common.files import read_json
from trinity.monitor.console import read_jsonl

JOB = Path("ckpt") / "quickstart" / "arithmetic"
PLUGINS = Path(__file__).with_name("algorithm_plugins")
SHORT = ("algorithm.repeat_times=2", "buffer.batch_size=4", "buffer.total_steps=3")
"""Three steps of four tasks run twice: eight prompts and four groups a step."""


def run(tmp_path: Path, model: Path, data: Path, *changes: str) -> tuple[str, Path]:
    """``trinity run`` of the short quickstart with ``changes``: its output and job folder."""
    result = trinity_run(write_experiment(tmp_path, model, data, *SHORT, *changes))
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-5000:]
    return output, tmp_path / JOB


def test_a_system_prompt_over_max_prompt_tokens_warns_at_step_one_and_the_summary_says_nothing_was_learnable(
    tmp_path, tiny_model_dir, arithmetic_data
):
    output, job = run(
        tmp_path,
        tiny_model_dir,
        arithmetic_data,
        "buffer.explorer_input.taskset.format.system_prompt='Answer with the difference.'",
    )
    warning = (
        "explorer: step 1: 8 of 8 prompts exceeded model.max_prompt_tokens 32 (longest 34): nothing was "
        "generated for them; raise model.max_prompt_tokens or shorten the prompt"
    )
    assert warning in output
    assert output.count("prompts exceeded") == 1  # not again at every step
    log = (job / "log" / "explorer.log").read_text()
    assert warning in log
    explorer = read_jsonl(job / "monitor" / "explorer.jsonl")
    assert [r["rollout/truncated_prompts"] for r in explorer] == [8, 8, 8]
    assert [r["rollout/empty_responses"] for r in explorer] == [8, 8, 8]
    assert {r["rollout/truncated_prompt_length/max"] for r in explorer} == {34}
    trainer = read_jsonl(job / "monitor" / "trainer.jsonl")
    assert [(r["actor/learnable_tokens"], r["actor/no_gradient"]) for r in trainer] == [(0, 1)] * 3
    assert "trainer: step 1: no gradient: none of its 8 rows has a response token" in output
    stall = "nothing learnable: 3 of 3 steps (all prompts truncated)"
    assert f"    {stall}" in output  # under the explorer in the summary
    assert "[explorer] step 3/3 (100%)" in output and "nothing learnable for 3 steps (all prompts truncated)" in output
    summary = read_json(job / "meta" / "summary.json")
    assert summary["nothing_learnable"] == {
        "explorer": stall,
        "trainer": "nothing learnable: 3 of 3 steps (no gradient)",
    }
    assert f"<th>explorer learning</th><td>{stall}</td>" in (job / "report.html").read_text()


@pytest.mark.parametrize(
    ("reward", "warning", "cause"),
    [
        (
            "truth_parity_reward",
            "4 of 4 groups had equal rewards (zero advantage): nothing to learn from them; "
            "check the reward function or raise algorithm.repeat_times",
            "all groups had equal rewards",
        ),
        (
            "constant_reward",  # as a solved task's steps: every sample right
            "all 8 samples scored 1 (zero advantage): none is better to learn from; the task is solved if that "
            "is the best score, else check the reward function",
            "every sample scored 1",
        ),
    ],
)
def test_equal_rewards_in_every_group_warn_and_the_summary_says_nothing_was_learnable(
    reward, warning, cause, tmp_path, tiny_model_dir, arithmetic_data, monkeypatch
):
    monkeypatch.setenv("TRINITY_PLUGIN_DIRS", str(PLUGINS))
    output, job = run(
        tmp_path, tiny_model_dir, arithmetic_data, f"buffer.explorer_input.default_reward_fn_type={reward}"
    )
    assert f"trainer: step 1: {warning}" in output and output.count("(zero advantage)") == 1  # not at every step
    trainer = read_jsonl(job / "monitor" / "trainer.jsonl")
    assert [r["critic/zero_advantage_groups"] for r in trainer] == [4, 4, 4]
    assert [r["critic/zero_advantage_group_fraction"] for r in trainer] == [1.0] * 3
    assert [r["actor/no_gradient"] for r in trainer] == [1.0] * 3
    explorer = read_jsonl(job / "monitor" / "explorer.jsonl")
    assert [r["rollout/truncated_prompts"] for r in explorer] == [0, 0, 0]
    assert "prompts exceeded" not in output
    stall = f"nothing learnable: 3 of 3 steps ({cause})"
    assert read_json(job / "meta" / "summary.json")["nothing_learnable"] == {"trainer": stall}
    assert f"    {stall}" in output
