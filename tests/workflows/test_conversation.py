"""Multi-turn, step-wise and tool-call workflows: masks, steps, logprobs, tool execution."""

from __future__ import annotations

import asyncio
import time

import pytest
import torch
from transformers import AutoTokenizer

from helpers.engine_helpers import transformers_client
from trinity.common.experience import Task
from trinity.config.schema import InferenceModelConfig, ModelConfig
from trinity.model.engines import SamplingArgs
from trinity.plugins import Kind, resolve
from trinity.rollout.model_wrapper import ModelWrapper
from trinity_workflows.base import WorkflowError
from trinity_workflows.rewards import math_reward
from trinity_workflows.tools import (
    ToolCall,
    execute,
    parse_tool_calls,
    register_tool,
    resolve_tools,
    tool_schemas,
)

ROW = {"prompt": "What is 2+2?", "response": "4", "turns": ["Are you sure?", "Final answer?"]}


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


def masked_text(tokenizer, exp) -> str:
    response = exp.response_tokens[exp.action_mask.bool()]
    return tokenizer.decode(response)


# --- multi-turn and step-wise against the tiny model ---------------------------------------


def test_multi_turn_workflow_one_masked_experience(make_workflow, tokenizer, model):
    workflow = make_workflow("multi_turn_workflow", ROW, reward_fn_type="math_reward", repeat_times=4)
    (exp,) = workflow.run()  # one conversation per run: the explorer runs repeat_times instances
    assert not workflow.can_repeat
    roles = [m["role"] for m in exp.messages]
    assert roles == ["user", "assistant", "user", "assistant", "user", "assistant"]
    replies = [m["content"] for m in exp.messages if m["role"] == "assistant"]
    # the model's turns are trained on; the follow-up questions are not
    assert masked_text(tokenizer, exp) == "".join(f"{r}<|im_end|>" for r in replies)
    unmasked = tokenizer.decode(exp.response_tokens[~exp.action_mask.bool()])
    assert "Are you sure?" in unmasked and "Final answer?" in unmasked
    assert exp.logprobs.shape == exp.action_mask.shape == (exp.response_length,)
    assert exp.reward == math_reward(replies[-1], "4")["accuracy"]
    # logprobs are the rollout model's own for the conversation's tokens
    full = torch.tensor(model.logprobs(exp.tokens.tolist())[exp.prompt_length :])
    torch.testing.assert_close(exp.logprobs, full)


def test_max_turns_bounds_the_conversation(make_workflow):
    (exp,) = make_workflow(
        "multi_turn_workflow", ROW, reward_fn_type="math_reward", workflow_args={"max_turns": 2}
    ).run()
    assert [m["role"] for m in exp.messages].count("assistant") == 2


@pytest.mark.parametrize("room", [4, -1])
def test_a_conversation_that_outgrows_max_prompt_tokens_ends_there(tiny_model_dir, tokenizer, room):
    """room 4: the first prompt fits, the second does not; -1: not even the first fits. Either
    way the experience counts as a truncated prompt (the explorer's ``rollout/truncated_prompts``
    and its warning): a conversation cut after its first turn was not counted, so a tool-use run
    whose every call outgrew the limit ended each conversation at the call (reward 0) silently."""
    first_prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": ROW["prompt"]}], add_generation_prompt=True
    )
    path = str(tiny_model_dir)
    config = ModelConfig(model_path=path, max_prompt_tokens=len(first_prompt["input_ids"]) + room)
    with transformers_client(InferenceModelConfig(model_path=path), config) as client:
        model = ModelWrapper(client, SamplingArgs(max_tokens=16))
        task = Task(workflow_type="multi_turn_workflow", raw=ROW, reward_fn_type="math_reward", taskset_name="t")
        (exp,) = resolve(Kind.WORKFLOW, "multi_turn_workflow")(task, model).run()
    assert [m["role"] for m in exp.messages] == ["user", "assistant"]
    assert exp.truncate_status == "prompt_truncated"
    if room > 0:  # the first turn still trains; the cut prompt's length is recorded
        assert exp.action_mask.any()
        assert exp.info["truncated_from"] > config.max_prompt_tokens


def test_step_wise_workflow_one_experience_per_turn_with_the_final_reward(make_workflow):
    experiences = make_workflow("step_wise_workflow", ROW, reward_fn_type="math_reward").run()
    assert [e.eid.step for e in experiences] == [0, 1, 2]
    final = experiences[-1].info["response_text"]
    expected = math_reward(final, "4")["accuracy"]
    assert [e.reward for e in experiences] == [expected] * 3
    # each step's prompt holds the conversation so far
    assert len(experiences[2].messages) == 6 and experiences[2].messages[:2] == experiences[0].messages
    assert all(e.logprobs.shape == (e.response_length,) for e in experiences)
    # the state a turn acts from: the conversation before its reply (GiGPO's anchor)
    states = [e.info["env_state_hash"] for e in experiences]
    assert len(set(states)) == 3
    again = make_workflow("step_wise_workflow", ROW, reward_fn_type="math_reward").run()
    assert again[0].info["env_state_hash"] == states[0]  # the same first prompt, the same state


# --- tool calling ----------------------------------------------------------------------------

CALC_SCHEMA = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
    },
}


@register_tool(name="test_sleep")
def sleepy(seconds: float) -> str:
    time.sleep(seconds)
    return "woke up"


@register_tool(name="test_row")
def row_value(column: str, task: Task) -> str:
    """A tool over its task's data: the row's ``column``."""
    return str(task.raw[column])


@pytest.mark.parametrize(
    ("text", "calls"),
    [
        ("no call here", []),
        (
            '<tool_call>\n{"name": "calculator", "arguments": {"expression": "1+2"}}\n</tool_call>',
            [ToolCall("calculator", {"expression": "1+2"})],
        ),
        (
            '<tool_call>{"name": "a", "arguments": "{\\"x\\": 1}"}</tool_call> then <tool_call>{"name": "b"}</tool_call>',
            [ToolCall("a", {"x": 1}), ToolCall("b", {})],
        ),
        (
            "<tool_call>{not json}</tool_call>",
            [ToolCall(error="the tool call is not valid JSON (Expecting property name enclosed in double quotes)")],
        ),
        (
            '<tool_call>["calculator"]</tool_call>',
            [ToolCall(error='a tool call needs {"name": <string>, "arguments": <object>}')],
        ),
        (
            '<tool_call>{"name": "calculator", "arguments": [1]}</tool_call>',
            [ToolCall(error='a tool call needs {"name": <string>, "arguments": <object>}')],
        ),
        ('<tool_call>{"name": "unclosed"', []),
    ],
)
def test_parse_tool_calls(text, calls):
    assert parse_tool_calls(text) == calls


@pytest.mark.parametrize(
    ("call", "result"),
    [
        (ToolCall("calculator", {"expression": "(1 + 2) * -3.5"}), ("-10.5", True)),
        (
            ToolCall("calculator", {"expression": "__import__('os')"}),
            ("error: ValueError: not allowed in arithmetic: \"__import__('os')\"", False),
        ),
        (ToolCall("calculator", {"expression": "1/0"}), ("error: ZeroDivisionError: division by zero", False)),
        (
            ToolCall("calculator", {"expr": "1"}),
            ("error: TypeError: calculator() got an unexpected keyword argument 'expr'", False),
        ),
        (ToolCall("search", {}), ("error: unknown tool 'search' (available: calculator, test_sleep)", False)),
        (ToolCall(error="bad"), ("error: bad", False)),
        (ToolCall("test_sleep", {"seconds": 5}), ("error: tool 'test_sleep' timed out after 0.2 s", False)),
        (ToolCall("test_sleep", {"seconds": 0}), ("woke up", True)),
    ],
)
def test_execute_tool_calls(call, result):
    functions = resolve_tools(tool_schemas([CALC_SCHEMA, {"name": "test_sleep"}]), {})
    assert asyncio.run(execute(call, functions, timeout=0.2)) == result


def test_a_tool_with_a_task_parameter_gets_the_task_not_the_models_argument():
    functions = resolve_tools(tool_schemas([{"name": "test_row"}]), {})
    task = Task(workflow_type="tool_call_workflow", raw={"secret": 7})
    assert asyncio.run(execute(ToolCall("test_row", {"column": "secret"}), functions, 1, task)) == ("7", True)
    assert asyncio.run(execute(ToolCall("test_row", {"column": "secret", "task": {}}), functions, 1, task)) == (
        "error: TypeError: test_row() got an unexpected keyword argument 'task'",
        False,
    )


def test_tool_call_workflow_passes_its_task_to_tools(make_workflow):
    row = {"prompt": "What is the secret?", "response": "7", "secret": 7, "tools": [{"name": "test_row"}]}
    workflow = make_workflow("tool_call_workflow", row)
    reply = '<tool_call>{"name": "test_row", "arguments": {"column": "secret"}}</tool_call>'
    follow_up = asyncio.run(workflow.respond([*workflow.messages(), {"role": "assistant", "content": reply}], 0))
    assert follow_up == [{"role": "tool", "name": "test_row", "content": "7"}]


def test_tool_functions_from_workflow_args_and_missing_ones():
    schemas = tool_schemas('[{"name": "dump"}]')  # JSON text, bare function schema
    assert schemas == [{"type": "function", "function": {"name": "dump"}}]
    assert resolve_tools(schemas, {"dump": "json:dumps"})["dump"]([1]) == "[1]"
    with pytest.raises(LookupError, match="no function for tool 'dump'"):
        resolve_tools(schemas, {})


def test_tool_call_workflow_offers_the_tools_and_records_the_conversation(make_workflow, tokenizer):
    row = {"prompt": "What is 17*23?", "response": "391", "tools": [CALC_SCHEMA]}
    workflow = make_workflow(
        "tool_call_workflow", row, reward_fn_type="math_reward", format={"system_prompt": "Be exact."}
    )
    (exp,) = workflow.run()
    assert exp.messages[0] == {"role": "system", "content": "Be exact."}
    # the tools reach the model through the chat template: the experience's prompt offers them
    prompt = tokenizer.decode(exp.tokens[: exp.prompt_length])
    assert prompt.startswith("<|im_start|>system\nBe exact.\n\n# Tools\n\n<tools>\n")
    assert '"name": "calculator"' in prompt
    assert exp.metrics["tool_calls"] == 0.0  # a random model writes no well-formed call
    assert exp.reward == math_reward(exp.info["response_text"], "391")["accuracy"]
    assert masked_text(tokenizer, exp) == exp.messages[-1]["content"] + "<|im_end|>"


def test_tool_call_workflow_feeds_results_back_masked(make_workflow, model):
    """The workflow's environment step on a written model turn: the calls run, results come back
    as tool turns, and the tool turns are context (mask 0) in the experience."""
    row = {"prompt": "What is 17*23?", "response": "391", "tools": [CALC_SCHEMA]}
    workflow = make_workflow("tool_call_workflow", row)
    reply = '<tool_call>{"name": "calculator", "arguments": {"expression": "17*23"}}</tool_call><tool_call>{"name": "x"}</tool_call>'
    follow_up = asyncio.run(workflow.respond([*workflow.messages(), {"role": "assistant", "content": reply}], 0))
    assert follow_up == [
        {"role": "tool", "name": "calculator", "content": "391"},
        {"role": "tool", "name": "x", "content": "error: unknown tool 'x' (available: calculator)"},
    ]
    assert (workflow.calls, workflow.errors) == (2, 1)
    conversation = [
        *workflow.messages(),
        {"role": "assistant", "content": reply},
        *follow_up,
        {"role": "assistant", "content": "391"},
    ]
    tokenized = model.tokenize_conversation(conversation, workflow.tools)
    response = tokenized.tokens[tokenized.prompt_length :]
    tokenizer = model.client.engine.tokenizer
    assert tokenizer.decode([t for t, m in zip(response, tokenized.action_mask, strict=True) if m]) == (
        f"{reply}<|im_end|>391<|im_end|>"
    )
    context = tokenizer.decode([t for t, m in zip(response, tokenized.action_mask, strict=True) if not m])
    assert context == "\n<|im_start|>user\n<tool_response>\n391\n</tool_response>\n<tool_response>\n" + (
        "error: unknown tool 'x' (available: calculator)\n</tool_response><|im_end|>\n<|im_start|>assistant\n\n"
    )


def test_tool_call_workflow_without_a_tool_function_fails_with_the_task_id(make_workflow):
    row = {"prompt": "q", "response": "a", "tools": [{"name": "nowhere"}]}
    with pytest.raises(
        WorkflowError, match="tool_call_workflow failed on task t:3: LookupError: no function for tool 'nowhere'"
    ):
        make_workflow("tool_call_workflow", row, reward_fn_type="math_reward").run()
