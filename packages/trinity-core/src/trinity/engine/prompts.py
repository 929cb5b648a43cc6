"""Prompt token ids as every rollout engine builds them, so that engines agree on them.

Chat template: ``rollout_model.chat_template`` over ``model.custom_chat_template`` over the
file at ``model.chat_template_path`` over the tokenizer's own; ``enable_thinking`` from the
rollout model over the model, left undefined for the template when both are unset. A prompt
longer than ``max_prompt_tokens`` keeps its first ``max_prompt_tokens`` tokens and is marked
truncated (the engine generates nothing for it) with ``model.enable_prompt_truncation``;
without it, a ``ValueError``. A response gets ``response_budget`` tokens at most.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trinity.config.schema import InferenceModelConfig, ModelConfig


class PromptFormatter:
    """Tokenises raw prompts and conversations and fits them to ``max_prompt_tokens``."""

    def __init__(self, tokenizer: Any, config: InferenceModelConfig, model: ModelConfig) -> None:
        self.tokenizer = tokenizer
        self.chat_template = config.chat_template or model.custom_chat_template
        if self.chat_template is None and model.chat_template_path:
            self.chat_template = Path(model.chat_template_path).read_text()
        thinking = first(config.enable_thinking, model.enable_thinking)
        # None leaves the flag undefined for the template, so its own default applies.
        self.template_kwargs = {} if thinking is None else {"enable_thinking": thinking}
        self.max_prompt_tokens = first(config.max_prompt_tokens, model.max_prompt_tokens)
        self.enable_truncation = model.enable_prompt_truncation

    def text_ids(self, prompts: list[str]) -> list[list[int]]:
        """Token ids of raw text prompts (with the tokenizer's special tokens), one batched call."""
        return self.tokenizer(prompts, add_special_tokens=True)["input_ids"]

    def chat_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        """Token ids of ``messages`` through the chat template, with the generation prompt."""
        text = self.tokenizer.apply_chat_template(
            messages,
            tokenize=False,
            add_generation_prompt=True,
            chat_template=self.chat_template,
            **self.template_kwargs,
        )
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def fit(self, ids: list[int]) -> tuple[list[int], bool]:
        """``(ids, truncated)``: the prompt as the engine should see it."""
        limit = self.max_prompt_tokens
        if limit is None or len(ids) <= limit:
            return ids, False
        if not self.enable_truncation:
            raise ValueError(
                f"prompt of {len(ids)} tokens exceeds max_prompt_tokens {limit}; "
                "set model.enable_prompt_truncation to skip such prompts instead"
            )
        return ids[:limit], True


def response_budget(
    max_tokens: int | None, max_response_tokens: int | None, max_model_len: int | None, prompt_length: int
) -> int:
    """Most tokens a response may take: the call's ``max_tokens`` over ``max_response_tokens``,
    bounded by what ``max_model_len`` leaves after the prompt; a ``ValueError`` when none."""
    budget = first(max_tokens, max_response_tokens)
    if max_model_len is not None:
        room = max_model_len - prompt_length
        budget = room if budget is None else min(budget, room)
    if budget is None or budget < 1:
        raise ValueError(
            f"no room to generate: max_tokens {max_tokens}, max_response_tokens {max_response_tokens}, "
            f"max_model_len {max_model_len}, prompt {prompt_length} tokens"
        )
    return budget


def first(*values: Any) -> Any:
    """The first value that is not None (config fallbacks)."""
    return next((v for v in values if v is not None), None)
