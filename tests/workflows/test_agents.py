"""The AgentScope ReAct workflow against the tiny model's OpenAI endpoint: every call the agent
makes is an experience, scored by the agent's final answer."""

from __future__ import annotations

import json
import sys
from dataclasses import replace

import pytest

from trinity.config.schema import InferenceModelConfig
from trinity.model.engines import SamplingArgs
from trinity.plugins import Kind, resolve
from trinity.rollout.model_wrapper import ModelWrapper
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


# --- the math agent (agentscope_react_math_workflow and its Trinity-RFT twins) -----------------

MATH_NAMES = [
    "agentscope_react_math_workflow",
    "agentscopev0_react_math_workflow",
    "agentscope_reactv2_math_workflow",
    "agentscope_reactv2_gsm8k_workflow",
]
GSM8K_ROW = {"question": "Tom has 40 apples and buys 2 more. How many now?", "answer": "40 + 2 = 42\n#### 42"}


@pytest.mark.parametrize("name", MATH_NAMES)
def test_the_math_agent_offers_its_calculator_and_grades_the_boxed_answer(served, name):
    from trinity.common.experience import Task
    from trinity_workflows.agents import MATH_AGENT_PROMPT
    from trinity_workflows.rewards import math_boxed_reward

    model = ModelWrapper(served, SamplingArgs(n=1, max_tokens=8, temperature=1.0), enable_history=True)
    task = Task(
        workflow_type=name, raw=GSM8K_ROW, format=FORMAT, taskset_name="t", index=1, workflow_args={"max_iters": 1}
    )
    workflow = resolve(Kind.WORKFLOW, name)(task, model)
    assert workflow.truth == "42"  # GSM8K's answer after ####
    (experience, *_) = workflow.run()
    answer = experience.info["agent_answer"]
    assert experience.reward == sum(math_boxed_reward(answer, "42").values())
    assert experience.messages[0]["content"] == [{"type": "text", "text": MATH_AGENT_PROMPT}]  # AgentScope's parts
    prompt = served.engine.tokenizer.decode(experience.tokens[: experience.prompt_length])
    assert '"name": "calculator"' in prompt  # the tool's schema, rendered by the chat template


def test_the_math_agents_calculator_evaluates_arithmetic_and_nothing_else():
    from trinity_workflows.agents import calculator

    assert calculator("(40 + 2) * 3") == "126"
    assert calculator("__import__('os').system('true')").startswith("error: not allowed in arithmetic")


# --- the search agent (agentscope_v1_react_search_workflow): a local corpus stands in for the web


CORPUS = [
    {"title": "Mount Kilimanjaro", "text": "Kilimanjaro is the highest mountain in Africa, 5895 m high."},
    {"title": "Lake Baikal", "text": "Baikal in Siberia is the deepest lake in the world."},
    {"title": "Nile", "text": "The Nile flows north through Egypt into the Mediterranean."},
]


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(doc) + "\n" for doc in CORPUS))
    return str(path)


def test_the_corpus_search_returns_the_documents_sharing_most_words(corpus):
    from trinity_workflows.agents import corpus_search

    search = corpus_search(corpus, count=2)
    assert search("deepest lake").startswith("Lake Baikal\nBaikal in Siberia")
    assert search("highest mountain in Africa").startswith("Mount Kilimanjaro")
    assert search("quantum chromodynamics") == "no results"


def search_task(**args):
    from trinity.common.experience import Task

    row = {"question": "Which lake is the deepest?", "answer": "Baikal"}
    name = "agentscope_v1_react_search_workflow"
    return Task(workflow_type=name, raw=row, format=FORMAT, taskset_name="t", index=2, workflow_args=args)


def test_the_search_agent_is_graded_by_the_judge(served, corpus, external_judge):
    judge, prompts = external_judge
    model = ModelWrapper(served, SamplingArgs(n=1, max_tokens=8, temperature=1.0), enable_history=True)
    task = search_task(search_corpus=corpus, max_turns=1, inject_runtime_state=False)
    experiences = resolve(Kind.WORKFLOW, task.workflow_type)(task, model, [judge]).run()
    assert experiences and all(e.metrics["agent_calls"] == len(experiences) for e in experiences)
    offered = served.engine.tokenizer.decode(experiences[0].tokens[: experiences[0].prompt_length])
    assert '"name": "search"' in offered
    (prompt,) = prompts
    answer = experiences[0].info["agent_answer"]
    assert f"Question: Which lake is the deepest?\nResponse: {answer}\nCorrect answer: Baikal" in prompt
    verdict = float(answer.strip() == "Baikal")  # the stand-in judge's rule
    assert all(e.reward == e.metrics["accuracy"] == verdict for e in experiences)


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ({"search_client_type": "searxng"}, "search_client_type 'searxng': web searches through npx MCP"),
        ({}, "no search tool: set workflow_args.search_corpus or workflow_args.search_function"),
    ],
)
def test_a_search_agent_without_a_usable_search_fails_before_the_agent_runs(served, external_judge, args, error):
    model = ModelWrapper(served, SamplingArgs(n=1, max_tokens=8), enable_history=True)
    task = search_task(**args)
    with pytest.raises(WorkflowError, match=error):
        resolve(Kind.WORKFLOW, task.workflow_type)(task, model, [external_judge[0]]).run()
    assert model.extract_experience_from_history() == []


def test_a_search_agent_may_call_the_users_own_search_function(served):
    from trinity_workflows.agents import calculator

    model = ModelWrapper(served, SamplingArgs(n=1, max_tokens=8), enable_history=True)
    task = search_task(search_function="trinity_workflows.agents:calculator")
    assert resolve(Kind.WORKFLOW, task.workflow_type)(task, model).tools() == [calculator]


def test_parse_correctness():
    from trinity_workflows.agents import parse_correctness

    assert parse_correctness("It matches.\nCorrectness: YES") == 1.0
    assert parse_correctness("**Correctness**: no") == 0.0
    assert parse_correctness("Correctness: NO ... on reflection Correctness: YES") == 1.0
    assert parse_correctness("I think so.") is None


# --- the user's own agent function (agentscope_workflow_adapter, _v1) -------------------------


def adapter(model: ModelWrapper, name: str = "agentscope_workflow_adapter", **args):
    from trinity.common.experience import Task

    task = Task(workflow_type=name, raw=ROW, format=FORMAT, taskset_name="t", index=4, workflow_args=args)
    return resolve(Kind.WORKFLOW, name)(task, model, [model])


@pytest.mark.parametrize("name", ["agentscope_workflow_adapter", "agentscope_workflow_adapter_v1"])
def test_the_adapter_runs_the_users_agent_function_and_rewards_its_calls(served, name):
    model = ModelWrapper(served, SamplingArgs(n=1, max_tokens=8, temperature=1.0), enable_history=True)
    import agentscope_functions

    agentscope_functions.ANSWERS.clear()
    experiences = adapter(model, name, workflow_func="agentscope_functions:answer").run()
    (text,) = agentscope_functions.ANSWERS
    (exp,) = experiences  # the agent's one call (max_iters 1)
    assert exp.reward == float(text.strip() == "5") and exp.metrics["answer_chars"] == len(text)
    assert "What is 2+3?" in str(exp.messages) and len(exp.logprobs) == exp.response_length


def test_the_adapters_judge_function_gives_the_reward_and_sees_the_auxiliary_models(served):
    import agentscope_functions

    agentscope_functions.CALLS.clear()
    model = ModelWrapper(served, SamplingArgs(n=1, max_tokens=8, temperature=1.0), enable_history=True)
    experiences = adapter(
        model, workflow_func="agentscope_functions:answer", judge_func="agentscope_functions:judge_words"
    ).run()
    (call,) = agentscope_functions.CALLS
    assert call["task"] == ROW and call["auxiliary_models"] == ["tiny"]  # keyed by the name it serves
    assert experiences[-1].reward == float(len(call["response"].split()))
    assert experiences[-1].metrics["judged"] == 1.0 and "answer_chars" in experiences[-1].metrics


def test_the_adapter_takes_a_bare_number_and_refuses_an_output_without_a_reward(served):
    model = ModelWrapper(served, SamplingArgs(n=1, max_tokens=8), enable_history=True)
    assert adapter(model, workflow_func="agentscope_functions:plain_reward").run() == []  # no calls, no experiences
    with pytest.raises(WorkflowError, match="workflow_func returned dict without a numeric reward"):
        adapter(model, workflow_func="agentscope_functions:no_reward").run()
    with pytest.raises(WorkflowError, match="set workflow_args.workflow_func"):
        adapter(model, judge_func="agentscope_functions:judge_words").run()
