"""The single-call workflows: prompts from task rows, then runs against the reference engine
and a tiny random model.

The model writes garbage, so runs check structure: how many experiences, their tokens
and logprobs, and that each reward is the reward function's verdict on its own text.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from trinity.buffer.taskset import TasksetReader
from trinity.config.schema import FormatConfig, TasksetConfig
from trinity.explorer.workflow import Workflow
from trinity.plugins import Kind, resolve
from trinity_workflows.base import WorkflowError
from trinity_workflows.rewards import (
    accuracy_reward,
    countdown_reward,
    math_boxed_reward,
    math_dapo_reward,
    math_reward,
)
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


def test_reward_fn_precedence_row_then_taskset_then_workflow_default(tmp_path, model):
    rows = [{"question": "q", "answer": "1"}, {"question": "q", "answer": "1", "grader": "countdown_reward"}]
    (tmp_path / "tasks.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    fmt = FormatConfig(prompt_key="question", response_key="answer", reward_fn_key="grader")

    def reward_fns(**storage_fields):
        storage = TasksetConfig(
            name="t", path=str(tmp_path / "tasks.jsonl"), format=fmt, batch_size=2, **storage_fields
        )
        tasks = TasksetReader(storage).read_batch()
        return [resolve(Kind.WORKFLOW, task.workflow_type)(task, model).reward_fn for task in tasks]

    assert reward_fns(default_workflow_type="math_workflow") == [math_reward, countdown_reward]
    taskset_default = reward_fns(default_workflow_type="math_workflow", default_reward_fn_type="math_boxed_reward")
    assert taskset_default == [math_boxed_reward, countdown_reward]


def test_simple_workflow_without_a_reward_fn_fails_before_calling_the_model(make_workflow, model):
    workflow = make_workflow("simple_workflow", {"prompt": "hi", "response": "x"})
    model.enable_history = True
    with pytest.raises(
        WorkflowError, match="simple_workflow failed on task t:3: ValueError: simple_workflow needs a reward function"
    ):
        workflow.run()
    assert model.extract_experience_from_history() == []


def test_countdown_builds_its_prompt_and_truth_from_the_row(make_workflow):
    workflow = make_workflow(
        "countdown_workflow", {"nums": [3, 5, 7], "target": 22}, workflow_args={"numbers_key": "nums"}
    )
    assert "Using the numbers [3, 5, 7], create an equation that equals 22." in workflow.messages()[-1]["content"]
    assert workflow.truth == {"numbers": [3, 5, 7], "target": 22}
    assert workflow.reward_fn is countdown_reward


def test_countdown_on_trinity_rft_rows_prompt_and_json_answer(make_workflow):
    row = {"question": "Make 3 from 1, 2, 6.", "answer": '{"numbers": [1, 2, 6], "target": 3}'}
    workflow = make_workflow("countdown_workflow", row, format=QUICKSTART_FORMAT)
    assert workflow.messages() == [{"role": "user", "content": "Make 3 from 1, 2, 6."}]
    assert workflow.score("<answer>6 / 2 * 1</answer>", workflow.truth) == pytest.approx(
        {"format": 0.1, "accuracy": 0.9}
    )


def check_samples(experiences, count: int, reward_fn, truth, **reward_args) -> None:
    assert len(experiences) == count
    for exp in experiences:
        assert exp.response_length > 0
        assert exp.logprobs is not None and exp.logprobs.shape == (exp.response_length,)
        components = reward_fn(exp.info["response_text"], truth, **reward_args)
        assert exp.reward == pytest.approx(sum(components.values()))
        assert exp.metrics == pytest.approx(components)


def test_math_workflow_quickstart_row_sync_and_async(make_workflow):
    row = {"question": "3+4=", "answer": "7"}
    workflow = make_workflow("math_workflow", row, format=QUICKSTART_FORMAT, repeat_times=3)
    check_samples(workflow.run(), 3, math_reward, "7")
    check_samples(asyncio.run(workflow.run_async()), 3, math_reward, "7")
    assert workflow.run()[0].messages[1] == {"role": "user", "content": "3+4="}


def test_reward_fn_args_reach_the_reward_function(make_workflow):
    args = {"format_weight": 0.25}
    row = {"question": "1+1=", "answer": "2"}
    workflow = make_workflow("math_workflow", row, format=QUICKSTART_FORMAT, reward_fn_args=args, repeat_times=2)
    experiences = workflow.run()
    check_samples(experiences, 2, math_reward, "2", **args)
    assert set(experiences[0].metrics) == {"accuracy", "format"}


def test_unknown_reward_fn_args_fail_with_the_task_id(make_workflow):
    row = {"question": "1+1=", "answer": "2"}
    workflow = make_workflow("math_workflow", row, format=QUICKSTART_FORMAT, reward_fn_args={"nope": 1})
    with pytest.raises(WorkflowError, match=r"math_workflow failed on task t:3: TypeError: .*nope") as info:
        workflow.run()
    assert info.value.task_id == "t:3" and isinstance(info.value.__cause__, TypeError)


def test_a_row_without_its_prompt_column_fails_with_the_task_id(make_workflow):
    workflow = make_workflow("math_workflow", {"q": "1+1="}, format=QUICKSTART_FORMAT)
    with pytest.raises(WorkflowError, match="failed on task t:3: KeyError: .*no prompt column 'question'"):
        asyncio.run(workflow.run_async())


def test_simple_workflow_with_the_tasksets_reward_fn(make_workflow):
    row = {"prompt": "Capital of France?", "response": "Paris"}
    experiences = make_workflow("simple_workflow", row, reward_fn_type="accuracy_reward", repeat_times=2).run()
    check_samples(experiences, 2, accuracy_reward, "Paris")
    assert [m["role"] for m in experiences[0].messages] == ["user", "assistant"]  # no default system prompt


@pytest.mark.parametrize(
    ("name", "can_repeat"),
    [
        ("simple_workflow", True),
        ("math_workflow", True),
        ("math_boxed_workflow", True),
        ("math_eval_workflow", True),
        ("countdown_workflow", True),
        ("multi_turn_workflow", False),
        ("step_wise_workflow", False),
        ("tool_call_workflow", False),
        ("rubric_judge_workflow", True),
        ("on_policy_distill_workflow", True),
    ],
)
def test_every_registered_workflow_resolves(name, can_repeat):
    workflow_cls = resolve(Kind.WORKFLOW, name)
    assert issubclass(workflow_cls, Workflow) and workflow_cls.can_repeat is can_repeat


def test_math_boxed_workflow(make_workflow):
    row = {"prompt": "Compute 6*7.", "response": "42"}
    experiences = make_workflow("math_boxed_workflow", row, repeat_times=2).run()
    check_samples(experiences, 2, math_boxed_reward, "42")
    assert "\\boxed{}" in experiences[0].messages[0]["content"]


def test_math_eval_workflow_skips_logprobs(make_workflow):
    experiences = make_workflow("math_eval_workflow", {"prompt": "2+2?", "response": "4"}, repeat_times=2).run()
    assert len(experiences) == 2
    for exp in experiences:
        assert exp.logprobs.numel() == 0
        assert exp.reward == math_reward(exp.info["response_text"], "4")["accuracy"]


def test_countdown_workflow(make_workflow):
    row = {"numbers": [2, 3, 4], "target": 24}
    experiences = make_workflow("countdown_workflow", row, repeat_times=2).run()
    check_samples(experiences, 2, countdown_reward, row)


def test_response_length_reaches_a_reward_fn_that_declares_it(make_workflow):
    args = {"enable_overlong_penalty": True, "max_response_length": 16, "cache_length": 8, "penalty_factor": 1.0}
    workflow = make_workflow(
        "math_workflow", {"prompt": "1+1", "response": "2"}, reward_fn_type="math_dapo_reward", reward_fn_args=args
    )
    (exp,) = workflow.run()
    expected = math_dapo_reward(exp.info["response_text"], "2", response_length=exp.response_length, **args)
    assert exp.metrics == pytest.approx(expected) and "overlong" in exp.metrics


def test_on_policy_distill_workflow_records_the_teachers_logprobs(make_workflow, model, client):
    """The teacher here is the student's own engine: its logprobs of the sampled tokens are the
    sampling logprobs (both are the raw model distribution)."""
    row = {"question": "3+4=", "answer": "7"}
    experiences = make_workflow(
        "on_policy_distill_workflow", row, format=QUICKSTART_FORMAT, repeat_times=2, auxiliary_models=[model]
    ).run()
    assert len(experiences) == 2
    for exp in experiences:
        assert exp.teacher_logprobs.shape == exp.logprobs.shape == (exp.response_length,)
        assert exp.teacher_logprobs.tolist() == pytest.approx(exp.logprobs.tolist(), abs=1e-4)
        assert exp.reward == 0.0 and exp.metrics["kl_divergence"] == pytest.approx(0.0, abs=1e-3)
    scored = make_workflow(
        "on_policy_distill_workflow", row, format=QUICKSTART_FORMAT, reward_fn_type="math_reward",
        auxiliary_models=[model],
    ).run()  # fmt: skip
    assert "accuracy" in scored[0].metrics
    with pytest.raises(WorkflowError, match="teacher"):
        make_workflow("on_policy_distill_workflow", row, format=QUICKSTART_FORMAT).run()


def test_on_policy_distill_math_workflow_asks_qwen_math_style_and_grades_the_answer(make_workflow, model):
    row = {"question": "3+4=", "answer": "7"}
    workflow = make_workflow(
        "on_policy_distill_math_workflow", row, format=QUICKSTART_FORMAT, repeat_times=2, auxiliary_models=[model]
    )
    assert workflow.messages() == [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": f"3+4=\n{BOXED_SYSTEM_PROMPT}"},
    ]
    experiences = workflow.run()
    assert len(experiences) == 2
    for exp in experiences:
        assert exp.reward == exp.metrics["accuracy"] == math_reward(exp.info["response_text"], "7")["accuracy"]
        assert exp.teacher_logprobs.shape == (exp.response_length,) and "kl_divergence" in exp.metrics
