"""Dataset rows become training examples: CPT text, plaintext DPO pairs, multi-turn SFT with tools."""

from __future__ import annotations

import json

import pytest

from trinity.config.schema import FormatConfig, ModelConfig
from trinity.trainer.supervised import data_tokenizer, row_to_experience

CALC = {"type": "function", "function": {"name": "calculator", "parameters": {"type": "object"}}}
CALL = {"id": "c1", "type": "function", "function": {"name": "calculator", "arguments": '{"expression": "3+4"}'}}
TOOL_ROW = {
    "message": [
        {"role": "user", "content": "3+4="},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "c1", "content": "7"},
        {"role": "assistant", "content": "7"},
    ],
    "tools": json.dumps([CALC]),  # as a dataset column holds them
}


def test_cpt_row_is_plain_text_every_token_after_the_first_trains(tiny_model_dir):
    fmt = FormatConfig(prompt_key="text")
    chat = data_tokenizer(ModelConfig(model_path=str(tiny_model_dir)), fmt)
    exp = row_to_experience({"text": "3 plus 4 is 7."}, fmt, chat, "cpt")
    ids = chat.tokenizer("3 plus 4 is 7.", add_special_tokens=False)["input_ids"]
    assert exp.tokens.tolist() == ids and exp.prompt_length == 1 and exp.action_mask is None


def test_plaintext_dpo_row_needs_no_response_column(tiny_model_dir):
    fmt = FormatConfig(prompt_type="plaintext", prompt_key="question")
    chat = data_tokenizer(ModelConfig(model_path=str(tiny_model_dir)), fmt)
    exp = row_to_experience({"question": "3+4=", "chosen": "7", "rejected": "8"}, fmt, chat, "dpo")
    assert exp.tokens.tolist() == chat.prompt_ids([{"role": "user", "content": "3+4="}])
    # each side is the response the model writes: its text and end-of-turn token, no template after
    assert chat.tokenizer.decode(exp.chosen) == "7<|im_end|>"
    assert chat.tokenizer.decode(exp.rejected) == "8<|im_end|>"


@pytest.mark.parametrize(
    ("all_turns", "trained"),
    [
        (
            True,
            '\n<tool_call>\n{"name": "calculator", "arguments": {"expression": "3+4"}}\n</tool_call><|im_end|>7<|im_end|>',
        ),
        (False, "7<|im_end|>"),
    ],
)
def test_multi_turn_sft_row_with_tools_trains_the_assistant_turns(tiny_model_dir, all_turns, trained):
    fmt = FormatConfig(enable_concatenated_multi_turn=all_turns)
    chat = data_tokenizer(ModelConfig(model_path=str(tiny_model_dir)), fmt)
    exp = row_to_experience(TOOL_ROW, fmt, chat, "sft")
    tokenizer = chat.tokenizer
    assert "<tools>" in tokenizer.decode(exp.tokens[: exp.prompt_length])  # the row's tools, rendered
    response, mask = exp.tokens[exp.prompt_length :], exp.action_mask.bool()
    assert tokenizer.decode(response[mask]) == trained
    untrained = tokenizer.decode(exp.tokens[: exp.prompt_length]) + tokenizer.decode(response[~mask])
    assert "<tool_response>\n7\n</tool_response>" in untrained  # the tool's turn is context


def test_sft_takes_the_format_chat_template_and_thinking(tiny_model_dir):
    template = "{% for m in messages %}[{{ m.role }}]{{ m.content }}<|im_end|>{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}"
    fmt = FormatConfig(chat_template=template)
    chat = data_tokenizer(ModelConfig(model_path=str(tiny_model_dir)), fmt)
    exp = row_to_experience(
        {"message": TOOL_ROW["message"][:1] + [{"role": "assistant", "content": "7"}]}, fmt, chat, "sft"
    )
    assert chat.tokenizer.decode(exp.tokens) == "[user]3+4=<|im_end|>[assistant]7<|im_end|>"
    assert exp.prompt_length == len(chat.prompt_ids(TOOL_ROW["message"][:1]))
