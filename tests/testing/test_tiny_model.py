"""The tiny model builder: tokenizer round trip, chat template, determinism."""

from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import Tokenizer
from transformers import AutoConfig, AutoTokenizer

from trinity.testing.tiny_model import CORPUS, build_tiny_model


def test_ids_round_trip_through_auto_tokenizer(tiny_model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    raw = Tokenizer.from_file(str(tiny_model_dir / "tokenizer.json"))
    text = CORPUS.read_text() + " Héllo wörld  12345 \n\n  tabs\t!! <|im_end|>"
    ids = tokenizer(text)["input_ids"]
    assert ids == raw.encode(text).ids
    assert tokenizer.decode(ids) == text
    assert tokenizer.padding_side == "left"
    assert tokenizer.convert_ids_to_tokens(tokenizer.eos_token_id) == "<|im_end|>"
    assert tokenizer.pad_token == "<|endoftext|>"


def test_chat_template_is_chatml(tiny_model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 12+7?"}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert (
        text
        == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 12+7?<|im_end|>\n<|im_start|>assistant\n"
    )
    no_think = tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True, enable_thinking=False
    )
    assert no_think == text + "<think>\n\n</think>\n\n"
    im_start = tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert tokenizer(text)["input_ids"].count(im_start) == 3


def test_build_is_deterministic_and_shaped(tmp_path: Path, tiny_model_dir: Path) -> None:
    again = build_tiny_model(tmp_path / "again")
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert (again / name).read_bytes() == (tiny_model_dir / name).read_bytes(), name
    other = build_tiny_model(tmp_path / "other", seed=1)
    assert (other / "model.safetensors").read_bytes() != (again / "model.safetensors").read_bytes()
    config = AutoConfig.from_pretrained(again)
    assert config.model_type == "qwen2"
    assert config.hidden_size // config.num_attention_heads == 32


@pytest.mark.parametrize("hidden_size,num_heads", [(64, 2), (256, 8)])
def test_other_shapes(tmp_path: Path, hidden_size: int, num_heads: int) -> None:
    config = AutoConfig.from_pretrained(
        build_tiny_model(tmp_path, hidden_size=hidden_size, num_heads=num_heads, num_kv_heads=num_heads // 2)
    )
    assert (config.hidden_size, config.num_attention_heads) == (hidden_size, num_heads)


def test_embedding_rows_pad_the_model_past_the_tokenizer(tmp_path: Path) -> None:
    """A real model's shape for speed figures (benchmarks/bench_e2e.py gpu): Qwen pads its
    tokenizer's 151,665 ids to 151,936 rows; ids past the tokenizer decode to nothing."""
    path = build_tiny_model(tmp_path / "padded", hidden_size=32, num_layers=1, num_heads=2, embedding_rows=1000)
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert AutoConfig.from_pretrained(path).vocab_size == 1000 > len(tokenizer)
    assert tokenizer.decode([999]) == ""
