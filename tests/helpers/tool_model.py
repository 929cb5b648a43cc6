"""A copy of the tiny model taught to use the calculator tool on a few questions, for the tests of
multi-turn tool calling: a random model writes no well-formed tool call, so a conversation with a
tool turn can only come from this one. It is taught through ``ChatTokenizer`` (the masks under
test pick its training targets), with the tools offered by the chat template as rollouts offer them.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
    },
}
QUESTIONS = {"What is 17*23?": "17*23"}
"""Question -> the expression the model passes to the calculator (one: the tiny model learns a
fixed reply in a few dozen steps, telling questions apart takes it many more)."""


def tool_call_text(expression: str) -> str:
    """The reply that calls the calculator, as the model writes it (Hermes format)."""
    return f'<tool_call>\n{{"name": "calculator", "arguments": {{"expression": "{expression}"}}}}\n</tool_call>'


def answer(expression: str) -> str:
    return str(eval(expression))  # noqa: S307 -- the two fixed expressions above


def conversation(question: str) -> list[dict[str, str]]:
    """The conversation the taught model holds: call, tool result, answer."""
    expression = QUESTIONS[question]
    return [
        {"role": "user", "content": question},
        {"role": "assistant", "content": tool_call_text(expression)},
        {"role": "tool", "name": "calculator", "content": answer(expression)},
        {"role": "assistant", "content": answer(expression)},
    ]


def taskset_rows() -> list[dict]:
    """``tool_call_workflow`` tasks: the questions, their answers and the tool schema (JSON text)."""
    return [{"prompt": q, "response": answer(e), "tools": json.dumps([CALCULATOR])} for q, e in QUESTIONS.items()]


def teach_tool_use(model_dir: Path, out: Path, rounds: int = 80) -> Path:
    """Copy ``model_dir`` to ``out`` and fine-tune it on ``conversation`` of every question
    (assistant tokens only) until it holds them nearly greedily."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trinity.model.tokenization import ChatTokenizer

    shutil.copytree(model_dir, out)
    chat = ChatTokenizer(AutoTokenizer.from_pretrained(out))
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    examples = []
    for question in QUESTIONS:
        tokenized = chat.conversation(conversation(question), [CALCULATOR])
        labels = [-100] * tokenized.prompt_length + [
            t if m else -100
            for t, m in zip(tokenized.tokens[tokenized.prompt_length :], tokenized.action_mask, strict=True)
        ]
        examples.append((torch.tensor([tokenized.tokens]), torch.tensor([labels])))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        for _ in range(rounds):
            for tokens, labels in examples:
                model(tokens, labels=labels).loss.backward()
                optimizer.step()
                optimizer.zero_grad()
    model.save_pretrained(out)
    return out
