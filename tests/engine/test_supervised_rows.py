"""Dataset rows become training examples: CPT text, plaintext DPO pairs, tool-calling conversations."""

from __future__ import annotations

import json

import pytest

from trinity.common.tiny_model import CHAT_TEMPLATE
from trinity.config.schema import FormatConfig, ModelConfig, StorageConfig
from trinity.trainer.supervised import ChatTokenizer, SupervisedDataError, SupervisedReader, row_to_experience


def test_cpt_row_is_plain_text_every_token_after_the_first_trains(tiny_model_dir):
    chat = ChatTokenizer(ModelConfig(model_path=str(tiny_model_dir)), FormatConfig(prompt_key="text"))
    exp = row_to_experience({"text": "3 plus 4 is 7."}, FormatConfig(prompt_key="text"), chat, "cpt")
    ids = chat.tokenizer("3 plus 4 is 7.", add_special_tokens=False)["input_ids"]
    assert exp.tokens.tolist() == ids and exp.prompt_length == 1 and exp.action_mask is None


def test_plaintext_dpo_row_needs_no_response_column(tiny_model_dir):
    fmt = FormatConfig(prompt_type="plaintext", prompt_key="question")
    chat = ChatTokenizer(ModelConfig(model_path=str(tiny_model_dir)), fmt)
    exp = row_to_experience({"question": "3+4=", "chosen": "7", "rejected": "8"}, fmt, chat, "dpo")
    prompt = chat.ids([{"role": "user", "content": "3+4="}], generation_prompt=True)
    assert exp.tokens.tolist() == prompt and exp.chosen.numel() and exp.rejected.numel()
    assert not exp.chosen.equal(exp.rejected)


TOOLS_TEMPLATE = (  # the tiny model's template with a tools header, as Qwen's renders one
    "{%- if tools %}{{- '<|im_start|>system\\nTools: ' + (tools | tojson) + '<|im_end|>\\n' }}{%- endif %}"
    + CHAT_TEMPLATE
)
TOOL = {"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}
CALL = [
    {"role": "user", "content": "3+4="},
    {"role": "assistant", "content": '<tool_call>{"name": "add"}</tool_call>'},
    {"role": "tool", "content": "7"},
    {"role": "assistant", "content": "7"},
]


@pytest.mark.parametrize("encode", [lambda v: v, json.dumps], ids=["lists", "json_text"])
def test_tool_schema_rows_render_their_tools_in_the_prompt(tiny_model_dir, encode):
    """Trinity-RFT's tool schema: messages plus the tools offered, as lists or as JSON text."""
    fmt = FormatConfig(messages_key="messages", chat_template=TOOLS_TEMPLATE, enable_concatenated_multi_turn=True)
    chat = ChatTokenizer(ModelConfig(model_path=str(tiny_model_dir)), fmt)
    exp = row_to_experience({"messages": encode(CALL), "tools": encode([TOOL])}, fmt, chat, "sft")
    text = chat.tokenizer.decode(exp.tokens)
    assert text.startswith('<|im_start|>system\nTools: [{"type": "function"') and text.endswith("7<|im_end|>\n")
    tool_turn = chat.tokenizer.decode(exp.response_tokens[exp.action_mask == 0])
    assert "<|im_start|>tool\n7<|im_end|>" in tool_turn  # the tool's reply does not train
    plain = row_to_experience({"messages": CALL}, fmt, chat, "sft")
    assert "Tools:" not in chat.tokenizer.decode(plain.tokens)


def test_bad_tools_and_messages_columns_name_the_file_and_row(tmp_path, tiny_model_dir):
    data = tmp_path / "sft.jsonl"
    rows = [{"messages": CALL, "tools": [TOOL]}, {"messages": CALL, "tools": "{not json"}, {"messages": "[1,"}]
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
