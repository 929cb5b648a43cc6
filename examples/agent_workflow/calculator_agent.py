"""An agent program written for the `openai` package, trained as a trinity workflow plugin.

`solve` is the agent as it was before trinity: a plain tool-calling loop over any
`openai.AsyncOpenAI` client. `CalculatorAgentWorkflow` is all that porting it takes: hand the
agent the rollout model's recording client, score its answer, and return the calls it made
(one experience each, every one with the answer's reward). Load it with
`trinity --plugin-dir examples/agent_workflow run --config examples/agent_workflow/agent.yaml`.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace

import openai

from trinity.plugin_api import Experience, Workflow, hookimpl

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    }
]


async def solve(client: openai.AsyncOpenAI, question: str, max_turns: int = 2) -> str:
    """The agent: ask, run the tool calls the model makes, until it answers in plain text."""
    model = (await client.models.list()).data[0].id
    messages = [
        {"role": "system", "content": "Answer with the sum. You may call the add tool."},
        {"role": "user", "content": question},
    ]
    for _ in range(max_turns):
        reply = await client.chat.completions.create(model=model, messages=messages, tools=TOOLS, max_tokens=8)
        message = reply.choices[0].message
        if not message.tool_calls:
            return message.content or ""
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            try:
                result = str(sum(json.loads(call.function.arguments).values()))
            except (ValueError, TypeError, AttributeError) as exc:
                result = f"error: {exc}"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return ""


class CalculatorAgentWorkflow(Workflow):
    """One run of the agent on a task; reward 1 when its answer's number is the row's answer."""

    can_repeat = False  # one agent run per instance: the explorer runs repeat_times of them

    async def run_async(self) -> list[Experience]:
        answer = await solve(self.model.get_openai_async_client(), self.task.raw["question"])
        number = re.search(r"-?\d+", answer)
        reward = float(number is not None and number.group() == str(self.task.raw["answer"]))
        experiences = self.model.extract_experience_from_history()
        for step, experience in enumerate(experiences):
            experience.eid = replace(experience.eid, step=step)
            experience.reward = reward
        return experiences


@hookimpl
def trinity_register_workflows(register):
    register("calculator_agent_workflow", "calculator_agent:CalculatorAgentWorkflow")
