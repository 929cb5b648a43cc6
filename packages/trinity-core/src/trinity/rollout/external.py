"""``engine_type: external``: rollouts from any OpenAI-compatible server, by URL.

For evaluating an API model (bench mode, ``model.external_model.enable``), and for judges,
reward models and teachers among ``explorer.auxiliary_models``. The server comes from
``external_model_config`` (``base_url_env``, ``api_key_env``, ``model_name``) and applies its
own chat template (offered the call's ``tools`` and the section's template and
``enable_thinking``). It takes no weights and gives no token ids unless the server returns them:
its experiences are for evaluation, not training. docs/engines.md has the details.
"""

from __future__ import annotations

import os
from typing import Any

from trinity.config.schema import InferenceModelConfig, ModelConfig
from trinity.model.engines import Completion, EngineStartError, RolloutEngine, SamplingArgs
from trinity.model.tokenization import template_settings


class ExternalEngine(RolloutEngine):
    """Each request is one call of the server's chat or text completions."""

    concurrent = True
    takes_weights = False

    def __init__(self, config: InferenceModelConfig, model: ModelConfig) -> None:
        import httpx
        import openai

        external = config.external_model_config
        url = os.environ.get(external.base_url_env, "")
        if not url:
            raise EngineStartError(
                f"external engine: ${external.base_url_env} (external_model.base_url_env) is not set"
            )
        try:
            httpx.get(f"{url.rstrip('/')}/models", timeout=10).raise_for_status()
        except httpx.HTTPError as exc:
            raise EngineStartError(
                f"external engine: no OpenAI-compatible server answers at {url} (${external.base_url_env}): {exc}"
            ) from None
        self.model_name = external.model_name or config.name or config.model_path or "default"
        self.client = openai.AsyncOpenAI(base_url=url, api_key=os.environ.get(external.api_key_env) or "EMPTY")
        self.max_tokens = config.max_response_tokens or model.max_response_tokens
        template, kwargs = template_settings(config.chat_template, config.enable_thinking, model)
        self.template_fields = {"chat_template": template, "chat_template_kwargs": kwargs or None}

    def generate(self, prompts: list[str], args: SamplingArgs) -> list[list[Completion]]:
        raise NotImplementedError("the external engine is concurrent: the client sends generate_async")

    def chat(self, conversations: list[list[dict[str, Any]]], args: SamplingArgs) -> list[list[Completion]]:
        raise NotImplementedError("the external engine is concurrent: the client sends chat_async")

    def logprobs(self, token_ids: list[list[int]]) -> list[list[float]]:
        raise NotImplementedError("an external engine gives no logprobs of given tokens")

    async def chat_async(self, conversations: list[list[dict[str, Any]]], args: SamplingArgs) -> list[list[Completion]]:
        results = []
        for messages in conversations:
            response = await self.client.chat.completions.create(
                model=self.model_name,
                messages=messages,
                logprobs=True,
                **self._sampling(args),
                **self._chat_fields(args),
            )
            results.append(
                [_completion(c.message.content or "", c.finish_reason, c.logprobs) for c in response.choices]
            )
        return results

    async def generate_async(self, prompts: list[str], args: SamplingArgs) -> list[list[Completion]]:
        results = []
        for prompt in prompts:
            response = await self.client.completions.create(
                model=self.model_name, prompt=prompt, logprobs=1, **self._sampling(args)
            )
            results.append([_completion(c.text, c.finish_reason, None) for c in response.choices])
        return results

    def update_weights(self, state_dict: Any = None, checkpoint_path: str | None = None, version: int = 0) -> None:
        raise NotImplementedError("an external engine takes no weights: its server owns the model")

    def _chat_fields(self, args: SamplingArgs) -> dict[str, Any]:
        """The call's tools and the configured template settings, where there are any."""
        fields: dict[str, Any] = {"tools": args.tools} if args.tools else {}
        extra = {key: value for key, value in self.template_fields.items() if value is not None}
        return {**fields, "extra_body": extra} if extra else fields

    def _sampling(self, args: SamplingArgs) -> dict[str, Any]:
        sampling = {"n": args.n, "temperature": args.temperature, "top_p": args.top_p, "seed": args.seed}
        sampling["max_tokens"] = args.max_tokens or self.max_tokens
        if args.stop:
            sampling["stop"] = args.stop
        return {key: value for key, value in sampling.items() if value is not None}


def _completion(text: str, finish_reason: str | None, logprobs: Any) -> Completion:
    content = getattr(logprobs, "content", None) or []
    return Completion(
        prompt_token_ids=[],
        response_token_ids=[],
        response_logprobs=[entry.logprob for entry in content],
        text=text,
        finish_reason="length" if finish_reason == "length" else "stop",
    )
