"""Trinity-RFT's ``async_*`` workflow names: one batch of them through the explorer's task runner,
each task scored as its synchronous twin scores it (they are the same async-native classes)."""

from __future__ import annotations

import pytest

from trinity.common.experience import Task
from trinity.plugins import Kind, resolve
from trinity_workflows.rewards import accuracy_reward, math_boxed_reward, math_reward

TWINS = {
    "async_simple_workflow": "simple_workflow",
    "async_math_workflow": "math_workflow",
    "async_math_boxed_workflow": "math_boxed_workflow",
    "async_math_eval_workflow": "math_eval_workflow",
    "async_math_rm_workflow": "math_rm_workflow",
    "async_math_ruler_workflow": "math_ruler_workflow",
}


@pytest.mark.parametrize("name", TWINS)
def test_an_async_name_is_its_twins_workflow(name):
    assert resolve(Kind.WORKFLOW, name) is resolve(Kind.WORKFLOW, TWINS[name])


def test_a_batch_of_async_names_runs_in_the_task_runner(run_tasks, external_judge):
    judge, prompts = external_judge
    row = {"prompt": "What is 2+2?", "response": "4"}
    tasks = [
        Task(workflow_type=name, raw=row, repeat_times=2, taskset_name="t", index=i, reward_fn_type=reward)
        for i, (name, reward) in enumerate(
            [(name, "accuracy_reward" if name == "async_simple_workflow" else None) for name in TWINS]
        )
    ]
    outcome = run_tasks(tasks, [judge.client])
    assert (outcome.failed_tasks, outcome.failed_runs) == (0, 0)
    by_task = {name: [e for e in outcome.experiences if e.eid.task == f"t:{i}"] for i, name in enumerate(TWINS)}
    for name, experiences in by_task.items():
        assert sorted(e.eid.run for e in experiences) == [0, 1], name
    graded = {
        "async_simple_workflow": accuracy_reward,
        "async_math_workflow": math_reward,
        "async_math_boxed_workflow": math_boxed_reward,
        "async_math_eval_workflow": math_reward,
    }
    for name, reward_fn in graded.items():
        for exp in by_task[name]:
            assert exp.reward == pytest.approx(sum(reward_fn(exp.info["response_text"], "4").values())), name
    assert all(e.logprobs.numel() == 0 for e in by_task["async_math_eval_workflow"])
    assert "\\boxed{}" in by_task["async_math_boxed_workflow"][0].messages[0]["content"]
    assert [e.reward for e in by_task["async_math_rm_workflow"]] == [0.7, 0.7]  # the stand-in judge's Score: 7
    assert sorted(e.reward for e in by_task["async_math_ruler_workflow"]) == pytest.approx([0.5, 1.0])
    assert len(prompts) == 3  # two rm grades and one RULER ranking
