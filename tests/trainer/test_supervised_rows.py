"""Dataset rows become training examples: CPT text, plaintext DPO pairs, multi-turn SFT with tools."""

from __future__ import annotations

import json

import pytest

from trinity.config.schema import FormatConfig, ModelConfig, StorageConfig
from trinity.model.tokenization import load_tokenizer
from trinity.trainer.supervised import SupervisedDataError, SupervisedReader, row_to_experience

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
    chat = load_tokenizer(ModelConfig(model_path=str(tiny_model_dir)), fmt)
    exp = row_to_experience({"text": "3 plus 4 is 7."}, fmt, chat, "cpt")
    ids = chat.tokenizer("3 plus 4 is 7.", add_special_tokens=False)["input_ids"]
    assert exp.tokens.tolist() == ids and exp.prompt_length == 1 and exp.action_mask is None


def test_plaintext_dpo_row_needs_no_response_column(tiny_model_dir):
    fmt = FormatConfig(prompt_type="plaintext", prompt_key="question")
    chat = load_tokenizer(ModelConfig(model_path=str(tiny_model_dir)), fmt)
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
    chat = load_tokenizer(ModelConfig(model_path=str(tiny_model_dir)), fmt)
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
    chat = load_tokenizer(ModelConfig(model_path=str(tiny_model_dir)), fmt)
    exp = row_to_experience(
        {"message": TOOL_ROW["message"][:1] + [{"role": "assistant", "content": "7"}]}, fmt, chat, "sft"
    )
    assert chat.tokenizer.decode(exp.tokens) == "[user]3+4=<|im_end|>[assistant]7<|im_end|>"
    assert exp.prompt_length == len(chat.prompt_ids(TOOL_ROW["message"][:1]))


TOOL = {"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}
CONVERSATION = [
    {"role": "user", "content": "3+4="},
    {"role": "assistant", "content": '<tool_call>{"name": "add"}</tool_call>'},
    {"role": "tool", "content": "7"},
    {"role": "assistant", "content": "7"},
]


@pytest.mark.parametrize("encode", [lambda v: v, json.dumps], ids=["lists", "json_text"])
def test_tool_schema_rows_render_their_tools_in_the_prompt(tiny_model_dir, encode):
    """Trinity-RFT's tool schema: messages plus the tools offered, as lists or as JSON text."""
    fmt = FormatConfig(messages_key="messages", enable_concatenated_multi_turn=True)
    chat = load_tokenizer(ModelConfig(model_path=str(tiny_model_dir)), fmt)
    exp = row_to_experience({"messages": encode(CONVERSATION), "tools": encode([TOOL])}, fmt, chat, "sft")
    prompt = chat.tokenizer.decode(exp.tokens[: exp.prompt_length])
    assert '"name": "add"' in prompt and "<tools>" in prompt  # the tools the template renders
    tool_turn = chat.tokenizer.decode(exp.response_tokens[exp.action_mask == 0])
    assert "<tool_response>\n7\n</tool_response>" in tool_turn  # the tool's reply does not train
    plain = row_to_experience({"messages": CONVERSATION}, fmt, chat, "sft")
    assert "<tools>" not in chat.tokenizer.decode(plain.tokens)


def test_bad_tools_and_messages_columns_name_the_file_and_row(tmp_path, tiny_model_dir):
    data = tmp_path / "sft.jsonl"
    rows = [
        {"messages": CONVERSATION, "tools": [TOOL]},
        {"messages": CONVERSATION, "tools": "{not json"},
        {"messages": "[1,"},
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    storage = StorageConfig(name="sft", path=str(data), batch_size=1, format=FormatConfig(messages_key="messages"))
    reader = SupervisedReader(storage, ModelConfig(model_path=str(tiny_model_dir)), "sft")
    reader.order = [0, 1, 2]
    assert reader.read(1)[0].prompt_length > 0
    with pytest.raises(SupervisedDataError, match=rf"{data}, row 2: ValueError: column 'tools' \(tools_key\) is not"):
        reader.read(1)
    reader.index = 2  # a bad row stops the reader where it is
    with pytest.raises(SupervisedDataError, match=r"row 3: ValueError: column 'messages' \(messages_key\) is not"):
        reader.read(1)
