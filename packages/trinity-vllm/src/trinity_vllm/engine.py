"""The vLLM rollout engine (``engine_type: vllm``), as the explorer sees it.

The explorer builds one per ``engine_num``, as it does any rollout engine; each starts its
own Ray actor (``VLLMServer``) holding vLLM with ``ranks_per_engine()`` GPUs where the
cluster has GPUs (none on a CPU), so that vLLM's processes and memory stay out of the
explorer's. This side applies the chat template and prompt limit with a ``ChatTokenizer``
from ``load_tokenizer``, as the reference engine does, then forwards token ids; multi-turn
workflows re-tokenise their conversations with the same.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import ray
import torch
from transformers import GenerationConfig

from trinity.plugin_api import (
    Completion,
    EngineCrashed,
    EngineStartError,
    InferenceModelConfig,
    ModelConfig,
    RolloutEngine,
    SamplingArgs,
    load_tokenizer,
)
from trinity_vllm.server import VLLMServer

logger = logging.getLogger(__name__)


class VLLMRolloutEngine(RolloutEngine):
    """Forwards to a ``VLLMServer`` actor; ``model_version`` follows its weight updates (with
    ``model.lora_configs``, the adapter's: vLLM keeps the base and samples through the adapter).

    ``concurrent``: the explorer sends each workflow's request as it comes; the server hands
    it to vLLM's ``AsyncLLM`` at once, so continuous batching schedules them all.
    """

    concurrent = True
    restartable = True
    in_explorer_process = False  # each engine is a VLLMServer actor that asks for its GPUs
    takes_lora = True
    takes_parallel_keys = True
    takes_partial_rollout = True

    def __init__(self, config: InferenceModelConfig, model: ModelConfig) -> None:
        path = config.model_path or model.model_path
        self.name = f"vllm engine {config.name or path!r}"
        try:
            self.chat_tokenizer = load_tokenizer(model, config, end_of_turn_ids=_eos_ids(path))
        except Exception as exc:
            raise EngineStartError(
                f"{self.name}: cannot load a tokenizer from model_path {path!r}: {type(exc).__name__}: {exc}"
            ) from None
        self._configs = config, model
        self.api_key = config.endpoint_key()
        self._start_server()

    def _start_server(self) -> None:
        """A new ``VLLMServer`` actor with the initial weights, started."""
        config, model = self._configs
        gpus = config.ranks_per_engine() if ray.cluster_resources().get("GPU", 0) else 0
        # vLLM reads its settings (VLLM_CPU_KVCACHE_SPACE, ...) from the environment, which
        # explorer.env_vars sets in this process, not in the new actor's.
        env = {key: value for key, value in os.environ.items() if key.startswith("VLLM_")}
        if env.get("VLLM_API_KEY"):  # vLLM would demand a key trinity's clients do not know
            logger.warning("%s: VLLM_API_KEY is ignored: the endpoint's key is the model's api_key", self.name)
        env["VLLM_API_KEY"] = ""  # also over a value the actor inherits from Ray's environment
        if env.get("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "").strip().lower() in ("1", "true"):
            logger.warning(
                "%s: VLLM_ALLOW_RUNTIME_LORA_UPDATING is ignored: its routes would load any adapter folder a request "
                "names; enable_runtime_lora_updating serves each synced adapter",
                self.name,
            )
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "0"
        actor = ray.remote(num_cpus=0, num_gpus=gpus, max_restarts=0)(VLLMServer)
        self.server = actor.options(runtime_env={"env_vars": env}).remote(config, model, self.name)
        self.model_version = 0
        self.crashed = False
        self.api_url = self._call("start", self.chat_tokenizer.template, self.chat_tokenizer.template_kwargs)

    def restart(self) -> None:
        ray.kill(self.server)  # whatever is left of the old one (a hung actor, its GPU memory)
        self._start_server()

    def generate(self, prompts: list[str], args: SamplingArgs) -> list[list[Completion]]:
        return self._call("generate", self._text_prompts(prompts), args, self.partial_rollout)

    def chat(self, conversations: list[list[dict[str, Any]]], args: SamplingArgs) -> list[list[Completion]]:
        return self._call("generate", self._chat_prompts(conversations, args.tools), args, self.partial_rollout)

    def logprobs(self, token_ids: list[list[int]]) -> list[list[float]]:
        return self._call("logprobs", token_ids)

    async def generate_async(self, prompts: list[str], args: SamplingArgs) -> list[list[Completion]]:
        return await self._call_async("generate", self._text_prompts(prompts), args, self.partial_rollout)

    async def chat_async(self, conversations: list[list[dict[str, Any]]], args: SamplingArgs) -> list[list[Completion]]:
        prompts = self._chat_prompts(conversations, args.tools)
        return await self._call_async("generate", prompts, args, self.partial_rollout)

    async def logprobs_async(self, token_ids: list[list[int]]) -> list[list[float]]:
        return await self._call_async("logprobs", token_ids)

    def _text_prompts(self, prompts: list[str]) -> list[tuple[list[int], int | None]]:
        return [self.chat_tokenizer.fit(ids) for ids in self.chat_tokenizer.text_ids(prompts)]

    def _chat_prompts(
        self, conversations: list[list[dict[str, Any]]], tools: Any
    ) -> list[tuple[list[int], int | None]]:
        return [self.chat_tokenizer.fit(self.chat_tokenizer.prompt_ids(c, tools)) for c in conversations]

    def update_weights(
        self,
        state_dict: dict[str, torch.Tensor] | None = None,
        checkpoint_path: str | None = None,
        version: int = 0,
    ) -> None:
        self.model_version = self._call("update_weights", state_dict, checkpoint_path, version, self.partial_rollout)

    def init_weight_group(self, address: dict[str, Any], rank_offset: int) -> None:
        """nccl sync: this engine's workers join the trainer's weight group from ``rank_offset`` on."""
        self._call("init_weight_group", address, rank_offset)

    def receive_weights(self, meta: list, version: int) -> None:
        """nccl sync: take the trainer's broadcast of ``meta``'s tensors as ``version``."""
        self.model_version = self._call("receive_weights", meta, version, self.partial_rollout)

    def shutdown(self) -> None:
        try:
            ray.get(self.server.shutdown.remote())
        except ray.exceptions.RayActorError:
            pass  # already gone
        finally:
            ray.kill(self.server)

    def _call(self, method: str, *args: Any) -> Any:
        """``server.<method>(*args)``; the server's own error is raised as it was, a dead
        actor as an error naming this engine."""
        with self._errors(method):
            return ray.get(getattr(self.server, method).remote(*args))

    async def _call_async(self, method: str, *args: Any) -> Any:
        """``_call`` awaited: the caller's event loop goes on while vLLM works."""
        with self._errors(method):
            return await getattr(self.server, method).remote(*args)

    @contextmanager
    def _errors(self, method: str) -> Iterator[None]:
        try:
            yield
        except ray.exceptions.RayTaskError as exc:
            raise exc.cause from None
        except ray.exceptions.RayActorError as exc:
            self.crashed = True
            raise EngineCrashed(f"{self.name}: its Ray actor died ({method}): {exc}") from None


def _eos_ids(path: str) -> list[int]:
    """The checkpoint's end-of-sequence ids (``generation_config.json``; none without one):
    what ends an assistant turn besides the tokenizer's EOS."""
    try:
        eos = GenerationConfig.from_pretrained(path).eos_token_id
    except OSError:
        return []
    return eos if isinstance(eos, list) else [] if eos is None else [eos]
