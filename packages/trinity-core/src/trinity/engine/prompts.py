"""Prompt token ids as every rollout engine builds them, so that engines agree on them.

Chat templating is ``trinity.engine.tokenization``'s: the rollout model's ``chat_template``
over ``model.custom_chat_template`` over the file at ``model.chat_template_path`` over the
tokenizer's own; ``enable_thinking`` from the rollout model over the model. A prompt longer
than ``max_prompt_tokens`` keeps its first ``max_prompt_tokens`` tokens and is marked
truncated (the engine generates nothing for it) with ``model.enable_prompt_truncation``;
without it, a ``ValueError``. A response gets ``response_budget`` tokens at most.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trinity.config.schema import InferenceModelConfig, ModelConfig
from trinity.engine.tokenization import ChatTokenizer, template_settings


class PromptFormatter:
    """A rollout engine's tokenisation (``chat``, shared with its workflows) and prompt limits."""

    def __init__(
        self, tokenizer: Any, config: InferenceModelConfig, model: ModelConfig, end_of_turn_ids: Sequence[int] = ()
    ) -> None:
        template, kwargs = template_settings(config.chat_template, config.enable_thinking, model)
        self.chat = ChatTokenizer(tokenizer, template, kwargs, end_of_turn_ids)
        self.max_prompt_tokens = first(config.max_prompt_tokens, model.max_prompt_tokens)
        self.enable_truncation = model.enable_prompt_truncation

    @property
    def tokenizer(self) -> Any:
        return self.chat.tokenizer

    def text_ids(self, prompts: list[str]) -> list[list[int]]:
        """Token ids of raw text prompts (with the tokenizer's special tokens), one batched call."""
        return self.chat.text_ids(prompts)

    def chat_ids(self, messages: list[dict[str, Any]], tools: Any = None) -> list[int]:
        """Token ids of ``messages`` (offering ``tools``) through the chat template, with the generation prompt."""
        return self.chat.prompt_ids(messages, tools)

    def fit(self, ids: list[int]) -> tuple[list[int], int | None]:
        """``(ids, truncated_from)``: the prompt as the engine should see it, and its length
        before it was cut (None where it fits)."""
        limit = self.max_prompt_tokens
        if limit is None or len(ids) <= limit:
            return ids, None
        if not self.enable_truncation:
            raise ValueError(
                f"prompt of {len(ids)} tokens exceeds max_prompt_tokens {limit}; "
                "set model.enable_prompt_truncation to skip such prompts instead"
            )
        return ids[:limit], len(ids)


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
