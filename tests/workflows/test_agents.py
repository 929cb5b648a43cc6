"""The AgentScope ReAct workflow against the tiny model's OpenAI endpoint: every call the agent
makes is an experience, scored by the agent's final answer."""

from __future__ import annotations

import sys
from dataclasses import replace

import pytest

from trinity.config.schema import InferenceModelConfig
from trinity.engine.base import SamplingArgs
from trinity.explorer.model_wrapper import ModelWrapper
from trinity.plugins import Kind, resolve
from trinity_workflows.base import WorkflowError

ROW = {"question": "What is 2+3?", "answer": "5"}
FORMAT = {"prompt_key": "question", "response_key": "answer"}


@pytest.fixture(scope="module")
def served(client, tiny_model_dir):
    if client.api_url is None:
        client.serve_openai(InferenceModelConfig(model_path=str(tiny_model_dir), name="tiny"))
    return client


def react(model: ModelWrapper, name: str = "agentscope_react_workflow", **task_fields):
    from trinity.common.experience import Task

    task = Task(workflow_type=name, raw=ROW, format=FORMAT, taskset_name="t", index=1, **task_fields)
    return resolve(Kind.WORKFLOW, name)(task, model)


@pytest.mark.parametrize("name", ["agentscope_react_workflow", "as_react_workflow"])
def test_a_react_agents_calls_become_experiences_with_its_answers_reward(served, name):
    model = ModelWrapper(served, SamplingArgs(n=1, max_tokens=12, temperature=1.0), enable_history=True)
    experiences = react(model, name, workflow_args={"max_iters": 2}).run()
    assert 1 <= len(experiences) <= 2
    assert [e.eid.step for e in experiences] == list(range(len(experiences)))
    for exp in experiences:
        assert exp.metrics["agent_calls"] == len(experiences)
        assert exp.reward == exp.metrics["accuracy"] == float(exp.info["agent_answer"].strip() == "5")
        assert exp.messages[0]["role"] == "system" and "What is 2+3?" in str(exp.messages)
        assert exp.prompt_length > 0 and len(exp.logprobs) == len(exp.tokens) - exp.prompt_length
    assert model.extract_experience_from_history() == []


@pytest.mark.parametrize("inject", [True, False])
def test_the_runtime_state_agentscope_injects_can_be_left_out(served, inject):
    model = ModelWrapper(served, SamplingArgs(n=1, max_tokens=4, temperature=1.0), enable_history=True)
    args = {"max_iters": 1, "inject_runtime_state": inject}
    (first, *_) = react(model, workflow_args=args).run()
    assert ("<current-time>" in str(first.messages)) is inject  # the wall clock: a new prompt every second


def test_without_history_the_workflow_says_what_to_enable(served):
    model = ModelWrapper(served, SamplingArgs(n=1, max_tokens=8))
    with pytest.raises(WorkflowError, match="set explorer.rollout_model.enable_history: true"):
        react(model).run()


def test_without_agentscope_the_workflow_says_what_to_install(served, monkeypatch):
    monkeypatch.setitem(sys.modules, "agentscope.agent", None)  # as if agentscope were not installed
    model = ModelWrapper(served, replace(SamplingArgs(), n=1, max_tokens=8), enable_history=True)
    with pytest.raises(WorkflowError, match=r'pip install "trinity-workflows\[agentscope\]"'):
        react(model).run()
