"""bcp_simple_react_workflow against a stand-in for BrowseComp-Plus's searcher (``standin_envs/searcher``:
BrowseComp-Plus is not on PyPI and its corpus and index are downloads), with a scripted policy, a
scripted judge (the hosted judge cannot run here) and the tiny model."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from scripted_policy import ScriptedPolicy, scripted_workflow

from trinity_workflows.base import WorkflowError
from trinity_workflows.envs import browse_comp
from trinity_workflows.envs.browse_comp import parse_verdict

STANDINS = str(Path(__file__).parent / "standin_envs")
DOCS = {
    "d1": "The Eiffel tower was finished in 1889 " + "filler " * 600,
    "d2": "The Louvre pyramid opened in 1989.",
}
ROW = {"prompt": "When was the Eiffel tower finished?", "response": "1889"}
RIGHT = '{"extracted_answer": "1889", "reasoning": "same year", "is_correct": true}'


@pytest.fixture
def args(tmp_path):
    index = tmp_path / "index.json"
    index.write_text(json.dumps(DOCS))
    yield {"index_path": str(index), "browsecomp_path": STANDINS, "snippet_max_tokens": 5}
    browse_comp.load_searcher.cache_clear()
    sys.modules.pop("searcher.searchers", None), sys.modules.pop("searcher", None)
    if STANDINS in sys.path:
        sys.path.remove(STANDINS)


def call(name: str, **arguments) -> str:
    return f"Let me look.\n<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


@pytest.mark.parametrize(
    ("verdict", "correct"),
    [
        (RIGHT, True),
        ("Sure: " + RIGHT.replace("true", "false") + " done", False),
        ('{"extracted_answer": null, "is_correct": true}', False),
        ('{"is_correct": true, oops', True),  # not JSON: the regex fallback
        ("I think it is right", False),
    ],
)
def test_judge_verdicts(verdict, correct):
    assert parse_verdict(verdict) is correct


def test_a_searched_and_judged_answer_earns_1_on_every_step(model, args):
    replies = [call("search", query="Eiffel tower"), call("get_document", docid="d1"), "Exact Answer: 1889"]
    judge = ScriptedPolicy(model, [RIGHT])
    workflow, policy = scripted_workflow(
        model,
        "bcp_simple_react_workflow",
        ROW,
        replies,
        auxiliary_models=[judge],
        workflow_args={**args, "include_get_document": True},
    )
    experiences = workflow.run()
    assert [e.eid.step for e in experiences] == [0, 1, 2] and {e.reward for e in experiences} == {1.0}
    metrics = experiences[0].metrics
    assert (metrics["search_calls"], metrics["get_document_calls"], metrics["total_tool_calls"]) == (1, 1, 2)
    (found, document) = [m["content"] for m in policy.seen[2] if m["role"] == "tool"]
    assert json.loads(found)[0] == {"docid": "d1", "score": 2.0, "snippet": "The Eiffel tower was finished"}
    whole = json.dumps({"docid": "d1", "text": DOCS["d1"]})
    assert document.startswith(whole[:2500]) and document.endswith(f"(truncated from {len(whole)} chars)")
    assert "Question: When was the Eiffel tower finished?" in policy.seen[0][1]["content"]
    assert "Agent's response: Exact Answer: 1889" in judge.seen[0][1]["content"]


def test_without_get_document_only_search_is_offered(model, args):
    replies = [call("get_document", docid="d1"), "Exact Answer: 1990"]
    judge = ScriptedPolicy(model, [RIGHT.replace("true", "false")])
    workflow, policy = scripted_workflow(
        model, "bcp_simple_react_workflow", ROW, replies, auxiliary_models=[judge], workflow_args=args
    )
    experiences = workflow.run()
    assert {e.reward for e in experiences} == {0.0} and experiences[0].metrics["tool_errors"] == 1
    assert "unknown tool 'get_document' (available: search)" in policy.seen[1][-1]["content"]


def test_an_episode_cut_off_mid_search_scores_0_and_long_replies_are_left_out(model, args):
    replies = [call("search", query="tower")] * 2
    workflow, _ = scripted_workflow(
        model, "bcp_simple_react_workflow", ROW, replies, workflow_args={**args, "max_iterations": 2}
    )
    experiences = workflow.run()  # no judge needed: there is no final answer
    assert [e.reward for e in experiences] == [0.0, 0.0]
    workflow, _ = scripted_workflow(
        model,
        "bcp_simple_react_workflow",
        ROW,
        replies,
        workflow_args={**args, "max_iterations": 2, "max_model_tokens": 1},
    )
    assert workflow.run() == []


def test_the_tiny_model_answers_at_once(make_workflow, model, args):
    judge = ScriptedPolicy(model, ["not json"])
    experiences = make_workflow("bcp_simple_react_workflow", ROW, auxiliary_models=[judge], workflow_args=args).run()
    assert len(experiences) == 1 and experiences[0].reward == 0.0


def test_a_missing_searcher_says_where_to_get_it(make_workflow, monkeypatch):
    monkeypatch.setitem(sys.modules, "searcher", None)
    with pytest.raises(WorkflowError, match="ImportError: cannot import searcher.searchers .*browsecomp_path"):
        make_workflow("bcp_simple_react_workflow", ROW, workflow_args={"index_path": "x"}).run()
    browse_comp.load_searcher.cache_clear()
