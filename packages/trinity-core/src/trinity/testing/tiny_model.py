"""Tiny Qwen2-architecture models (dense, mixture-of-experts, vision) built locally, for tests and
the quickstart (no downloads).

The tokenizer is a byte-level BPE trained with ``tokenizers`` on ``tiny_corpus.txt`` with
the exact pipeline ``Qwen2Tokenizer`` rebuilds on load (NFC, Qwen's regex split, ByteLevel
without its own regex), so ids round-trip through ``AutoTokenizer``. The default shape
(hidden 128, 4 heads -> head_dim 32, 2 KV heads) is one vLLM's CPU backend accepts.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

CORPUS = Path(__file__).with_name("tiny_corpus.txt")
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
QWEN_SPLIT_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# ChatML as Qwen2.5 writes it: ``tools`` offered in the system turn, an assistant's
# ``tool_calls`` as ``<tool_call>`` blocks, tool results as user turns of ``<tool_response>``
# blocks; ``enable_thinking=False`` prefills an empty think block (as Qwen3 does), otherwise
# the flag changes nothing.
CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}"
    '{{- \'\\n</tools>\\n\\nCall a tool with <tool_call>{"name": <name>, "arguments": <object>}</tool_call>.\' }}'
    "{{- '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'system' and tools and loop.first %}"
    "{%- elif message['role'] == 'tool' %}"
    "{%- if loop.first or loop.previtem['role'] != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message['content'] + '\\n</tool_response>' }}"
    "{%- if loop.last or loop.nextitem['role'] != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') }}"
    "{%- for call in message.tool_calls or [] %}"
    "{%- set fn = call.function if call.function is defined else call %}"
    "{%- set arguments = fn.arguments if fn.arguments is string else fn.arguments | tojson %}"
    "{{- '\\n<tool_call>\\n{\"name\": \"' + fn.name + '\", \"arguments\": ' + arguments + '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
)


def _train_tokenizer(vocab_size: int) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_SPLIT_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train([str(CORPUS)], trainer)
    return tokenizer


def build_tiny_model(
    out_dir: str | Path,
    hidden_size: int = 128,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 256,
    vocab_size: int = 512,
    seed: int = 0,
    embedding_rows: int | None = None,
) -> Path:
    """Write a randomly initialised Qwen2 model and its tokenizer to ``out_dir``.

    Deterministic for a given ``seed`` (global RNG state is left untouched). The tokenizer
    pads on the left, ends turns with ``<|im_end|>`` (the EOS) and pads with ``<|endoftext|>``.
    ``embedding_rows`` pads the embedding and LM head past the tokenizer's ``vocab_size``, as
    Qwen pads its 151,665 tokens to 151,936 rows: a real model's shape for speed figures (ids
    past the tokenizer decode to nothing).
    """
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    raw = _train_tokenizer(vocab_size)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="<|endoftext|>",
        padding_side="left",
        chat_template=CHAT_TEMPLATE,
        model_max_length=4096,
    )
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>"]})
    ids = {token: raw.token_to_id(token) for token in SPECIAL_TOKENS}
    config = Qwen2Config(
        vocab_size=max(raw.get_vocab_size(), embedding_rows or 0),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
    )
    _save_random(Qwen2ForCausalLM, config, tokenizer, ids, out, seed)
    return out


def build_tiny_moe_model(
    out_dir: str | Path,
    hidden_size: int = 128,
    num_layers: int = 2,
    num_experts: int = 8,
    experts_per_token: int = 2,
    moe_intermediate_size: int = 64,
    expert_std: float = 0.2,
    seed: int = 0,
) -> Path:
    """Write a randomly initialised Qwen3-MoE model (every layer a sparse MoE block of
    ``num_experts`` experts, ``experts_per_token`` routed per token, top-k weights renormalised)
    with ``build_tiny_model``'s tokenizer to ``out_dir``: the model router replay is tested on.

    The experts' weights are drawn with ``expert_std``, ten times the other weights' 0.02: at 0.02
    a random expert's output is a rounding error beside the residual stream and no routing choice
    would change a logprob, where a trained MoE's experts carry its MLP's work. Deterministic for a
    given ``seed``."""
    from transformers import AutoConfig, AutoTokenizer, Qwen3MoeConfig, Qwen3MoeForCausalLM

    out = Path(out_dir)
    dense = build_tiny_model(out, hidden_size, num_layers, seed=seed)
    tokenizer = AutoTokenizer.from_pretrained(dense)
    text = AutoConfig.from_pretrained(dense)
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in SPECIAL_TOKENS}
    config = Qwen3MoeConfig(
        vocab_size=text.vocab_size,
        hidden_size=hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=text.num_attention_heads,
        num_key_value_heads=text.num_key_value_heads,
        head_dim=hidden_size // text.num_attention_heads,
        intermediate_size=text.intermediate_size,
        moe_intermediate_size=moe_intermediate_size,
        num_experts=num_experts,
        num_experts_per_tok=experts_per_token,
        norm_topk_prob=True,
        decoder_sparse_step=1,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
    )

    def scale_experts(model: torch.nn.Module) -> None:
        for name, param in model.named_parameters():
            if ".experts." in name:
                torch.nn.init.normal_(param, std=expert_std)

    _save_random(Qwen3MoeForCausalLM, config, tokenizer, ids, out, seed, scale_experts)
    return out


def _save_random(
    model_class: type,
    config: Any,
    tokenizer: Any,
    ids: dict[str, int],
    out: Path,
    seed: int,
    init: Callable[[torch.nn.Module], None] | None = None,
) -> None:
    """A ``model_class`` of ``config`` with random weights from ``seed`` (global RNG state left
    untouched; ``init`` redraws some), ending at ``<|im_end|>`` / ``<|endoftext|>``, saved with
    ``tokenizer`` to ``out``."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_class(config)
        if init is not None:
            with torch.no_grad():
                init(model)
    model.generation_config.eos_token_id = [ids["<|im_end|>"], ids["<|endoftext|>"]]
    model.generation_config.pad_token_id = ids["<|endoftext|>"]
    for stale in out.glob("*.safetensors"):
        stale.unlink()
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
"""Qwen2-VL's special tokens: an image is ``<|vision_start|><|image_pad|><|vision_end|>`` in the
rendered prompt, and its one ``<|image_pad|>`` becomes one token per merged patch."""
_VISION_PARTS = (
    "{%- macro render(content) %}"
    "{%- if content is string %}{{- content }}"
    "{%- else %}{%- for part in content or [] %}"
    "{%- if part['type'] == 'image' or 'image' in part %}{{- '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{%- elif part['type'] == 'video' or 'video' in part %}{{- '<|vision_start|><|video_pad|><|vision_end|>' }}"
    "{%- else %}{{- part['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}"
    "{%- endmacro %}"
)
VL_CHAT_TEMPLATE = _VISION_PARTS + CHAT_TEMPLATE.replace("(message['content'] or '')", "render(message['content'])")
"""``CHAT_TEMPLATE`` with OpenAI-style content parts: text as is, each image or video part as
Qwen2-VL's vision block."""


def build_tiny_vl_model(
    out_dir: str | Path,
    hidden_size: int = 128,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 256,
    vision_dim: int = 64,
    vision_depth: int = 2,
    image_side: int = 56,
    seed: int = 0,
) -> Path:
    """Write a randomly initialised Qwen2-VL model (Trinity-RFT's VLM examples use Qwen2.5-VL,
    the same family) with a tiny vision tower, its tokenizer and image processor to ``out_dir``.

    The text side is ``build_tiny_model``'s shape and tokenizer plus ``VISION_TOKENS``; images are
    resized to ``image_side`` pixels square (14-pixel patches, merged 2 x 2: a 56-pixel image is 4
    tokens). Deterministic for a given ``seed``; transformers' video processors need torchvision,
    so the folder has no video processor.
    """
    from transformers import AutoConfig, AutoTokenizer, Qwen2VLConfig, Qwen2VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    out = Path(out_dir)
    text = build_tiny_model(out, hidden_size, num_layers, num_heads, num_kv_heads, intermediate_size, seed=seed)
    tokenizer = AutoTokenizer.from_pretrained(text)
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>", *VISION_TOKENS]})
    tokenizer.chat_template = VL_CHAT_TEMPLATE
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in (*SPECIAL_TOKENS, *VISION_TOKENS)}
    text_config = AutoConfig.from_pretrained(text).to_dict()
    unit = hidden_size // num_heads // 16  # Qwen2-VL splits head_dim / 2 as 2:3:3 (16, 24, 24 of 64)
    text_config.update(
        vocab_size=len(tokenizer),
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 1e6,
            "mrope_section": [2 * unit, 3 * unit, 3 * unit],
        },
    )
    config = Qwen2VLConfig(
        text_config=text_config,
        vision_config={
            "depth": vision_depth,
            "embed_dim": vision_dim,
            "hidden_size": hidden_size,
            "num_heads": 4,
            "mlp_ratio": 2,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
        },
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=True,
    )
    _save_random(Qwen2VLForConditionalGeneration, config, tokenizer, ids, out, seed)
    pixels = image_side * image_side
    Qwen2VLImageProcessorPil(min_pixels=pixels, max_pixels=pixels).save_pretrained(out)
    return out
