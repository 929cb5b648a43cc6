"""The rubric judge: score parsing on plain strings; the workflow's calls against the tiny model."""

from __future__ import annotations

import pytest

from trinity.engine.base import SamplingArgs
from trinity.explorer.model_wrapper import ModelWrapper
from trinity_workflows.base import WorkflowError
from trinity_workflows.judge import parse_score


@pytest.mark.parametrize(
    ("text", "score"),
    [
        ("Good answer.\nScore: 7", 7.0),
        ("**Score:** 8.5", 8.5),
        ("score = 4/5", 8.0),  # rescaled onto max_score
        ("Score: 3 ... on reflection, Score: 9", 9.0),  # the last one counts
        ("Score: 11", None),  # out of range
        ("Score: -1", None),
        ("I would give it a seven.", None),
        ("", None),
        ("The scores 7 and 8", None),
    ],
)
def test_parse_score(text, score):
    assert parse_score(text, max_score=10) == score


@pytest.fixture
def judge(client) -> ModelWrapper:
    return ModelWrapper(client, SamplingArgs(n=1, max_tokens=8, temperature=1.0), enable_history=True)


ROW = {"prompt": "Explain gravity in one line.", "response": "Mass attracts mass.", "rubric": "Award 10 if correct."}


def test_a_judge_without_a_score_is_reported_with_the_task_id_after_its_retries(make_workflow, judge):
    workflow = make_workflow(
        "rubric_judge_workflow", ROW, auxiliary_models=[judge], workflow_args={"judge_retries": 1}, repeat_times=2
    )
    with pytest.raises(
        WorkflowError,
        match=r"failed on task t:3: JudgeError: the judge gave no score \(0 to 10\) for response \d in 2 attempts; its last reply: ",
    ) as info:
        workflow.run()
    assert info.value.task_id == "t:3"
    calls = judge.extract_experience_from_history()
    assert 2 <= len(calls) <= 4  # each response's judge was asked twice; the first failure ends the run
    prompt = calls[0].messages[0]["content"]
    for part in (
        "# Question\nExplain gravity in one line.",
        "# Reference answer\nMass attracts mass.",
        "# Rubric\nAward 10 if correct.",
        "Score: N",
    ):
        assert part in prompt


def test_the_judge_is_an_auxiliary_model(make_workflow):
    with pytest.raises(WorkflowError, match="the judge is auxiliary model 0, but explorer.auxiliary_models has 0"):
        make_workflow("rubric_judge_workflow", ROW).run()


def test_the_rubric_is_required(make_workflow, judge):
    row = {"prompt": "q", "response": "a"}
    with pytest.raises(WorkflowError, match="no rubric"):
        make_workflow("rubric_judge_workflow", row, auxiliary_models=[judge]).run()
