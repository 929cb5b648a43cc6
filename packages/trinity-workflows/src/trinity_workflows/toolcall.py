"""Single-turn tool-call prediction graded by rule (Trinity-RFT's ``toolcall_workflow`` example,
after NVIDIA's Tool-N1): the model sees the tools and a conversation, thinks, and writes the calls
it would make; nothing is called. Rows are Tool-N1's: ``tools`` (JSON text of function schemas),
``raw_system``, ``conversations`` (``{"from", "value"}`` turns) and ``answer`` (JSON text of the
expected ``[{"name", "arguments"}]`` calls).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

from trinity.plugin_api import Experience, set_reward
from trinity_workflows.base import CatalogueWorkflow, Messages

TOOL_PROMPT = """

# Tools

You may call the functions described here, one JSON object per line:
<tools>
{tools}
</tools>

In every reply, first reason inside <think> </think> tags, then write the calls you make as a JSON \
list inside <tool_call> </tool_call> tags, for example
<think>The user wants the weather in Paris.</think> <tool_call>[{{"name": "weather", "arguments": \
{{"city": "Paris"}}}}]</tool_call>
Give both parts in one reply, with arguments of the types the functions declare."""
ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "observation": "tool"}
_CALLS = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def predicted_calls(response: str) -> list[Any] | None:
    """The calls in the last ``<tool_call>`` block (a list; a lone object is a list of one), or
    None when there is none or it is not JSON."""
    blocks = _CALLS.findall(response)
    if not blocks:
        return None
    try:
        calls = _json(json.loads(blocks[-1].strip()))
    except json.JSONDecodeError:
        return None
    return [calls] if isinstance(calls, dict) else calls if isinstance(calls, list) else None


def toolcall_reward(response: str, truth: Any) -> dict[str, float]:
    """1 when the response thinks once, before its calls, and calls exactly the expected
    functions with the expected arguments (in any order), else 0."""
    calls, expected = predicted_calls(response), _json(truth)
    well_formed = (
        calls is not None
        and response.count("<think>") == 1
        and response.count("</think>") == 1
        and response.find("</think>") < response.find("<tool_call>")
        and all(isinstance(c, dict) and {"name", "arguments"} <= c.keys() for c in calls)
    )

    def signature(items: list[dict[str, Any]]) -> Counter:
        return Counter((c["name"], json.dumps(c["arguments"], sort_keys=True)) for c in items)

    correct = well_formed and signature(calls) == signature(expected)
    return {"accuracy": float(correct)}


class ToolCallPredictionWorkflow(CatalogueWorkflow):
    """Sample ``repeat_times`` replies to the row's conversation with its tools in the system
    prompt; each is graded by ``toolcall_reward`` against the row's ``answer``."""

    needs_reward_fn = False
    reads_prompt = False

    def messages(self) -> Messages:
        row = self.task.raw
        tools = "\n".join(json.dumps({"type": "function", "function": t}) for t in _json(row["tools"]))
        messages = [{"role": "system", "content": row.get("raw_system", "") + TOOL_PROMPT.format(tools=tools)}]
        for number, turn in enumerate(row["conversations"]):
            if turn["from"] == "function_call":
                messages.append({"role": "assistant", "content": json.dumps(turn["value"])})
            elif turn["from"] in ROLES:
                messages.append({"role": ROLES[turn["from"]], "content": turn["value"]})
            else:
                raise ValueError(
                    f"conversations[{number}]: 'from' is {turn['from']!r}; one of {', '.join(ROLES)}, function_call"
                )
        return messages

    async def rollout(self) -> list[Experience]:
        experiences = await self.model.chat_async(self.messages(), n=self.repeat_times)
        truth = self.task.raw["answer"]
        return [set_reward(exp, toolcall_reward(exp.info["response_text"], truth)) for exp in experiences]
