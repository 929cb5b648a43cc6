"""toolcall_workflow (Trinity-RFT's Tool-N1 example): the prompt built from a Tool-N1 row, the
rule reward on written replies, and a run on the tiny model through the taskset reader."""

from __future__ import annotations

import json

import pytest

from trinity.buffer.taskset import TasksetReader
from trinity.config.schema import TasksetConfig
from trinity.plugins import Kind, resolve
from trinity_workflows.base import WorkflowError
from trinity_workflows.toolcall import toolcall_reward

WEATHER = {"name": "weather", "description": "Weather of a city", "parameters": {"city": {"type": "string"}}}
ROW = {
    "tools": json.dumps([WEATHER]),
    "raw_system": "You are a helpful assistant.",
    "conversations": [
        {"from": "human", "value": "Weather in Paris?"},
        {"from": "function_call", "value": {"name": "weather", "arguments": {"city": "Lyon"}}},
        {"from": "observation", "value": "sunny"},
        {"from": "human", "value": "And in Paris?"},
    ],
    "answer": json.dumps([{"name": "weather", "arguments": {"city": "Paris"}}]),
}
CALL = '<tool_call>[{"name": "weather", "arguments": {"city": "Paris"}}]</tool_call>'


@pytest.mark.parametrize(
    ("response", "reward"),
    [
        (f"<think>Paris now.</think> {CALL}", 1.0),
        ('<think>x</think> <tool_call>{"name": "weather", "arguments": {"city": "Paris"}}</tool_call>', 1.0),
        (f"<think>x</think> {CALL.replace('Paris', 'Lyon')}", 0.0),  # wrong argument
        (CALL, 0.0),  # no thinking
        (f"<think>a</think><think>b</think> {CALL}", 0.0),  # thinking twice
        (f"{CALL} <think>late</think>", 0.0),  # thinking after the call
        ("<think>x</think> <tool_call>[{'name': 'weather'}]</tool_call>", 0.0),  # not JSON
        ("<think>x</think> no call", 0.0),
    ],
)
def test_toolcall_reward(response, reward):
    assert toolcall_reward(response, ROW["answer"]) == {"accuracy": reward}


def test_the_prompt_offers_the_tools_and_replays_the_conversation(tmp_path, model):
    (tmp_path / "tasks.jsonl").write_text(json.dumps(ROW) + "\n")  # a row without a prompt column
    storage = TasksetConfig(
        name="t", path=str(tmp_path / "tasks.jsonl"), default_workflow_type="toolcall_workflow", repeat_times=2
    )
    (task,) = TasksetReader(storage).read_batch()
    workflow = resolve(Kind.WORKFLOW, task.workflow_type)(task, model)
    system, *turns = workflow.messages()
    assert system["content"].startswith("You are a helpful assistant.\n\n# Tools")
    assert json.dumps({"type": "function", "function": WEATHER}) in system["content"]
    assert [t["role"] for t in turns] == ["user", "assistant", "tool", "user"]
    assert json.loads(turns[1]["content"]) == {"name": "weather", "arguments": {"city": "Lyon"}}
    experiences = workflow.run()
    assert len(experiences) == model.defaults.n
    for exp in experiences:
        assert (
            exp.reward
            == exp.metrics["accuracy"]
            == toolcall_reward(exp.info["response_text"], ROW["answer"])["accuracy"]
        )


def test_an_unknown_speaker_is_named(make_workflow):
    row = {**ROW, "conversations": [{"from": "narrator", "value": "Once"}]}
    with pytest.raises(WorkflowError, match=r"conversations\[0\]: 'from' is 'narrator'"):
        make_workflow("toolcall_workflow", row).run()
