"""How the catalogue's workflows turn a task row into a conversation, a truth and a reward fn."""

from __future__ import annotations

import pytest

from trinity_workflows.rewards import countdown_reward, math_boxed_reward, math_reward
from trinity_workflows.workflows import BOXED_SYSTEM_PROMPT, THINK_ANSWER_SYSTEM_PROMPT

QUICKSTART_FORMAT = {"prompt_type": "plaintext", "prompt_key": "question", "response_key": "answer"}


def test_math_workflow_on_a_quickstart_row(make_workflow):
    workflow = make_workflow("math_workflow", {"question": "3+4=", "answer": "7"}, format=QUICKSTART_FORMAT)
    assert workflow.messages() == [
        {"role": "system", "content": THINK_ANSWER_SYSTEM_PROMPT},
        {"role": "user", "content": "3+4="},
    ]
    assert workflow.truth == "7"
    assert workflow.reward_fn is math_reward


def test_taskset_system_prompt_replaces_the_default_and_a_row_system_prompt_wins(make_workflow):
    fmt = {**QUICKSTART_FORMAT, "system_prompt": "Answer with a number.", "system_prompt_key": "sys"}
    assert make_workflow("math_workflow", {"question": "q", "answer": "1"}, format=fmt).messages()[0]["content"] == (
        "Answer with a number."
    )
    row = {"question": "q", "answer": "1", "sys": "Be brief."}
    assert make_workflow("math_workflow", row, format=fmt).messages()[0]["content"] == "Be brief."


def test_messages_rows_keep_their_system_message(make_workflow):
    fmt = {"prompt_type": "messages", "messages_key": "conv", "response_key": "answer"}
    conv = [{"role": "system", "content": "Mine."}, {"role": "user", "content": "1+1?"}]
    workflow = make_workflow("math_boxed_workflow", {"conv": conv, "answer": "2"}, format=fmt)
    assert workflow.messages() == conv
    fmt_no_system = {**fmt, "system_prompt": None}
    user_only = make_workflow("math_boxed_workflow", {"conv": conv[1:], "answer": "2"}, format=fmt_no_system)
    assert user_only.messages()[0] == {"role": "system", "content": BOXED_SYSTEM_PROMPT}


def test_reward_fn_precedence_row_then_taskset_then_workflow_default(make_workflow):
    fmt = {**QUICKSTART_FORMAT, "reward_fn_key": "grader"}
    assert make_workflow("math_workflow", {"question": "q"}, format=fmt).reward_fn is math_reward
    assert (
        make_workflow("math_workflow", {"question": "q"}, format=fmt, reward_fn_type="math_boxed_reward").reward_fn
        is math_boxed_reward
    )
    row = {"question": "q", "grader": "countdown_reward"}
    assert (
        make_workflow("math_workflow", row, format=fmt, reward_fn_type="math_boxed_reward").reward_fn
        is countdown_reward
    )


def test_simple_workflow_without_a_reward_fn_names_the_task(make_workflow):
    workflow = make_workflow("simple_workflow", {"prompt": "hi", "response": "x"})
    with pytest.raises(ValueError, match="simple_workflow needs a reward function"):
        workflow.score("x", "x")


def test_countdown_builds_its_prompt_and_truth_from_the_row(make_workflow):
    workflow = make_workflow(
        "countdown_workflow", {"nums": [3, 5, 7], "target": 22}, workflow_args={"numbers_key": "nums"}
    )
    assert "Using the numbers [3, 5, 7], create an equation that equals 22." in workflow.messages()[-1]["content"]
    assert workflow.truth == {"numbers": [3, 5, 7], "target": 22}
    assert workflow.reward_fn is countdown_reward
