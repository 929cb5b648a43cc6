"""Chat templating and tokenisation: the one path every engine, workflow and dataset takes.

``load_tokenizer`` loads a model's tokenizer as its config says (path, ``trust_remote_code``,
chat template, ``enable_thinking``, prompt limit) into a ``ChatTokenizer``: rollout prompts,
multi-turn re-tokenisation, the SFT/DPO readers and the OpenAI endpoint's ``tools`` all go
through one. Tool calls come back in the Hermes format, which ``TOOL_CALL_PARSERS["hermes"]``
reads. How assistant turns are masked: docs/engines.md.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from trinity.config.schema import FormatConfig, InferenceModelConfig, ModelConfig
from trinity.model.token_budgets import first

Messages = list[dict[str, Any]]

TOOLS_SECTION = """# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{schemas}
</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{{"name": <function-name>, "arguments": <args-json-object>}}
</tool_call>"""
"""The system-prompt section offering tools to a model whose template renders none (Qwen2.5's text)."""

_HERMES_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


@dataclass
class ToolCall:
    """One tool call of a reply: the call, or why it could not be read (``error``)."""

    name: str = ""
    arguments: dict[str, Any] | None = None
    error: str | None = None

    def openai(self) -> dict[str, Any]:
        """The call as an OpenAI ``tool_calls`` entry."""
        return {
            "id": f"call_{uuid.uuid4().hex[:24]}",
            "type": "function",
            "function": {"name": self.name, "arguments": json.dumps(self.arguments, ensure_ascii=False)},
        }


def parse_hermes_tool_calls(text: str) -> list[ToolCall]:
    """Every ``<tool_call>`` block of ``text``, in order; malformed ones carry an ``error``."""
    calls = []
    for block in _HERMES_CALL.findall(text):
        try:
            payload = json.loads(block)
        except json.JSONDecodeError as exc:
            calls.append(ToolCall(error=f"the tool call is not valid JSON ({exc.msg})"))
            continue
        name = payload.get("name") if isinstance(payload, dict) else None
        arguments = payload.get("arguments", {}) if isinstance(payload, dict) else None
        if isinstance(arguments, str):  # some models JSON-encode the arguments twice
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError:
                arguments = None
        if not isinstance(name, str) or not isinstance(arguments, dict):
            calls.append(ToolCall(error='a tool call needs {"name": <string>, "arguments": <object>}'))
        else:
            calls.append(ToolCall(name=name, arguments=arguments))
    return calls


def strip_hermes_tool_calls(text: str) -> str:
    """``text`` without its ``<tool_call>`` blocks (the content of a reply that calls tools)."""
    return _HERMES_CALL.sub("", text).strip()


@dataclass(frozen=True)
class ToolCallParser:
    """Reads the tool calls of a reply (``parse``) and the reply's text without them (``strip``)."""

    parse: Callable[[str], list[ToolCall]]
    strip: Callable[[str], str]


TOOL_CALL_PARSERS = {"hermes": ToolCallParser(parse_hermes_tool_calls, strip_hermes_tool_calls)}
"""Tool-call parsers by ``tool_call_parser`` name (vLLM's names)."""


def tool_schemas(raw: Any) -> list[dict[str, Any]]:
    """OpenAI tool schemas from a list of them or its JSON text (a dataset column); a bare
    function schema is wrapped as ``{"type": "function", "function": ...}``."""
    schemas = json.loads(raw) if isinstance(raw, str) else list(raw or [])
    if not all(isinstance(s, dict) for s in schemas):
        raise ValueError(f"tool schemas must be a list of objects, got {raw!r:.200}")
    return [s if "function" in s else {"type": "function", "function": s} for s in schemas]


def template_settings(
    chat_template: str | None, enable_thinking: bool | None, model: ModelConfig
) -> tuple[str | None, dict[str, Any]]:
    """``(template, template arguments)`` of a model section or dataset format, by the rule of
    ``ModelConfig.chat_template_settings``; an unset ``enable_thinking`` is left undefined for
    the template, so the template's own default applies."""
    template, thinking = model.chat_template_settings(chat_template, enable_thinking)
    return template, ({} if thinking is None else {"enable_thinking": thinking})


@dataclass(frozen=True)
class TokenizedConversation:
    """A conversation as one training sequence: the prompt is everything before the first
    trained assistant token; ``action_mask`` (over ``tokens[prompt_length:]``) is 1 on the
    trained assistant turns' tokens and 0 on everything else (template, user, tool)."""

    tokens: list[int]
    prompt_length: int
    action_mask: list[int]

    @property
    def response(self) -> list[int]:
        """The tokens after the prompt, through the last trained token (template text after
        the last turn's end-of-turn token is dropped)."""
        end = len(self.action_mask) - self.action_mask[::-1].index(1)
        return self.tokens[self.prompt_length : self.prompt_length + end]


class ChatTokenizer:
    """A tokenizer with its chat template, template arguments and, for a rollout model, its
    prompt limit (``fit``); built by ``load_tokenizer``."""

    def __init__(
        self,
        tokenizer: Any,
        chat_template: str | None = None,
        template_kwargs: dict[str, Any] | None = None,
        end_of_turn_ids: Sequence[int] = (),
        max_prompt_tokens: int | None = None,
        enable_truncation: bool = False,
    ) -> None:
        self.tokenizer = tokenizer
        self.template = chat_template
        self.template_kwargs = dict(template_kwargs or {})
        source = chat_template or getattr(tokenizer, "chat_template", None) or ""
        self.renders_tools = "tools" in (source if isinstance(source, str) else json.dumps(source))
        ends = {tokenizer.eos_token_id, *end_of_turn_ids}
        self.end_of_turn_ids = {i for i in ends if i is not None}
        self.max_prompt_tokens = max_prompt_tokens
        self.enable_truncation = enable_truncation

    def render(self, messages: Messages, tools: Any = None, generation_prompt: bool = False) -> str:
        """The text of ``messages`` (offering ``tools``) through the chat template; a ``ValueError``
        where the template refuses them or trips on them (a ``tool_calls`` of the wrong shape)."""
        messages, schemas = self._with_tools(messages, tools)
        try:
            return self.tokenizer.apply_chat_template(
                messages,
                tools=schemas,
                tokenize=False,
                add_generation_prompt=generation_prompt,
                chat_template=self.template,
                **self.template_kwargs,
            )
        except Exception as exc:  # jinja's errors, the template's raise_exception, a TypeError in its filters
            raise ValueError(f"the chat template cannot render these messages ({type(exc).__name__}: {exc})") from exc

    def encode(self, text: str) -> list[int]:
        """Token ids of rendered text (the template wrote its special tokens already)."""
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def text_ids(self, prompts: list[str]) -> list[list[int]]:
        """Token ids of raw text prompts (with the tokenizer's special tokens), one batched call."""
        return self.tokenizer(prompts, add_special_tokens=True)["input_ids"]

    def prompt_ids(self, messages: Messages, tools: Any = None) -> list[int]:
        """Token ids of ``messages`` with the generation prompt: what the model continues."""
        return self.encode(self.render(messages, tools, generation_prompt=True))

    def fit(self, ids: list[int]) -> tuple[list[int], int | None]:
        """``(ids, truncated_from)``: a prompt as the engine should see it, and its length before
        ``max_prompt_tokens`` cut it (None where it fits); without ``enable_truncation``, a
        ``ValueError`` for a prompt too long."""
        limit = self.max_prompt_tokens
        if limit is None or len(ids) <= limit:
            return ids, None
        if not self.enable_truncation:
            raise ValueError(
                f"prompt of {len(ids)} tokens exceeds max_prompt_tokens {limit}; "
                "set model.enable_prompt_truncation to skip such prompts instead"
            )
        return ids[:limit], len(ids)

    def conversation(
        self, messages: Messages, tools: Any = None, last_turn_only: bool = False
    ) -> TokenizedConversation:
        """``messages`` as one sequence masked to its assistant turns (only the last one with
        ``last_turn_only``); a ``ValueError`` names the turn the template renders inconsistently.

        Turns are found by rendering prefixes, as Trinity-RFT does, but in characters mapped to
        tokens through the tokenizer's offsets, so a merge of text into tokens at a turn boundary
        does not move them: assistant turn ``i`` starts where the conversation before it, rendered
        with the generation prompt, stops agreeing with the whole (so a prefilled
        ``<think></think>`` that past turns lack is context), and ends with its end-of-turn token
        (the template's text after that, such as ChatML's newline, is not the model's)."""
        text = self.render(messages, tools)
        turns = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
        if not turns:
            raise ValueError("the conversation has no assistant turn")
        if not getattr(self.tokenizer, "is_fast", False):
            raise TypeError(f"{type(self.tokenizer).__name__} is not a fast tokenizer: masks need its offsets")
        spans = [self._turn_span(messages, tools, text, i) for i in (turns[-1:] if last_turn_only else turns)]
        encoded = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        tokens, offsets = list(encoded["input_ids"]), encoded["offset_mapping"]
        mask = [0] * len(tokens)
        for turn, (start, end) in zip(turns[-len(spans) :], spans, strict=True):
            stop = len(text) if end is None else end
            covered = [k for k, (lo, hi) in enumerate(offsets) if lo < stop and hi > start]
            ends = [k for k in covered if tokens[k] in self.end_of_turn_ids]
            if not covered or (end is None and not ends):
                raise ValueError(f"the chat template renders no end of the assistant turn of message {turn}")
            last = (ends[0] if end is None else ends[-1]) if ends else covered[-1]
            for k in covered[: covered.index(last) + 1]:
                mask[k] = 1
        if 1 not in mask:
            raise ValueError("the chat template renders no assistant text")
        prompt_length = mask.index(1)
        return TokenizedConversation(tokens, prompt_length, mask[prompt_length:])

    def _turn_span(self, messages: Messages, tools: Any, text: str, i: int) -> tuple[int, int | None]:
        """Characters of assistant turn ``i`` in ``text``: from where the prompt of the turn stops
        agreeing with the conversation, to where the conversation through the turn ends (None
        where the template renders that prefix differently: up to the end-of-turn token)."""
        before = self.render(messages[:i], tools) if i else ""
        if not text.startswith(before):
            raise ValueError(
                f"the chat template renders the messages before message {i} differently inside the "
                "whole conversation, so assistant turn tokens cannot be located"
            )
        prompt = self.render(messages[:i], tools, generation_prompt=True) if i else ""
        start = len(os.path.commonprefix([prompt, text]))
        through = self.render(messages[: i + 1], tools)
        return start, (len(through) if text.startswith(through) else None)

    def _with_tools(self, messages: Messages, tools: Any) -> tuple[Messages, list[dict[str, Any]] | None]:
        """The template's ``tools``; for a template that renders none, the messages with the
        tools offered in the system prompt instead (``TOOLS_SECTION``)."""
        schemas = tool_schemas(tools) or None
        if schemas is None or self.renders_tools:
            return messages, schemas
        section = TOOLS_SECTION.format(schemas="\n".join(json.dumps(s, ensure_ascii=False) for s in schemas))
        if messages and messages[0].get("role") == "system":
            return [{**messages[0], "content": f"{messages[0]['content']}\n\n{section}"}, *messages[1:]], None
        return [{"role": "system", "content": section}, *messages], None


def load_tokenizer(
    model: ModelConfig, section: InferenceModelConfig | FormatConfig | None = None, end_of_turn_ids: Sequence[int] = ()
) -> ChatTokenizer:
    """The one loader of tokenizers: ``model``'s, or that of ``section``, a rollout or auxiliary
    model (its own path, ``trust_remote_code`` and ``max_prompt_tokens`` over the model's) or a
    dataset's format; with the template and ``enable_thinking`` ``template_settings`` resolves.
    ``end_of_turn_ids``: what ends an assistant turn besides the tokenizer's EOS."""
    from transformers import AutoTokenizer

    inference = section if isinstance(section, InferenceModelConfig) else None
    path = (inference.model_path if inference else None) or model.model_path
    trust_remote_code = inference.trust_remote_code if inference else model.trust_remote_code
    chat_template = getattr(section, "chat_template", None)
    template, kwargs = template_settings(chat_template, getattr(section, "enable_thinking", None), model)
    return ChatTokenizer(
        AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code),
        template,
        kwargs,
        end_of_turn_ids,
        max_prompt_tokens=first(inference.max_prompt_tokens, model.max_prompt_tokens) if inference else None,
        enable_truncation=model.enable_prompt_truncation,
    )
