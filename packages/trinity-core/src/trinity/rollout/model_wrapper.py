"""What a workflow sees of a model: sync and async chat/generate that return Experiences.

``ModelWrapper`` turns engine completions into experiences (tokens, logprobs, model version,
truncation status, messages). Each call is one request through the engine's ``EngineClient``,
which batches or streams requests as the engine wants. The runner enters a workflow's wrapper
before the workflow starts, so a batching client waits for its first request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from trinity.common.experience import TOKEN_VERSIONS, TRUNCATED_FROM, Experience
from trinity.common.lazy_import import lazy_module
from trinity.model.engines import Completion, SamplingArgs
from trinity.model.multimodal import MediaError, media_parts, without_media
from trinity.model.tokenization import ChatTokenizer, TokenizedConversation
from trinity.rollout.client import EngineClient

torch = lazy_module("torch")


class ModelWrapper:
    """A model as workflows use it: each call returns one Experience per sampled response.

    ``defaults`` are the sampling settings of the task (model config merged with the
    taskset's ``rollout_args``); keyword arguments of a call override them.
    """

    def __init__(self, client: EngineClient, defaults: SamplingArgs, enable_history: bool = False):
        self.client = client
        self.defaults = defaults
        self.enable_history = enable_history
        self.history: list[Experience] = []

    def __enter__(self) -> ModelWrapper:
        """A workflow starts with this model: its first request is awaited by the batcher."""
        self.client.announce(self)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.client.withdraw(self)

    @property
    def model_version(self) -> int:
        return self.client.model_version

    def _args(self, overrides: dict[str, Any]) -> SamplingArgs:
        unknown = set(overrides) - set(SamplingArgs.__dataclass_fields__)
        if unknown:
            raise TypeError(
                f"unknown sampling arguments {sorted(unknown)}; accepted: {sorted(SamplingArgs.__dataclass_fields__)}"
            )
        return replace(self.defaults, **overrides)

    def chat(self, messages: list[dict[str, Any]], **sampling: Any) -> list[Experience]:
        """Sample responses to a conversation (through the chat template)."""
        args = self._args(sampling)
        (completions,) = self.client.submit("chat", [messages], args, self).result()
        return self._record([_to_experience(c, messages) for c in completions])

    async def chat_async(self, messages: list[dict[str, Any]], **sampling: Any) -> list[Experience]:
        args = self._args(sampling)
        (completions,) = await asyncio.wrap_future(self.client.submit("chat", [messages], args, self))
        return self._record([_to_experience(c, messages) for c in completions])

    def generate(self, prompt: str, **sampling: Any) -> list[Experience]:
        """Sample continuations of raw text (no chat template)."""
        args = self._args(sampling)
        (completions,) = self.client.submit("generate", [prompt], args, self).result()
        return self._record([_to_experience(c, None) for c in completions])

    async def generate_async(self, prompt: str, **sampling: Any) -> list[Experience]:
        args = self._args(sampling)
        (completions,) = await asyncio.wrap_future(self.client.submit("generate", [prompt], args, self))
        return self._record([_to_experience(c, None) for c in completions])

    def get_openai_client(self) -> Any:
        """An ``openai.OpenAI`` client of the engine's endpoint (``enable_openai_api``); with
        ``enable_history`` its chat completions are recorded as experiences."""
        import openai

        client = openai.OpenAI(**self._endpoint())
        if self.enable_history:
            create = client.chat.completions.create

            def create_recorded(**kwargs: Any) -> Any:
                response = create(**_with_tokens(kwargs))
                self._record(self._openai_experiences(response, kwargs["messages"]))
                return response

            client.chat.completions.create = create_recorded
        return client

    def get_openai_async_client(self) -> Any:
        """``openai.AsyncOpenAI`` counterpart of ``get_openai_client``."""
        import openai

        client = openai.AsyncOpenAI(**self._endpoint())
        if self.enable_history:
            create = client.chat.completions.create

            async def create_recorded(**kwargs: Any) -> Any:
                response = await create(**_with_tokens(kwargs))
                self._record(self._openai_experiences(response, kwargs["messages"]))
                return response

            client.chat.completions.create = create_recorded
        return client

    def _openai_experiences(self, response: Any, messages: list[dict[str, Any]]) -> list[Experience]:
        """One experience per choice of a chat completion asked for with ``_with_tokens``."""
        prompt = response.model_extra["prompt_token_ids"]
        completions = [
            Completion(
                prompt_token_ids=prompt,
                response_token_ids=choice.model_extra["token_ids"],
                response_logprobs=[t.logprob for t in choice.logprobs.content],
                text=choice.message.content or "",
                finish_reason="length" if choice.finish_reason == "length" else "stop",
                model_version=self.model_version,
            )
            for choice in response.choices
        ]
        return [_to_experience(c, messages) for c in completions]

    def _endpoint(self) -> dict[str, str]:
        """The OpenAI client's ``base_url`` and ``api_key`` (the endpoint's, else ``EMPTY``)."""
        if self.client.api_url is None:
            raise ValueError(
                "this model serves no OpenAI API: set enable_openai_api on its config "
                "(explorer.rollout_model or the auxiliary model)"
            )
        return {"base_url": self.client.api_url, "api_key": self.client.api_key or "EMPTY"}

    def logprobs(self, token_ids: Sequence[int]) -> list[float]:
        """Logprob of each token given its prefix under the current weights."""
        return self.client.submit("logprobs", [list(token_ids)]).result()[0]

    async def logprobs_async(self, token_ids: Sequence[int]) -> list[float]:
        (logprobs,) = await asyncio.wrap_future(self.client.submit("logprobs", [list(token_ids)]))
        return logprobs

    def tokenize_conversation(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> TokenizedConversation:
        """``messages`` (offered ``tools``) as the engine's chat template tokenises them, masked to
        the assistant turns: the tokens of a multi-turn experience."""
        return self.chat_tokenizer.conversation(messages, tools)

    @property
    def chat_tokenizer(self) -> ChatTokenizer:
        """The engine's chat template and tokenizer (``EngineClient.chat_tokenizer``)."""
        return self.client.chat_tokenizer

    def extract_experience_from_history(self) -> list[Experience]:
        """The experiences recorded since the last call (``enable_history``), clearing them."""
        history, self.history = self.history, []
        return history

    def _record(self, experiences: list[Experience]) -> list[Experience]:
        if self.enable_history:
            self.history.extend(experiences)
        return experiences


def _with_tokens(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Request arguments that make a vLLM endpoint return what an experience needs: token ids
    of prompt and response, and response logprobs."""
    extra_body = {"return_token_ids": True, **(kwargs.get("extra_body") or {})}
    return {**kwargs, "logprobs": True, "extra_body": extra_body}


def _to_experience(completion: Completion, messages: list[dict[str, Any]] | None) -> Experience:
    prompt, response = completion.prompt_token_ids, completion.response_token_ids
    status = "prompt_truncated" if completion.prompt_truncated else None
    if completion.finish_reason == "length":
        status = status or "response_truncated"
    info = {"response_text": completion.text, "finish_reason": completion.finish_reason}
    if completion.prompt_truncated:
        info[TRUNCATED_FROM] = completion.truncated_from
    if completion.token_versions is not None:
        info[TOKEN_VERSIONS] = completion.token_versions
    if messages is not None and completion.multi_modal_inputs is None and media_parts(messages):
        raise MediaError(
            "the rollout engine returned no image tensors for a prompt with images, so the trainer could not "
            "recompute its logprobs: multimodal prompts need a rollout engine that takes images (transformers)"
        )
    return Experience(
        tokens=torch.tensor(prompt + response, dtype=torch.long),
        prompt_length=len(prompt),
        logprobs=torch.tensor(completion.response_logprobs, dtype=torch.float32),
        model_version=completion.model_version,
        truncate_status=status,
        multi_modal_inputs=completion.multi_modal_inputs,
        routed_experts=completion.routed_experts,
        messages=(
            [*without_media(messages), {"role": "assistant", "content": completion.text}]
            if messages is not None
            else None
        ),
        info=info,
    )
