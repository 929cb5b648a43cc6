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


# --- math reward model and RULER, with a hosted judge ---------------------------------------


@pytest.fixture(scope="module")
def hosted_judge():
    """A stand-in for a hosted judge (an OpenAI-compatible chat server, reached through
    ``engine_type: external``): it grades ``Score: 7`` and ranks RULER's candidates 1, 1/2, 1/3..."""
    import re
    import threading
    import time

    import uvicorn
    from fastapi import FastAPI

    from ports import free_port

    app, prompts = FastAPI(), []

    @app.get("/v1/models")
    def models():
        return {"object": "list", "data": [{"id": "judge", "object": "model", "created": 0, "owned_by": "test"}]}

    @app.post("/v1/chat/completions")
    def chat(body: dict):
        prompt = body["messages"][-1]["content"]
        prompts.append(prompt)
        count = len(re.findall(r"^# Candidate solution \d+$", prompt, re.MULTILINE))
        verdict = f"[{', '.join(str(1 / (i + 1)) for i in range(count))}]" if count else "Fair.\nScore: 7"
        message = {"role": "assistant", "content": verdict}
        choice = {"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}
        return {"id": "j", "object": "chat.completion", "created": 0, "model": "judge", "choices": [choice]}

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}/v1", prompts
    server.should_exit = True
    thread.join(timeout=10)


@pytest.fixture
def external_judge(hosted_judge, monkeypatch):
    from trinity.config.schema import ExternalModelConfig, InferenceModelConfig, ModelConfig
    from trinity.engine.client import EngineClient
    from trinity.engine.external import ExternalEngine

    url, prompts = hosted_judge
    monkeypatch.setenv("TRINITY_JUDGE_URL", url)
    config = InferenceModelConfig(engine_type="external")
    config.external_model_config = ExternalModelConfig(base_url_env="TRINITY_JUDGE_URL", model_name="judge")
    client = EngineClient(ExternalEngine(config, ModelConfig()))
    prompts.clear()
    yield ModelWrapper(client, SamplingArgs(n=1, max_tokens=64)), prompts
    client.close()


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
