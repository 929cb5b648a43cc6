"""The rubric judge: score parsing on plain strings; the workflow's calls against the tiny model."""

from __future__ import annotations

import pytest

from trinity.model.engines import SamplingArgs
from trinity.rollout.model_wrapper import ModelWrapper
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


# --- math reward model and RULER, with a hosted judge (conftest.hosted_judge) -----------------


MATH_ROW = {"question": "What is 2+2?", "answer": "4"}
MATH_FORMAT = {"prompt_key": "question", "response_key": "answer"}


def test_math_rm_rewards_the_reward_models_grade_and_keeps_the_truth_as_a_metric(make_workflow, external_judge):
    judge, prompts = external_judge
    workflow = make_workflow("math_rm_workflow", MATH_ROW, auxiliary_models=[judge], format=MATH_FORMAT, repeat_times=2)
    experiences = workflow.run()
    assert [e.reward for e in experiences] == [0.7, 0.7]
    assert all(e.metrics["gold_reward"] == 0.0 for e in experiences)  # the tiny model does not say 4
    assert len(prompts) == 2 and "# Reference answer\n4" in prompts[0] and "A wrong final answer" in prompts[0]
    assert experiences[0].messages[0]["content"].startswith("A conversation between User and Assistant")


def test_a_rubric_judge_keeps_the_tasksets_reward_as_gold_reward(make_workflow, external_judge):
    judge, _ = external_judge
    row = {**MATH_ROW, "rubric": "Award 10 if the answer is right."}
    graded = make_workflow("rubric_judge_workflow", row, auxiliary_models=[judge], format=MATH_FORMAT)
    (unscored,) = graded.run()
    assert unscored.reward == 0.7 and "gold_reward" not in unscored.metrics  # no reward function named
    scored = make_workflow(
        "rubric_judge_workflow", row, auxiliary_models=[judge], format=MATH_FORMAT, reward_fn_type="math_reward"
    )
    (experience,) = scored.run()
    assert experience.reward == 0.7 and experience.metrics["gold_reward"] == 0.0  # the tiny model does not say 4


def test_ruler_ranks_the_group_in_one_judge_call(make_workflow, external_judge):
    judge, prompts = external_judge
    workflow = make_workflow(
        "math_ruler_workflow", MATH_ROW, auxiliary_models=[judge], format=MATH_FORMAT, repeat_times=3
    )
    experiences = workflow.run()
    assert [e.reward for e in experiences] == pytest.approx([1.0, 0.5, 1 / 3])
    assert [e.metrics["ruler"] for e in experiences] == pytest.approx([1.0, 0.5, 1 / 3])
    assert len(prompts) == 1 and "# Question\nWhat is 2+2?" in prompts[0]
    for i, exp in enumerate(experiences):
        assert f"# Candidate solution {i + 1}\n{exp.info['response_text']}" in prompts[0]


def test_a_ruler_judge_without_a_list_fails_the_run(make_workflow, judge):
    workflow = make_workflow(
        "math_ruler_workflow",
        MATH_ROW,
        auxiliary_models=[judge],
        format=MATH_FORMAT,
        workflow_args={"judge_retries": 0},
    )
    with pytest.raises(WorkflowError, match=r"JudgeError: the judge gave no list of 1 scores in 1 attempts"):
        workflow.run()


@pytest.mark.parametrize(
    ("text", "scores"),
    [
        ("ranking: [0.2, 0.9]", [0.2, 0.9]),
        ("[1] then finally [0.5, 1.5]", [0.5, 1.0]),  # the last list, clipped
        ("[0.5, 0.5, 0.5]", None),  # not as many as the candidates
        ("[good, bad]", None),
        ("no list", None),
    ],
)
def test_parse_scores(text, scores):
    from trinity_workflows.judge import parse_scores

    assert parse_scores(text, 2) == scores


# --- the judge behind an OpenAI-compatible API (rubric_judge_openai_workflow) -----------------


def test_a_rubric_judge_behind_an_api_grades_each_sample(make_workflow, hosted_judge, monkeypatch):
    url, prompts = hosted_judge
    monkeypatch.setenv("MY_JUDGE_URL", url)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    prompts.clear()
    args = {"judge_model_name": "judge", "judge_api_base_url_env": "MY_JUDGE_URL", "rubric": "Award 10 if right."}
    workflow = make_workflow(
        "rubric_judge_openai_workflow", MATH_ROW, format=MATH_FORMAT, workflow_args=args, repeat_times=2
    )
    experiences = workflow.run()
    assert [e.reward for e in experiences] == [0.7, 0.7]
    assert len(prompts) == 2 and "Award 10 if right." in prompts[0] and "# Reference answer\n4" in prompts[0]
    assert experiences[0].info["judge_output"] == "Fair.\nScore: 7"


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ({"rubric": "r"}, "set workflow_args.judge_model_name"),
        ({"rubric": "r", "judge_model_name": "judge", "judge_api_base_url_env": "NO_SUCH_URL"}, "NO_SUCH_URL"),
    ],
)
def test_a_rubric_judge_api_without_its_name_or_address_fails_before_sampling(make_workflow, model, args, error):
    model.enable_history = True
    with pytest.raises(WorkflowError, match=error):
        make_workflow("rubric_judge_openai_workflow", MATH_ROW, format=MATH_FORMAT, workflow_args=args).run()
    assert model.extract_experience_from_history() == []  # the policy was not asked


# --- trainable RULER: the policy judges its own group -----------------------------------------


def test_ruler_rewards_average_the_parsed_judgements_and_reward_each_judge_by_its_error():
    from trinity_workflows.judge import ruler_rewards

    replies = ["[1.0, 0.0]", "thinking... [0.5, 0.5]", "no list"]
    means, judge_rewards, success = ruler_rewards(replies, 2, gold=[1.0, 0.0])
    assert means == [0.75, 0.25]  # over the two replies that parse
    assert judge_rewards == [1.0, 0.5, 0.0]  # 1 - mean |score - gold|; a reply without a list gets 0
    assert success == pytest.approx(2 / 3)
    assert ruler_rewards(["none"], 2, gold=None) == ([0.0, 0.0], [0.0], 0.0)


@pytest.mark.parametrize("labelled", [True, False])
def test_trainable_ruler_adds_the_policys_judgements_as_their_own_group(run_tasks, labelled):
    from trinity.common.experience import Task

    task = Task(
        workflow_type="math_trainable_ruler_workflow",
        raw=MATH_ROW,
        format=MATH_FORMAT,
        workflow_args={"ground_truth_probability": 1.0 if labelled else 0.0},
        repeat_times=2,
        taskset_name="t",
        index=0,
    )
    outcome = run_tasks([task])
    responses = [e for e in outcome.experiences if e.eid.task == "t:0"]
    judgements = [e for e in outcome.experiences if e.eid.task == "t:0/ruler"]
    assert len(responses) == 2 and len(judgements) == (2 if labelled else 0)
    for exp in responses:  # the tiny model neither answers 4 nor writes a list of scores
        assert exp.reward == exp.metrics["gold_reward"] == 0.0 and exp.metrics["judge_success"] == 0.0
    for judgement in judgements:
        assert "# Candidate solution 2" in judgement.messages[-2]["content"]
        assert judgement.reward == judgement.metrics["reward_for_judger"] == 0.0


def test_trainable_ruler_args_are_checked():
    from pydantic import ValidationError

    from trinity_workflows.judge import MathTrainableRULERWorkflow

    with pytest.raises(ValidationError, match="ground_truth_probability"):
        MathTrainableRULERWorkflow.Args.model_validate({"ground_truth_probability": 1.5})
