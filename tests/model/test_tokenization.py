"""The one tokenisation path: chat template settings, tools, and the action mask of a conversation."""

from __future__ import annotations

import json
import shutil

import pytest
from transformers import AutoTokenizer

from trinity.config.schema import FormatConfig, InferenceModelConfig, ModelConfig
from trinity.model.tokenization import (
    TOOL_CALL_PARSERS,
    ChatTokenizer,
    ToolCall,
    load_tokenizer,
    template_settings,
    tool_schemas,
)

CALC = {"type": "function", "function": {"name": "calculator", "parameters": {"type": "object"}}}
CALL = {"id": "c1", "type": "function", "function": {"name": "calculator", "arguments": {"expression": "1+2"}}}
TOOL_CONVERSATION = [
    {"role": "system", "content": "S"},
    {"role": "user", "content": "q"},
    {"role": "assistant", "content": "let me see", "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "c1", "content": "3"},
    {"role": "tool", "tool_call_id": "c2", "content": "error: x"},
    {"role": "assistant", "content": "3"},
    {"role": "user", "content": "sure?"},
    {"role": "assistant", "content": "yes"},
]


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


def trained(chat: ChatTokenizer, conversation) -> tuple[str, str]:
    """``(text under the mask, text of the response outside it)``."""
    response = conversation.tokens[conversation.prompt_length :]
    picked = [t for t, m in zip(response, conversation.action_mask, strict=True) if m]
    rest = [t for t, m in zip(response, conversation.action_mask, strict=True) if not m]
    return chat.tokenizer.decode(picked), chat.tokenizer.decode(rest)


@pytest.mark.parametrize(
    "replies",
    [
        ["four", "yes, 4"],
        ["\n\nleading newlines", " leading space"],  # text that merges with the template's "\n"
        ["", "x"],  # an empty reply still ends with the end-of-turn token
    ],
)
def test_mask_covers_exactly_the_assistant_turns(tokenizer, replies):
    chat = ChatTokenizer(tokenizer)
    messages = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": replies[0]},
        {"role": "user", "content": "q2"},
        {"role": "assistant", "content": replies[1]},
    ]
    conversation = chat.conversation(messages)
    assert len(conversation.action_mask) == len(conversation.tokens) - conversation.prompt_length
    assert conversation.action_mask[0] == 1 and conversation.action_mask[-1] == 0  # ChatML's "\n" after the turn
    assert conversation.tokens == chat.encode(chat.render(messages))
    masked, rest = trained(chat, conversation)
    assert masked == f"{replies[0]}<|im_end|>{replies[1]}<|im_end|>"
    assert rest == "\n<|im_start|>user\nq2<|im_end|>\n<|im_start|>assistant\n\n"
    # the prompt is what the model was asked for its first turn
    assert conversation.tokens[: conversation.prompt_length] == chat.prompt_ids(messages[:2])


def test_tool_calls_and_results_in_a_multi_turn_conversation(tokenizer):
    """Structured tool calls are the assistant's (rendered by the template); tool results, user
    turns and the generation prompts between turns are context."""
    chat = ChatTokenizer(tokenizer)
    conversation = chat.conversation(TOOL_CONVERSATION, [CALC])
    masked, rest = trained(chat, conversation)
    call = '\n<tool_call>\n{"name": "calculator", "arguments": {"expression": "1+2"}}\n</tool_call>'
    assert masked == f"let me see{call}<|im_end|>3<|im_end|>yes<|im_end|>"
    assert rest == (
        "\n<|im_start|>user\n<tool_response>\n3\n</tool_response>\n<tool_response>\nerror: x\n</tool_response>"
        "<|im_end|>\n<|im_start|>assistant\n\n<|im_start|>user\nsure?<|im_end|>\n<|im_start|>assistant\n\n"
    )
    prompt = tokenizer.decode(conversation.tokens[: conversation.prompt_length])
    assert prompt.startswith("<|im_start|>system\nS\n\n# Tools\n\n<tools>\n") and '"name": "calculator"' in prompt
    last = chat.conversation(TOOL_CONVERSATION, [CALC], last_turn_only=True)
    assert trained(chat, last)[0] == "yes<|im_end|>" and tokenizer.decode(last.response) == "yes<|im_end|>"


def test_a_prefilled_think_block_is_context(tokenizer):
    """enable_thinking false: the generation prompt prefills an empty think block that past turns
    are rendered without; the mask starts where the model's own text does."""
    chat = ChatTokenizer(tokenizer, template_kwargs={"enable_thinking": False})
    assert chat.render([{"role": "user", "content": "q"}], generation_prompt=True).endswith("<think>\n\n</think>\n\n")
    conversation = chat.conversation([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}])
    assert trained(chat, conversation)[0] == "a<|im_end|>"


def test_a_template_without_tools_gets_them_in_the_system_prompt(tokenizer):
    template = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    template += "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    chat = ChatTokenizer(tokenizer, template)
    text = chat.render([{"role": "user", "content": "q"}], [CALC])
    assert text.startswith("<|im_start|>system\n# Tools\n\nYou may call one or more functions")
    assert '{"type": "function", "function": {"name": "calculator"' in text
    with_system = chat.render([{"role": "system", "content": "S"}, {"role": "user", "content": "q"}], [CALC])
    assert with_system.startswith("<|im_start|>system\nS\n\n# Tools")
    assert chat.render([{"role": "user", "content": "q"}]) == "<|im_start|>user\nq<|im_end|>\n"


def test_end_of_turn_tokens_other_than_eos(tokenizer):
    """A template whose turns end with another token than the EOS (Gemma's <end_of_turn>): the
    engine's end-of-turn ids say where the model's turn ends."""
    template = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|endoftext|>\n{% endfor %}"
    template += "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    end = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    chat = ChatTokenizer(tokenizer, template, end_of_turn_ids=[end])
    assert trained(chat, chat.conversation(messages))[0] == "a<|endoftext|>"
    unaware = ChatTokenizer(tokenizer, template)  # without it, the whole turn's rendering trains
    assert trained(unaware, unaware.conversation(messages))[0] == "a<|endoftext|>\n"


def test_inconsistent_templates_and_conversations_without_assistant_turns_are_refused(tokenizer):
    chat = ChatTokenizer(tokenizer)
    with pytest.raises(ValueError, match="no assistant turn"):
        chat.conversation([{"role": "user", "content": "q"}])
    # a template that numbers the turns it renders from the end: earlier turns change with every prefix
    template = "{% for m in messages %}{{ loop.revindex }}{{ m.content }}<|im_end|>{% endfor %}"
    with pytest.raises(ValueError, match="renders the messages before message 1 differently"):
        ChatTokenizer(tokenizer, template).conversation(
            [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
        )


def test_template_settings_resolve_in_order(tmp_path):
    path = tmp_path / "template.jinja"
    path.write_text("{{ messages }}")
    model = ModelConfig(chat_template_path=str(path), enable_thinking=False)
    assert template_settings(None, None, model) == ("{{ messages }}", {"enable_thinking": False})
    assert template_settings("own", True, model) == ("own", {"enable_thinking": True})
    assert template_settings(None, None, ModelConfig()) == (None, {})  # the tokenizer's, its own default


def test_tool_schemas_and_the_hermes_parser():
    assert tool_schemas('[{"name": "f"}]') == [{"type": "function", "function": {"name": "f"}}]
    assert tool_schemas(None) == []
    with pytest.raises(ValueError, match="list of objects"):
        tool_schemas('["f"]')
    hermes = TOOL_CALL_PARSERS["hermes"]
    text = 'ok <tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call> <tool_call>{bad</tool_call>'
    calls = hermes.parse(text)
    assert calls[0] == ToolCall("f", {"x": 1}) and calls[1].error.startswith("the tool call is not valid JSON")
    assert hermes.strip(text) == "ok"
    assert calls[0].openai()["function"] == {"name": "f", "arguments": '{"x": 1}'}


REMOTE_TOKENIZER = """from transformers import PreTrainedTokenizerFast


class RemoteTokenizer(PreTrainedTokenizerFast):
    \"\"\"The tiny model's tokenizer as a class of the checkpoint's own code.\"\"\"
"""


def test_load_tokenizer_honours_trust_remote_code_and_the_section(tiny_model_dir, tmp_path):
    """A tokenizer of the checkpoint's own code loads only where the config allows it (the model's
    ``trust_remote_code``, or a rollout model's own); the section's template settings and prompt
    limit go over the model's."""
    folder = tmp_path / "remote"
    shutil.copytree(tiny_model_dir, folder)
    (folder / "tokenization_remote.py").write_text(REMOTE_TOKENIZER)
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    settings["auto_map"] = {"AutoTokenizer": [None, "tokenization_remote.RemoteTokenizer"]}
    (folder / "tokenizer_config.json").write_text(json.dumps(settings))
    model = ModelConfig(model_path=str(folder), max_prompt_tokens=8, enable_thinking=True)
    for untrusted in (load_tokenizer(model), load_tokenizer(model, InferenceModelConfig())):
        assert type(untrusted.tokenizer).__name__ != "RemoteTokenizer"  # transformers' own class: no code ran
    trusted = load_tokenizer(model.model_copy(update={"trust_remote_code": True}))
    assert type(trusted.tokenizer).__name__ == "RemoteTokenizer" and trusted.max_prompt_tokens is None
    rollout = load_tokenizer(model, InferenceModelConfig(trust_remote_code=True, enable_thinking=False))
    assert type(rollout.tokenizer).__name__ == "RemoteTokenizer"
    assert rollout.template_kwargs == {"enable_thinking": False} and rollout.max_prompt_tokens == 8
    data = load_tokenizer(ModelConfig(model_path=str(tiny_model_dir)), FormatConfig(chat_template="{{ 'T' }}"))
    assert data.render([{"role": "user", "content": "q"}]) == "T" and data.fit(list(range(99)))[1] is None
    limited = ModelConfig(model_path=str(tiny_model_dir), max_prompt_tokens=4, enable_prompt_truncation=True)
    assert load_tokenizer(limited, InferenceModelConfig()).fit([1, 2, 3, 4, 5]) == ([1, 2, 3, 4], 5)
    refused = load_tokenizer(limited.model_copy(update={"enable_prompt_truncation": False}), InferenceModelConfig())
    with pytest.raises(ValueError, match="exceeds max_prompt_tokens 4"):
        refused.fit([1, 2, 3, 4, 5])
