"""Dataset rows become training examples: CPT text and plaintext DPO pairs."""

from __future__ import annotations

from trinity.config.schema import FormatConfig, ModelConfig
from trinity.trainer.supervised import ChatTokenizer, row_to_experience


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
