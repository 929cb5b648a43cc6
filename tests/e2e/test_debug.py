"""``trinity debug``: the quickstart's workflow and a multi-turn one on the tiny model, in this process
with the transformers engine; planted problems named, user mistakes refused in one line."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from e2e_helpers import write_experiment

from trinity.cli import main

SEQUENTIAL = "buffer.explorer_input.taskset.data_selector.selector_type=sequential"
"""The taskset's first rows in file order, so a test knows which tasks ran."""


def debug(config: Path, *args: str) -> Result:
    return CliRunner().invoke(main, ["debug", "--config", str(config), *args])


def rows(data: Path) -> list[dict]:
    return [json.loads(line) for line in (data / "tasks.jsonl").read_text().splitlines()]


def blocks(output: str) -> list[tuple[str, str]]:
    """``(headline, text)`` of each block, in order: the line above it (``prompt · N tokens``,
    ``run 0 · ...``, ``failed run:``) and the block's text."""
    found: list[tuple[str, str]] = []
    for line in output.splitlines():
        if line.startswith("    │"):
            headline, text = found.pop()
            found.append((headline, text + line[len("    │") :] + "\n"))
        elif line.startswith("  "):
            found.append((line.strip(), ""))
    return [(headline, text) for headline, text in found if text]


def runs(output: str) -> list[tuple[str, str]]:
    return [(headline, text) for headline, text in blocks(output) if headline.startswith("run ")]


def test_the_quickstart_s_experiences_are_shown_and_truncation_named(tmp_path, tiny_model_dir, arithmetic_data):
    config = write_experiment(tmp_path, tiny_model_dir, arithmetic_data, "model.max_response_tokens=1", stages=True)
    page = tmp_path / "debug.html"
    result = debug(config, "--tasks", "2", "--html", str(page), SEQUENTIAL)
    assert result.exit_code == 1, result.output
    assert "loading the rollout model" in result.stderr and "[2/2] task arithmetic:1: math_workflow" in result.stderr
    prompts = [text for headline, text in blocks(result.stdout) if headline.startswith("prompt · ")]
    system = "<|im_start|>system\nAnswer with the sum.<|im_end|>\n"
    assert prompts == [
        f"{system}<|im_start|>user\n{row['question']}<|im_end|>\n<|im_start|>assistant\n\n"
        for row in rows(arithmetic_data)[:2]
    ]
    for index in range(2):
        assert f"task arithmetic:{index} · math_workflow · 8 experiences in" in result.stdout
    shown = runs(result.stdout)
    assert len(shown) == 16
    for headline, text in shown:
        assert re.fullmatch(r"run \d · reward [\d.]+ \(accuracy [\d.]+\) · 1 response token, 1 trained.*", headline)
        assert text.startswith("⟦") and text.endswith("⟧\n")  # its one token, trained
    summary = result.stdout.splitlines()[-1]
    assert re.match(
        r"first problem: truncation: task arithmetic:0 run \d: the response hit model.max_response_tokens 1:", summary
    )
    text = page.read_text()
    assert "<mark>" in text and "&lt;|im_start|&gt;user" in text and summary in text


def test_it_runs_without_ray(tmp_path, tiny_model_dir, arithmetic_data):
    """In a process of its own (the tests' may have imported Ray): the command never imports it."""
    config = write_experiment(tmp_path, tiny_model_dir, arithmetic_data, "algorithm.repeat_times=2")
    script = (
        "import sys; from click.testing import CliRunner; from trinity.cli import main; "
        f"result = CliRunner().invoke(main, ['debug', '--config', {str(config)!r}, '-n', '1']); "
        "print(result.exit_code, 'ray' in sys.modules, result.stdout.count(' · reward '))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.stdout.split() == ["1", "False", "2"], done.stdout + done.stderr


@pytest.mark.parametrize("reward, named", [("constant_reward", True), ("checksum_reward", False)])
def test_rewards_all_equal_within_a_task_s_group_are_named(tmp_path, tiny_model_dir, arithmetic_data, reward, named):
    config = write_experiment(tmp_path, tiny_model_dir, arithmetic_data)
    result = debug(config, "--tasks", "1", f"buffer.explorer_input.default_reward_fn_type=debug_plugins.{reward}")
    assert result.exit_code == 1, result.output  # the responses of 6 random tokens are truncated either way
    component = reward.removesuffix("_reward")
    assert len(re.findall(rf"^  run \d · reward [\d.]+ \({component} [\d.]+\)", result.stdout, re.M)) == 8
    assert ("! all-equal rewards: all 8 rewards are 0.5" in result.stdout) is named
    assert ("all-equal rewards" in result.stdout) is named


def sum_pairs(tmp_path: Path, data: Path) -> Path:
    """Two sums a row: ``question``, then ``turns[0]`` after the model's reply; ``answer`` is the second's."""
    sums = rows(data)
    pairs = [
        {"question": a["question"], "turns": [b["question"]], "answer": b["answer"]}
        for a, b in zip(sums[:-1], sums[1:], strict=True)
    ]
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(pair) + "\n" for pair in pairs))
    return path


def multi_turn(tmp_path: Path, model: Path, data: Path, workflow: str) -> Result:
    config = write_experiment(tmp_path, model, data)
    return debug(
        config,
        "--tasks=1",
        f"buffer.explorer_input.taskset.path={sum_pairs(tmp_path, data)}",
        f"buffer.explorer_input.default_workflow_type={workflow}",
        "model.max_prompt_tokens=64",
        "algorithm.repeat_times=2",
        SEQUENTIAL,
    )


def test_a_multi_turn_workflow_s_mask_shows_its_replies_trained_and_the_user_turn_not(
    tmp_path, tiny_model_dir, arithmetic_data
):
    result = multi_turn(tmp_path, tiny_model_dir, arithmetic_data, "multi_turn_workflow")
    follow_up = rows(arithmetic_data)[1]["question"]
    shown = runs(result.stdout)
    assert len(shown) == 2, result.output
    reply = r"⟦[^⟦⟧]*<\|im_end\|>⟧"
    user_turn = rf"\n<\|im_start\|>user\n{re.escape(follow_up)}<\|im_end\|>\n<\|im_start\|>assistant\n"
    for headline, text in shown:
        assert re.fullmatch(rf"{reply}{user_turn}{reply}\n\n", text), text
        total, trained = map(int, re.search(r"(\d+) response tokens, (\d+) trained", headline).groups())
        assert 0 < trained < total
    assert "no trained token" not in result.stdout


def test_a_mask_with_no_trained_token_is_named(tmp_path, tiny_model_dir, arithmetic_data):
    result = multi_turn(tmp_path, tiny_model_dir, arithmetic_data, "debug_plugins.UntrainedMultiTurn")
    assert result.exit_code == 1, result.output
    shown = runs(result.stdout)
    assert len(shown) == 2 and not any("⟦" in text for _, text in shown)
    assert all(", 0 trained" in headline for headline, _ in shown)
    assert (
        len(re.findall(r"^  ! no trained token: the action mask is 0 on all \d+ response tokens", result.stdout, re.M))
        == 2
    )


def test_a_failed_run_shows_its_traceback_and_is_named(tmp_path, tiny_model_dir, arithmetic_data):
    config = write_experiment(tmp_path, tiny_model_dir, arithmetic_data)
    result = debug(
        config, "-n", "1", "buffer.explorer_input.default_workflow_type=debug_plugins.FailingWorkflow", SEQUENTIAL
    )
    assert result.exit_code == 1, result.output
    assert "task arithmetic:0 · debug_plugins.FailingWorkflow · 0 experiences, 1 failed runs" in result.stdout
    ((_, trace),) = [block for block in blocks(result.stdout) if block[0] == "failed run:"]
    assert trace.startswith("Traceback (most recent call last):\n") and "in run_async\n" in trace
    assert trace.endswith("ValueError: planted failure on arithmetic:0\n")
    assert result.stdout.splitlines()[-1] == (
        "first problem: error: task arithmetic:0: ValueError: planted failure on arithmetic:0"
    )


def test_module_reward_scores_responses_against_the_tasks_truths(tmp_path, tiny_model_dir, arithmetic_data):
    config = write_experiment(tmp_path, tiny_model_dir, arithmetic_data)
    first, second, third = (row["answer"] for row in rows(arithmetic_data)[:3])
    responses = tmp_path / "responses.txt"
    responses.write_text(f"{json.dumps(f'so:{chr(10)}{second}')}\n\nno idea\n")
    result = debug(config, "-m", "reward", "-r", first, "--response-file", str(responses), SEQUENTIAL)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        f"task arithmetic:0 · math_reward · truth '{first}'",
        f"  '{first}' → reward 1 (accuracy 1)",
        f"task arithmetic:1 · math_reward · truth '{second}'",
        f"  'so:\\n{second}' → reward 1 (accuracy 1)",
        f"task arithmetic:2 · math_reward · truth '{third}'",
        "  'no idea' → reward 0 (accuracy 0)",
        "no problem seen",
    ]
    truths = debug(config, "--module", "reward", SEQUENTIAL)  # no response given: the truths score themselves
    assert truths.exit_code == 0 and truths.stdout.count("→ reward 1 (accuracy 1)") == 4, truths.output


def test_module_reward_shows_a_failing_reward_function_s_traceback(tmp_path, tiny_model_dir, arithmetic_data):
    config = write_experiment(tmp_path, tiny_model_dir, arithmetic_data)
    result = debug(
        config, "-m", "reward", "-r", "7", "buffer.explorer_input.default_reward_fn_type=debug_plugins.failing_reward"
    )
    assert result.exit_code == 1, result.output
    ((_, trace),) = [block for block in blocks(result.stdout) if block[0] == "'7' failed:"]
    assert trace.startswith("Traceback (most recent call last):\n") and "in failing_reward\n" in trace
    assert result.stdout.splitlines()[-1].endswith(": ZeroDivisionError: planted in failing_reward")


@pytest.mark.parametrize(
    "change, named",
    [
        ("bogus.key=1", ["bogus: unknown key"]),
        ("buffer.explorer_input.default_workflow_type=math_workflw", ["default_workflow_type: unknown workflow"]),
        ("buffer.explorer_input.taskset.path={tmp}/none.jsonl", ["{tmp}/none.jsonl: cannot load"]),
        ("model.model_path={tmp}/no_model", ["explorer.rollout_model: ", "{tmp}/no_model"]),
        ("", ["config file not found: {tmp}/none.yaml"]),
    ],
)
def test_a_user_s_mistake_is_one_line_naming_it_and_exit_2(tmp_path, tiny_model_dir, arithmetic_data, change, named):
    config = write_experiment(tmp_path, tiny_model_dir, arithmetic_data)
    args = [change.format(tmp=tmp_path)] if change else []
    result = debug(config if change else tmp_path / "none.yaml", *args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and result.stdout == ""
    error = result.stderr.splitlines()[-1]
    assert error.startswith("error: ") and all(part.format(tmp=tmp_path) in error for part in named)
    assert result.stderr.count("error: ") == 1


def test_html_is_for_the_workflow_module_and_responses_for_the_reward_module(tmp_path):
    refused = [debug(tmp_path / "x.yaml", "-m", "reward", "--html", "x.html"), debug(tmp_path / "x.yaml", "-r", "7")]
    assert [result.exit_code for result in refused] == [2, 2]
    assert "--html shows experiences" in refused[0].output and "go with --module reward" in refused[1].output
